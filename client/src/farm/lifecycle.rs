//! Starting, restarting and ending a farm's daemons, all through [`crate::supervisor`].
//!
//! How many daemons may start is checked before the first one does ([`super::size`]). Spawned
//! daemons get a parent-death signal (unless detached) and `--parent-pid`; a resident farm's
//! daemons lead process groups of their own, which is how [`super::ops`] tells them from a
//! running job's temporary farm. A lost daemon is killed, reaped and replaced under the same id,
//! on the farm's own thread, since a parent-death signal fires when the *thread* that spawned
//! the child ends.
//! Must never leave a spawned daemon running or its segment behind when the farm is dropped.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpfarm_protocol::event;
use gpfarm_protocol::process;
use gpfarm_protocol::segment::{self, list_segments, remove_stale_segments};
use gpfarm_protocol::{DaemonId, DaemonState, FarmName, Request, SegmentName};

use super::daemon::Daemon;
use super::handshake::{await_available, check_versions, hello};
use super::ops::{FarmKind, group_by_farm};
use super::size::Room;
use super::{Farm, FarmConfig, FarmError};
use crate::supervisor::{Liveness, LocateError, ParentDeath, Supervised, locate_executable, signal_daemon};

/// Starts of a replacement daemon in one try to replace it.
const RESPAWN_TRIES: usize = 3;
/// Starts of one daemon that is killed from outside before it is ready, before start-up gives up.
const START_TRIES: usize = 8;
/// How long a client waits for a resident farm's keeper to let go of a daemon it just met.
const KEEPER_HOLD: Duration = Duration::from_secs(5);
/// A keeper's first wait before it tries again to replace a daemon it could not replace.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest such wait.
pub const RETRY_MOST: Duration = Duration::from_millis(500);
/// A daemon whose resident memory, idle after a unit, exceeds this many times its warm size is
/// replaced (unless [`FarmConfig::max_rss`] sets the limit).
pub const RSS_FACTOR: u64 = 4;
/// How long dropped daemons get to shut down cleanly before they are killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Finds `gpfarmd`: `GPFARMD`, then beside the current executable (and one level up, where
/// test binaries live), then on `PATH`.
pub fn daemon_executable() -> Result<PathBuf, LocateError> {
    locate_executable("gpfarmd", "GPFARMD")
}

fn daemon_command(exe: &Path, farm: &FarmName, id: DaemonId, config: &FarmConfig) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("--farm").arg(farm.as_str()).arg("--id").arg(id.to_string());
    cmd.arg("--warmup-arch").arg(config.warmup_arch.to_string());
    cmd.arg("--gpu-context").arg(if config.gpu_context { "auto" } else { "off" });
    cmd.arg("--malloc").arg(if config.tuned_allocator { "tuned" } else { "default" });
    if let Some(cuda) = &config.cuda {
        cmd.arg("--cuda").arg(cuda);
    }
    if !config.detached {
        cmd.arg("--parent-pid").arg(std::process::id().to_string());
    }
    if config.resident || config.detached {
        // The mark of a resident farm (see `ops`); the farm ends on its starter's Ctrl-C through
        // the starter's shutdown, not through the terminal's signal.
        cmd.process_group(0);
    }
    cmd.envs(config.env.iter().map(|(k, v)| (k, v)));
    // The daemon makes its segment where this process looks for it, whatever it would find.
    if let Ok(dir) = gpfarm_protocol::dir::segment_dir() {
        cmd.env(gpfarm_protocol::dir::DIR_VAR, dir);
    }
    // A detached daemon must not hold its starter's terminal or pipes open: `$(gpfarm daemons
    // start --detach)` would never return. Why it failed to start still reaches the client
    // through its segment.
    let stderr = if config.detached { Stdio::null() } else { Stdio::inherit() };
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
    cmd
}

/// How a daemon ends with its farm: SIGTERM, which it handles by removing its segment; or, for
/// `gpfarm daemons start --detach`, not at all.
fn parent_death(config: &FarmConfig) -> ParentDeath {
    if config.detached { ParentDeath::Outlive } else { ParentDeath::Signal(libc::SIGTERM) }
}

