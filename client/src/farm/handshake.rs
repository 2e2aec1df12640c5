//! Meeting a daemon: waiting until its segment exists and it has loaded and warmed NVRTC, taking
//! its client lock (a shared daemon's in its turn, for the round only), the `Hello` round, and checking that every daemon of a farm runs the same
//! NVRTC.
//!
//! Must never wait without a bound: a daemon that exits or stays silent during start-up is an
//! error naming it, not a hang.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use gpfarm_protocol::event::{self, Wake};
use gpfarm_protocol::process;
use gpfarm_protocol::{
    DaemonId, DaemonInfo, DaemonState, Request, Response, Segment, SegmentError, SegmentName,
};

use super::daemon::{Daemon, POLL};
use super::{FarmConfig, FarmError};
use crate::supervisor::{CRASH_SIGNALS, Liveness, Supervised};

/// How long a segment's header may stay invalid while its daemon starts before it counts as
/// damaged.
const DAMAGED_AFTER: Duration = Duration::from_millis(500);

/// Waits for a daemon's segment to appear and its state to leave `Starting`.
pub(super) fn await_available(
    name: &SegmentName,
    mut child: Option<&mut Supervised>,
    timeout: Duration,
) -> Result<Segment, FarmError> {
    let id = name.id;
    let deadline = Instant::now() + timeout;
    // A daemon this process did not start is watched through `/proc` once it is found there.
    let mut watched: Option<u32> = None;
    let check_child = |child: &mut Option<&mut Supervised>,
                       watched: &mut Option<u32>|
     -> Result<(), FarmError> {
        if child.is_none() {
            match *watched {
                None => *watched = process::find_daemon(name),
                Some(pid) if !process::is_daemon_of(pid, name) => {
                    return Err(FarmError::Killed { id, message: format!("gpfarmd {pid} is gone") });
                }
                Some(_) => {}
            }
        }
        if let Some(c) = child.as_deref_mut()
            && let Liveness::Ended { status, .. } = c.liveness()
        {
            if status.signal().is_some_and(|s| !CRASH_SIGNALS.contains(&s)) {
                return Err(FarmError::Killed { id, message: format!("killed during start-up ({status})") });
            }
            return Err(FarmError::Daemon {
                id,
                message: format!("exited during start-up ({status}); its message is above"),
            });
        }
        if Instant::now() > deadline {
            return Err(FarmError::Daemon { id, message: format!("not available after {timeout:?}") });
        }
        Ok(())
    };
    // A header is invalid for microseconds while its daemon makes it; one that stays invalid was
    // damaged (written over while the daemon started) and will never become valid.
    let mut invalid_since: Option<Instant> = None;
    'open: loop {
        let mut seg = loop {
            match Segment::open(name) {
                Ok(seg) => break seg,
                Err(SegmentError::Missing(_)) => {
                    invalid_since = None;
                    check_child(&mut child, &mut watched)?;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e @ SegmentError::Invalid { .. }) => {
                    if invalid_since.get_or_insert_with(Instant::now).elapsed() >= DAMAGED_AFTER {
                        // Lost like a daemon killed as it started: its starter tries another.
                        return Err(FarmError::Killed {
                            id,
                            message: format!(
                                "its segment stayed invalid for {DAMAGED_AFTER:?} as it started: {e}"
                            ),
                        });
                    }
                    check_child(&mut child, &mut watched)?;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e.into()),
            }
        };
        let mut seen = 0;
        loop {
            // A segment whose name was removed (its daemon was replaced, and the new one serves a
            // new segment under the name) or that was damaged will never change again: the name
            // is opened afresh. So is one whose daemon is not the one this process watches.
            let replaced = seg.links() == Some(0)
                || seg.health().is_err()
                || watched.is_some_and(|pid| seg.daemon_pid() != pid);
            if replaced {
                watched = None;
                check_child(&mut child, &mut watched)?;
                std::thread::sleep(Duration::from_millis(5));
                continue 'open;
            }
            match seg.state()? {
                // Working for another client of a shared farm is started, too: its turn comes.
                DaemonState::Available | DaemonState::Processing => return Ok(seg),
                DaemonState::Failed => {
                    let why = match seg.read_response() {
                        Ok(Response::Error(m)) => m,
                        _ => "failed to start".into(),
                    };
                    event::signal(seg.go());
                    return Err(FarmError::Daemon { id, message: why });
                }
                DaemonState::Stopped => {
                    return Err(FarmError::Daemon { id, message: "stopped during start-up".into() });
                }
                DaemonState::Starting => {
                    check_child(&mut child, &mut watched)?;
                    if let Wake::Signalled(v) = event::wait(seg.done(), seen, POLL) {
                        seen = v;
                    }
                }
            }
        }
    }
}

