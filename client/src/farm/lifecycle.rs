//! Starting, restarting and ending a farm's daemons, all through [`crate::supervisor`].
//!
//! How many daemons may start is checked before the first one does ([`super::size`]). Spawned
//! daemons get a parent-death signal (unless detached) and `--parent-pid`; a resident farm's
//! daemons lead process groups of their own, which is how [`super::ops`] tells them from a
//! running job's temporary farm. A lost daemon is killed, reaped and replaced under the same id,
//! on the farm's own thread, since a parent-death signal fires when the *thread* that spawned
//! the child ends.
//! Must never leave a spawned daemon running or its segment behind when the farm is dropped.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpfarm_protocol::event;
use gpfarm_protocol::segment::{self, list_segments, remove_stale_segments};
use gpfarm_protocol::{DaemonId, DaemonState, FarmName, Request, SegmentName};

use super::daemon::Daemon;
use super::handshake::{await_available, check_versions, hello};
use super::ops::{FarmKind, group_by_farm};
use super::size::Room;
use super::{Farm, FarmConfig};
use crate::compiler::CompilerError;
use crate::supervisor::{ParentDeath, Supervised, kill_pid, locate_executable};

/// Starts of a replacement daemon before its slot is given up.
const RESPAWN_TRIES: usize = 3;
/// How long dropped daemons get to shut down cleanly before they are killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Finds `gpfarmd`: `GPFARMD`, then beside the current executable (and one level up, where
/// test binaries live), then on `PATH`.
pub fn daemon_executable() -> Result<PathBuf, CompilerError> {
    Ok(locate_executable("gpfarmd", "GPFARMD")?)
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
) -> Result<Supervised, CompilerError> {
    Supervised::spawn(daemon_command(exe, farm, id, config), parent_death(config))
        .map_err(|source| CompilerError::Spawn { id, source })
}

impl Farm {
    /// Spawns `config.daemons` daemons and waits until every one is warm and has shaken hands.
    /// A count this machine cannot hold (0, or more than its memory and `/dev/shm` take) is
    /// refused before any daemon starts; more than one per core is only warned about. Stale
    /// segments of this user's crashed runs are removed first.
    pub fn spawn(config: FarmConfig) -> Result<Farm, CompilerError> {
        Farm::spawn_named(FarmName::random(), config)
    }

    /// As [`Farm::spawn`], with a chosen farm name.
    pub fn spawn_named(name: FarmName, config: FarmConfig) -> Result<Farm, CompilerError> {
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
        let exe = match &config.executable {
            Some(p) => p.clone(),
            None => daemon_executable()?,
        };
        // `check` bounds the count to 1..=u16::MAX.
        let n = config.daemons.clamp(1, u16::MAX as usize) as u16;
        let mut farm =
            Farm { name: name.clone(), daemons: Vec::new(), config: config.clone(), owns_daemons: true };
        // On any error below, dropping what was started kills and reaps it.
        let mut children = Vec::with_capacity(usize::from(n));
        for id in (0..n).map(DaemonId) {
            children.push((id, spawn_daemon(&exe, &name, id, &config)?));
        }
        for (id, mut child) in children {
            let seg_name = SegmentName::new(&name, id);
            let started = await_available(&seg_name, Some(&mut child), config.start_timeout)
                .and_then(|seg| hello(seg, Some(child), &config));
            match started {
                Ok(d) => farm.daemons.push(d),
                Err(e) => {
                    // `farm` shuts down its started daemons; the rest are killed as they drop.
                    segment::unlink(&seg_name);
                    return Err(e);
                }
            }
        }
        check_versions(&farm.daemons)?;
        Ok(farm)
    }

    /// Attaches to the daemons of a farm started by `gpfarm daemons start`: the named farm, or
    /// the only resident farm of this user if no name is given (running jobs' temporary farms
    /// are not for sharing).
    pub fn attach(name: Option<&FarmName>, config: FarmConfig) -> Result<Farm, CompilerError> {
        remove_stale_segments(None);
        let mut farms = group_by_farm(list_segments());
        if name.is_none() {
            farms.retain(|farm, ids| {
                let pids = ids.iter().filter_map(|&id| {
                    gpfarm_protocol::Segment::open(&SegmentName::new(farm, id)).ok().map(|s| s.daemon_pid())
                });
                FarmKind::of_daemons(pids) == FarmKind::Resident
            });
        }
        let (farm_name, ids) = match name {
            Some(n) => farms.into_iter().find(|(f, _)| f == n).ok_or_else(|| CompilerError::Daemon {
                id: DaemonId(0),
                message: format!("no running farm named {n}; start one with `gpfarm daemons start`"),
            })?,
            None => {
                let mut farms = farms.into_iter();
                match (farms.next(), farms.next()) {
                    (Some(f), None) => f,
                    (None, _) => {
                        return Err(CompilerError::Daemon {
                            id: DaemonId(0),
                            message: "no resident farm running; start one with `gpfarm daemons start -n N`"
                                .into(),
                        });
                    }
                    (Some(_), Some(_)) => {
                        return Err(CompilerError::Daemon {
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
        };
        for id in ids {
            let seg = await_available(&SegmentName::new(&farm_name, id), None, config.start_timeout)?;
            farm.daemons.push(hello(seg, None, &config)?);
        }
        check_versions(&farm.daemons)?;
        Ok(farm)
    }

    /// Brings a lost daemon back: restarts one this farm spawned; ends one it only attached to
    /// if it is stuck (it is no use to anyone) and gives it up. Returns whether it is back.
    pub(super) fn recover(&self, d: &mut Daemon) -> bool {
        if self.owns_daemons {
            let mut last = None;
            for _ in 0..RESPAWN_TRIES {
                match respawn(d, &self.name, &self.config) {
                    Ok(()) => return true,
                    Err(e) => last = Some(e),
                }
            }
            if let Some(e) = last {
                tracing::warn!("daemon {} could not be restarted: {e}", d.id);
            }
            false
        } else {
            if segment::is_daemon_process(d.pid) {
                kill_pid(d.pid);
                segment::unlink(&SegmentName::new(&self.name, d.id));
            }
            false
        }
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

/// Ends a daemon that stopped answering and starts a fresh one with the same id in its place.
/// Runs on the farm's own thread: a daemon's parent-death signal fires when the *thread* that
/// started it ends.
fn respawn(d: &mut Daemon, name: &FarmName, config: &FarmConfig) -> Result<(), CompilerError> {
    let exe = match &config.executable {
        Some(p) => p.clone(),
        None => daemon_executable()?,
    };
    let id = d.id;
    let seg_name = SegmentName::new(name, id);
    // Unlinked before the fresh daemon creates its own under the same name; the old daemon is
    // killed without a handler, so it cannot unlink the new one.
    segment::unlink(&seg_name);
    let mut child = match d.child.take() {
        Some(mut child) => {
            child
                .restart(daemon_command(&exe, name, id, config))
                .map_err(|source| CompilerError::Spawn { id, source })?;
            child
        }
        None => {
            kill_pid(d.pid);
            spawn_daemon(&exe, name, id, config)?
        }
    };
    let seg = await_available(&seg_name, Some(&mut child), config.start_timeout)?;
    let fresh = hello(seg, Some(child), config)?;
    // The old segment was unlinked above; dropping the stale mapping is all that is left.
    drop(std::mem::replace(d, fresh));
    Ok(())
}

impl Drop for Farm {
    fn drop(&mut self) {
        self.shut_down();
    }
}