fn spawn_daemon(
    exe: &Path,
    farm: &FarmName,
    id: DaemonId,
    config: &FarmConfig,
) -> Result<Supervised, FarmError> {
    Supervised::spawn(daemon_command(exe, farm, id, config), parent_death(config))
        .map_err(|source| FarmError::Spawn { id, source })
}

impl Farm {
    /// Spawns `config.daemons` daemons and waits until every one is warm and has shaken hands.
    /// A count this machine cannot hold (0, or more than its memory and `/dev/shm` take) is
    /// refused before any daemon starts; more than one per core is only warned about. Stale
    /// segments of this user's crashed runs are removed first.
    pub fn spawn(config: FarmConfig) -> Result<Farm, FarmError> {
        Farm::spawn_named(FarmName::random(), config)
    }

    /// As [`Farm::spawn`], with a chosen farm name.
    pub fn spawn_named(name: FarmName, config: FarmConfig) -> Result<Farm, FarmError> {
        let room = Room::here();
        room.check(config.daemons)?;
        if config.daemons > room.cores {
            tracing::warn!(
                "{} daemons on {} cores: more than one per core adds start-up time and memory, not speed",
                config.daemons,
                room.cores
            );
        }
        let removed = remove_stale_segments(None);
        if !removed.is_empty() {
            tracing::info!(count = removed.len(), "removed stale segments");
        }
        // A name held by a live farm or by another user's file is an error here, saying whose,
        // rather than a daemon that exits with the reason on a stderr nobody may see.
        for id in (0..config.daemons.min(usize::from(u16::MAX)) as u16).map(DaemonId) {
            let seg_name = SegmentName::new(&name, id);
            if let Some(why) = segment::name_taken(&seg_name) {
                return Err(gpfarm_protocol::SegmentError::Exists { name: seg_name.to_string(), why }.into());
            }
        }
        let exe = match &config.executable {
            Some(p) => p.clone(),
            None => daemon_executable()?,
        };
        // `check` bounds the count to 1..=u16::MAX.
        let n = config.daemons.clamp(1, u16::MAX as usize) as u16;
        let mut farm = Farm {
            name: name.clone(),
            daemons: Vec::new(),
            config: config.clone(),
            owns_daemons: true,
            backoff: Default::default(),
        };
        // On any error below, dropping what was started kills and reaps it. All start at once,
        // so their warm-ups overlap; one killed from outside on the way is started again.
        let mut children = Vec::with_capacity(usize::from(n));
        for id in (0..n).map(DaemonId) {
            children.push((id, spawn_daemon(&exe, &name, id, &config)?));
        }
        for (id, child) in children {
            // On an error, `farm` shuts down its started daemons; the rest are killed as they drop.
            farm.daemons.push(start_daemon(&exe, &name, id, &config, Some(child))?);
        }
        check_versions(&farm.daemons)?;
        Ok(farm)
    }