pub(super) fn hello(
    seg: Segment,
    child: Option<Supervised>,
    config: &FarmConfig,
) -> Result<Daemon, FarmError> {
    let id = seg.name().id;
    // The process, not the header, says who the daemon is.
    let pid = match &child {
        Some(c) => c.pid(),
        None => process::find_daemon(seg.name()).ok_or_else(|| FarmError::Daemon {
            id,
            message: format!("no live gpfarmd serves segment {}", seg.name()),
        })?,
    };
    let me = std::process::id();
    // A daemon this process attached to is shared: each request waits its turn.
    let shared = child.is_none();
    if !shared && let Err(holder) = seg.lock_client(me) {
        if config.resident {
            // A fresh daemon of a resident farm that a waiting client met first: it is up and
            // serving, which is all its keeper needs to know.
            let warm_rss = process::resident_bytes(pid).unwrap_or(0);
            tracing::debug!("daemon {id}: taken by client {holder} before its keeper met it");
            return Ok(Daemon {
                id,
                seg,
                child,
                pid,
                info: DaemonInfo::default_for(id, pid),
                warm_rss,
                keeper: 0,
                shared: false,
            });
        }
        return Err(FarmError::InUse { id, holder });
    }
    // Only a resident farm (its daemons lead process groups of their own) has a keeper.
    let resident = super::ops::FarmKind::of_daemons([pid]) == super::ops::FarmKind::Resident;
    // The process that spawned a farm for itself holds its daemons for its whole life unless it
    // released them: waiting for it would be waiting for nothing.
    // Another client of this process holds it in its turn, unless a farm of this process holds
    // it for its life.
    let holder = seg.client_pid();
    let for_life = if holder == me {
        Daemon::held_for_life_here(seg.name())
    } else {
        holder != 0 && process::parent_of(pid) == Some(holder)
    };
    if shared && !resident && for_life {
        return Err(FarmError::InUse { id, holder });
    }
    let keeper = if child.is_some() || !resident { 0 } else { process::parent_of(pid).unwrap_or(0) };
    let mut d =
        Daemon { id, seg, child, pid, info: DaemonInfo::default_for(id, pid), warm_rss: 0, keeper, shared };
    if !shared && !config.resident {
        d.hold_for_life();
    }
    // A shared daemon's lock is taken and let go around the round; the wait for it is a wait
    // behind other clients' units, so the unit deadline bounds it.
    let err = match d.round_trip(&Request::Hello, config.request_timeout, config.start_timeout) {
        Ok(Response::Hello(info)) => {
            d.info = info;
            d.warm_rss = process::resident_bytes(pid).unwrap_or(0);
            if d.child.is_some() && config.resident {
                // A resident farm's keeper holds none of its daemons: clients may be waiting.
                d.seg.let_go(me);
            }
            return Ok(d);
        }
        Ok(other) => FarmError::Daemon { id, message: format!("unexpected handshake answer {other:?}") },
        Err(e) => e,
    };
    d.seg.let_go(me);
    // Dropping the daemon kills and reaps a process this farm spawned.
    drop(d);
    Err(err)
}

trait DefaultInfo {
    fn default_for(id: DaemonId, pid: u32) -> DaemonInfo;
}

impl DefaultInfo for DaemonInfo {
    fn default_for(id: DaemonId, pid: u32) -> DaemonInfo {
        DaemonInfo { id, pid, nvrtc_version: (0, 0), nvrtc_path: String::new(), gpu: None, warmup_us: 0 }
    }
}

pub(super) fn check_versions(daemons: &[Daemon]) -> Result<(), FarmError> {
    let Some(first) = daemons.first() else { return Ok(()) };
    for d in daemons {
        if d.info.nvrtc_version != first.info.nvrtc_version {
            return Err(FarmError::Daemon {
                id: d.id,
                message: format!(
                    "runs NVRTC {:?} from {}, but daemon {} runs {:?} from {}: one farm, one NVRTC",
                    d.info.nvrtc_version,
                    d.info.nvrtc_path,
                    first.id,
                    first.info.nvrtc_version,
                    first.info.nvrtc_path
                ),
            });
        }
    }
    Ok(())
}