    /// Attaches to the daemons of a farm started by `gpfarm daemons start`: the named farm, or
    /// the only resident farm of this user if no name is given (running jobs' temporary farms
    /// are not for sharing). A named farm with no daemon running but a live keeper (between a
    /// daemon's death and its replacement) is waited for, up to [`FarmConfig::start_timeout`].
    pub fn attach(name: Option<&FarmName>, config: FarmConfig) -> Result<Farm, FarmError> {
        // A named farm whose keeper lives is between two lives of its daemons (the old one
        // killed, the new one not yet started): it is looked for again until the start-up
        // timeout.
        // A keeper stopped by a signal starts none: said after `STOPPED_LIMIT`, not the timeout.
        let deadline = Instant::now() + config.start_timeout;
        let mut keeper_stopped: Option<Instant> = None;
        let (live, mut farms) = loop {
            let (live, farms) = running_farms();
            let keepers =
                name.filter(|n| !farms.contains_key(*n)).map(process::keepers_of).unwrap_or_default();
            if keepers.is_empty() || Instant::now() >= deadline {
                break (live, farms);
            }
            match keepers.iter().all(|&k| process::is_stopped(k)) {
                false => keeper_stopped = None,
                true if keeper_stopped.get_or_insert_with(Instant::now).elapsed()
                    >= super::daemon::STOPPED_LIMIT =>
                {
                    return Err(FarmError::Daemon {
                        id: DaemonId(0),
                        message: keeper_is_stopped(keepers[0]),
                    });
                }
                true => {}
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if name.is_none() {
            farms.retain(|farm, ids| {
                let pids = ids.iter().filter_map(|&id| live.get(&SegmentName::new(farm, id)).copied());
                FarmKind::of_daemons(pids) == FarmKind::Resident
            });
        }
        let (farm_name, ids) = match name {
            Some(n) => farms.into_iter().find(|(f, _)| f == n).ok_or_else(|| FarmError::Daemon {
                id: DaemonId(0),
                message: match process::keepers_of(n).first() {
                    Some(keeper) => format!(
                        "farm {n}'s keeper (pid {keeper}) started no daemon within {:?}; see its log, or \
                         stop it with `gpfarm daemons stop {n}`",
                        config.start_timeout
                    ),
                    None => format!("no running farm named {n}; start one with `gpfarm daemons start`"),
                },
            })?,
            None => {
                let mut farms = farms.into_iter();
                match (farms.next(), farms.next()) {
                    (Some(f), None) => f,
                    (None, _) => {
                        return Err(FarmError::Daemon {
                            id: DaemonId(0),
                            message: "no resident farm running; start one with `gpfarm daemons start -n N`"
                                .into(),
                        });
                    }
                    (Some(_), Some(_)) => {
                        return Err(FarmError::Daemon {
                            id: DaemonId(0),
                            message:
                                "several resident farms are running; name one (see `gpfarm daemons status`)"
                                    .into(),
                        });
                    }
                }
            }
        };
        let mut farm = Farm {
            name: farm_name.clone(),
            daemons: Vec::new(),
            config: config.clone(),
            owns_daemons: false,
            backoff: Default::default(),
        };
        for id in ids {
            farm.daemons.push(meet_resident(&farm_name, id, &config)?);
        }
        check_versions(&farm.daemons)?;
        Ok(farm)
    }

    /// Brings a lost daemon back: restarts one this farm spawned; ends one it only attached to
    /// if it still runs (hung, or it broke the protocol) and meets the fresh one its resident
    /// farm's keeper starts in its place. Returns whether it is back.
    pub(super) fn recover(&self, d: &mut Daemon) -> bool {
        match self.bring_back(d) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("daemon {} is lost: {e}", d.id);
                false
            }
        }
    }

    /// As [`Farm::recover`], saying why it failed.
    fn bring_back(&self, d: &mut Daemon) -> Result<(), FarmError> {
        if !self.owns_daemons {
            return reattach(d, &self.name, &self.config);
        }
        let mut tries = 0;
        loop {
            tries += 1;
            match respawn(d, &self.name, &self.config) {
                Ok(()) => return Ok(()),
                Err(e) if tries >= RESPAWN_TRIES || self.config.stopping() => return Err(e),
                Err(_) => {}
            }
        }
    }

    /// Whether daemon `d`, idle, holds more memory than a daemon of this farm may keep: the
    /// configured limit, or [`RSS_FACTOR`] times its warm size. Returns its size and the limit.
    pub(super) fn over_memory(&self, d: &Daemon) -> Option<(u64, u64)> {
        let limit = self.config.max_rss.unwrap_or(RSS_FACTOR * d.warm_rss);
        if limit == 0 {
            return None;
        }
        let rss = process::resident_bytes(d.pid)?;
        (rss > limit).then_some((rss, limit))
    }

    /// Keeps a resident farm whole; for the process that started it (`gpfarm daemons start`),
    /// called every few tens of milliseconds. A daemon is replaced when it died (other than by a
    /// clean exit: that is how `gpfarm daemons stop` ends one, and it is dropped from the farm),
    /// when its segment was removed, cut short or its header overwritten or no longer names it,
    /// when it is stopped by a signal, when the client it was
    /// working for died (the unit is abandoned with the daemon), or when, idle, it holds more
    /// memory than `Farm::over_memory` allows; a farm told to stop ([`FarmConfig::stop`])
    /// replaces none. A replacement that fails (a segment truncated again and again while the
    /// fresh daemon starts, a crash at start-up) never gives up the slot: it is tried again after
    /// a wait that doubles from [`RETRY_FIRST`] to [`RETRY_MOST`], so the farm lives as long as
    /// it is meant to run and serves again once the fault ends. Returns what was done.
    pub fn heal(&mut self) -> Vec<Healed> {
        let me = std::process::id();
        let mut report = Vec::new();
        let mut kept = Vec::with_capacity(self.daemons.len());
        for mut d in std::mem::take(&mut self.daemons) {
            if self.backoff.get(&d.id).is_some_and(|(at, _)| Instant::now() < *at) {
                kept.push(d);
                continue;
            }
            match self.trouble(&mut d) {
                None => kept.push(d),
                Some(Trouble::Stopped(why)) => {
                    segment::remove_stale_segments(Some(&self.name));
                    report.push(Healed { id: d.id, why, replaced: false, again: false });
                }
                Some(Trouble::Replace(mut why)) => {
                    let (mut replaced, mut again) = (false, false);
                    // A farm told to stop starts nothing more: its daemons are ending with it.
                    if self.owns_daemons && !self.config.stopping() {
                        match self.bring_back(&mut d) {
                            Ok(()) => {
                                replaced = true;
                                self.backoff.remove(&d.id);
                            }
                            Err(e) => {
                                // The slot stays; the next try waits longer each time.
                                again = true;
                                let wait = self
                                    .backoff
                                    .get(&d.id)
                                    .map_or(RETRY_FIRST, |(_, w)| (*w * 2).min(RETRY_MOST));
                                self.backoff.insert(d.id, (Instant::now() + wait, wait));
                                why = format!("{why}; starting another failed: {e}; again in {wait:?}");
                            }
                        }
                    }
                    report.push(Healed { id: d.id, why, replaced, again });
                    if replaced {
                        d.seg.unlock_client(me);
                    }
                    if replaced || again {
                        kept.push(d);
                    }
                }
            }
        }
        self.daemons = kept;
        report
    }

    fn trouble(&self, d: &mut Daemon) -> Option<Trouble> {
        if let Some(child) = &mut d.child
            && let Liveness::Ended { status, .. } = child.liveness()
        {
            return Some(if status.success() {
                Trouble::Stopped(format!("stopped ({status})"))
            } else {
                Trouble::Replace(format!("exited ({status})"))
            });
        }
        if d.seg.links() == Some(0) {
            return Some(Trouble::Replace("its segment was removed".into()));
        }
        // Cut short, overwritten or from another version: checked before anything else of the
        // header is read.
        if let Err(e) = d.seg.health() {
            return Some(Trouble::Replace(gpfarm_protocol::error_chain(&e)));
        }
        if process::is_stopped(d.pid) {
            return Some(Trouble::Replace("it is stopped by a signal and would answer no client".into()));
        }
        let state = match d.seg.state() {
            Ok(s) => s,
            Err(e) => return Some(Trouble::Replace(gpfarm_protocol::error_chain(&e))),
        };
        if d.seg.daemon_pid() != d.pid {
            return Some(Trouble::Replace(format!(
                "its segment's header names pid {}, not {}",
                d.seg.daemon_pid(),
                d.pid
            )));
        }
        let client = d.seg.client_pid();
        if state == DaemonState::Processing && client != 0 && !process::process_alive(client) {
            return Some(Trouble::Replace(format!("its client {client} died while it was compiling")));
        }
        if state == DaemonState::Available
            && let Some((rss, limit)) = self.over_memory(d)
        {
            return Some(Trouble::Replace(format!(
                "holds {} MiB idle, over its {} MiB limit",
                rss >> 20,
                limit >> 20
            )));
        }
        None
    }

    /// Asks every spawned daemon to exit, waits a bounded time, kills the ones still there, and
    /// removes every segment; only releases daemons it attached to.
    fn shut_down(&mut self) {
        let me = std::process::id();
        if !self.owns_daemons {
            for d in &self.daemons {
                d.seg.unlock_client(me);
            }
            return;
        }
        for d in &mut self.daemons {
            if d.seg.write_request(&Request::Shutdown).is_ok() {
                d.seg.set_state(DaemonState::Processing);
                event::signal(d.seg.go());
            }
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        for d in &mut self.daemons {
            if let Some(child) = &mut d.child {
                child.stop(deadline.saturating_duration_since(Instant::now()));
            }
            // A daemon removes its own segment on the way out; this covers one that was killed.
            segment::unlink(d.seg.name());
        }
    }
}

/// What [`Farm::heal`] found wrong with one daemon, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healed {
    /// The daemon.
    pub id: DaemonId,
    /// What was wrong.
    pub why: String,
    /// Whether a fresh daemon took its place (false: it was stopped on purpose, or could not be
    /// started again).
    pub replaced: bool,
    /// Whether it will be tried again at the next look (every start was killed from outside).
    pub again: bool,
}

enum Trouble {
    /// Ended by a clean exit: stopped on purpose.
    Stopped(String),
    Replace(String),
}

/// This user's live daemons, and every farm by the daemon ids it has: a segment, or a live
/// daemon whose segment is not there yet (a replacement starting). A farm none of whose daemons
/// lives is gone, and its segments are removed; a dead daemon's segment in a farm that lives
/// stays: its keeper is replacing it, and it is waited for.
fn running_farms() -> (HashMap<SegmentName, u32>, BTreeMap<FarmName, Vec<DaemonId>>) {
    let live = process::live_daemons();
    for farm in group_by_farm(list_segments()).keys() {
        if !live.keys().any(|n| &n.farm == farm) {
            remove_stale_segments(Some(farm));
        }
    }
    let mut names = list_segments();
    names.extend(live.keys().filter(|n| !names.contains(n)).cloned().collect::<Vec<_>>());
    (live, group_by_farm(names))
}

/// Starts daemon `id` (or takes `first`, already spawned) and meets it. One killed from outside
/// before it is ready is started again, up to [`START_TRIES`] times; any other failure (it
/// crashed, NVRTC is missing, it timed out) is returned at once.
fn start_daemon(
    exe: &Path,
    farm: &FarmName,
    id: DaemonId,
    config: &FarmConfig,
    mut first: Option<Supervised>,
) -> Result<Daemon, FarmError> {
    let seg_name = SegmentName::new(farm, id);
    let mut tries = 0;
    loop {
        tries += 1;
        let mut child = match first.take() {
            Some(c) => c,
            None => spawn_daemon(exe, farm, id, config)?,
        };
        // Whatever happens, `child` is killed and reaped once this statement ends unless it
        // became the daemon.
        let started = await_available(&seg_name, Some(&mut child), config.start_timeout)
            .and_then(|seg| hello(seg, Some(child), config));
        match started {
            Ok(d) => return Ok(d),
            Err(e) => {
                // Its process is gone: nobody else serves the name.
                segment::unlink(&seg_name);
                if !matches!(e, FarmError::Killed { .. }) || tries >= START_TRIES || config.stopping() {
                    return Err(e);
                }
                tracing::info!("daemon {id}: {e}; starting it again");
            }
        }
    }
}

/// Ends a daemon that stopped answering and starts a fresh one with the same id in its place.
/// Runs on the farm's own thread: a daemon's parent-death signal fires when the *thread* that
/// started it ends.
fn respawn(d: &mut Daemon, name: &FarmName, config: &FarmConfig) -> Result<(), FarmError> {
    let exe = match &config.executable {
        Some(p) => p.clone(),
        None => daemon_executable()?,
    };
    let seg_name = SegmentName::new(name, d.id);
    match d.child.take() {
        Some(mut child) => child.kill(),
        None => {
            signal_daemon(d.pid, &seg_name, libc::SIGKILL);
        }
    }
    // Unlinked before the fresh daemon creates its own under the same name; the old daemon was
    // killed without a handler, so it cannot unlink the new one.
    segment::unlink(&seg_name);
    let fresh = start_daemon(&exe, name, d.id, config, None)?;
    // The old segment was unlinked above; dropping the stale mapping is all that is left.
    drop(std::mem::replace(d, fresh));
    Ok(())
}

/// A daemon of a resident farm this process attached to was lost: ends it if it still runs, then
/// waits (up to the start-up timeout, and only while the farm's keeper lives) for the fresh one
/// the keeper starts under the same name, and meets it.
fn reattach(d: &mut Daemon, name: &FarmName, config: &FarmConfig) -> Result<(), FarmError> {
    signal_daemon(d.pid, &SegmentName::new(name, d.id), libc::SIGKILL);
    let fresh = meet_daemon(name, d.id, d.pid, d.keeper, config)?;
    drop(std::mem::replace(d, fresh));
    Ok(())
}

/// What a client is told when the keeper of its farm is stopped by a signal.
fn keeper_is_stopped(keeper: u32) -> String {
    format!(
        "the farm's keeper (pid {keeper}) is stopped by a signal and starts no daemon until it is continued \
         (`kill -CONT {keeper}`)"
    )
}

/// Meets daemon `id` of resident farm `name`, waiting for its keeper to replace it if it is lost
/// on the way (killed while it starts or shakes hands).
fn meet_resident(name: &FarmName, id: DaemonId, config: &FarmConfig) -> Result<Daemon, FarmError> {
    // The keeper is the parent of a resident farm's daemons; this one may be between two lives.
    let pids: Vec<u32> =
        process::live_daemons().into_iter().filter(|(n, _)| &n.farm == name).map(|(_, p)| p).collect();
    let keeper = if FarmKind::of_daemons(pids.iter().copied()) == FarmKind::Resident {
        pids.iter().find_map(|&pid| process::parent_of(pid).filter(|&p| p > 1)).unwrap_or(0)
    } else {
        0
    };
    meet_daemon(name, id, 0, keeper, config)
}

/// Meets the daemon that serves `id` of farm `name` other than `old`, waiting (up to the start-up
/// timeout, and only while `keeper` lives) for the keeper to start one; a daemon lost while it is
/// being met is waited past in the same way.
fn meet_daemon(
    name: &FarmName,
    id: DaemonId,
    old: u32,
    keeper: u32,
    config: &FarmConfig,
) -> Result<Daemon, FarmError> {
    let seg_name = SegmentName::new(name, id);
    let deadline = Instant::now() + config.start_timeout;
    let mut last = None;
    let mut keeper_held: Option<Instant> = None;
    let mut damaged_since: Option<Instant> = None;
    let mut keeper_stopped: Option<Instant> = None;
    loop {
        if let Some(pid) = process::find_daemon(&seg_name).filter(|&p| p != old) {
            let left = deadline.saturating_duration_since(Instant::now());
            match await_available(&seg_name, None, left).and_then(|seg| hello(seg, None, config)) {
                Ok(fresh) => return Ok(fresh),
                // Its keeper is still meeting it: a moment, not longer.
                Err(FarmError::InUse { holder, .. })
                    if holder == keeper
                        && keeper_held.get_or_insert_with(Instant::now).elapsed() < KEEPER_HOLD => {}
                // Its header was written over after it opened: its keeper replaces such a daemon
                // (`Farm::heal`), so it is waited past as one lost, for a moment, not longer.
                Err(FarmError::Segment(e @ gpfarm_protocol::SegmentError::Invalid { .. }))
                    if keeper > 1
                        && damaged_since.get_or_insert_with(Instant::now).elapsed() < KEEPER_HOLD =>
                {
                    last = Some(format!("its replacement {pid}: {e}"));
                }
                // Another client holds it, or it is not a gpfarm daemon of this version: final.
                Err(e) if !matches!(e, FarmError::Killed { .. }) && process::is_daemon_of(pid, &seg_name) => {
                    return Err(e);
                }
                // Lost in its turn; its keeper starts another.
                Err(e) => last = Some(format!("its replacement {pid}: {e}")),
            }
        }
        let keeper_alive = keeper > 1 && process::process_alive(keeper);
        // A keeper stopped by a signal replaces nothing until it is continued.
        if keeper_alive && process::is_stopped(keeper) {
            if keeper_stopped.get_or_insert_with(Instant::now).elapsed() >= super::daemon::STOPPED_LIMIT {
                return Err(FarmError::Daemon { id, message: keeper_is_stopped(keeper) });
            }
        } else {
            keeper_stopped = None;
        }
        if !keeper_alive || Instant::now() > deadline {
            let why = match (keeper_alive, last) {
                (false, _) => {
                    "its farm has no keeper to replace it (started with an older gpfarm?)".to_string()
                }
                (true, Some(last)) => last,
                (true, None) => format!("not replaced within {:?}", config.start_timeout),
            };
            return Err(FarmError::Daemon { id, message: why });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        self.shut_down();
    }
}
