//! One daemon as the farm holds it, and one request/answer round with it.
//!
//! Every wait is bounded ([`POLL`]) and checks between polls that the daemon still lives (a
//! zombie does not: see [`crate::supervisor`]) and still makes progress, so a dead or hung daemon
//! is noticed, never waited on forever. Must never decide what a loss costs; that is
//! [`super::schedule`]'s job.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gpfarm_protocol::event::{self, Wake};
use gpfarm_protocol::{DaemonId, DaemonInfo, DaemonState, Request, Response, Segment};

use super::FarmError;
use crate::supervisor::{Liveness, Supervised};
use gpfarm_protocol::process::is_daemon_of;

/// How often a waiting client looks up to check that its daemons are alive.
pub(super) const POLL: Duration = Duration::from_millis(50);
/// How long a daemon (or a resident farm's keeper) may stay stopped by a signal (SIGSTOP,
/// SIGTSTP, a debugger) before a client waiting on it counts it as lost: a stopped process
/// answers nobody, and is noticed at once instead of at the unit's deadline.
pub(super) const STOPPED_LIMIT: Duration = Duration::from_secs(1);

/// A daemon of the farm: its segment, its process (when this farm spawned it) and what it said
/// in its handshake.
pub(super) struct Daemon {
    pub(super) id: DaemonId,
    pub(super) seg: Segment,
    pub(super) child: Option<Supervised>,
    pub(super) pid: u32,
    pub(super) info: DaemonInfo,
    /// Resident memory right after the handshake, warm and idle (0 if it could not be read).
    pub(super) warm_rss: u64,
    /// For a daemon of a resident farm this process attached to, the process that keeps that
    /// farm (the daemon's parent), which replaces it if it is lost; 0 otherwise.
    pub(super) keeper: u32,
}

/// Why a daemon did not answer.
pub(super) enum Lost {
    /// It ended; `true` if by a crash of its own.
    Died(String, bool),
    Hung,
    Protocol(String),
}

impl Daemon {
    /// Ok while the daemon lives; otherwise how it ended and whether that was a crash of its own
    /// (a crash signal or an error exit) rather than a kill from outside.
    fn alive(&mut self) -> Result<(), (String, bool)> {
        match &mut self.child {
            Some(child) => match child.liveness() {
                Liveness::Alive => Ok(()),
                Liveness::Ended { status, crashed } => Err((format!("exited ({status})"), crashed)),
            },
            None if is_daemon_of(self.pid, self.seg.name()) => Ok(()),
            None => Err(("process is gone".into(), false)),
        }
    }

    /// Waits for "done"; `seen` is the done counter read before the request was written. The
    /// daemon is declared hung when `limit` passes without it finishing a unit (its progress
    /// counter), so a long part of many quick units is never mistaken for a hang.
    pub(super) fn await_done(&mut self, seen: u32, limit: Duration) -> Result<(), Lost> {
        let mut progress = self.seg.progress();
        let mut since = Instant::now();
        let mut stopped_since: Option<Instant> = None;
        loop {
            match event::wait(self.seg.done(), seen, POLL) {
                Wake::Signalled(_) => {
                    return match self.seg.state() {
                        Ok(DaemonState::Available) => Ok(()),
                        Ok(state) => Err(Lost::Died(format!("stopped while working ({state:?})"), false)),
                        Err(e) => Err(Lost::Protocol(gpfarm_protocol::error_chain(&e))),
                    };
                }
                Wake::TimedOut => {
                    self.alive().map_err(|(m, crash)| Lost::Died(m, crash))?;
                    // Stopped by a signal: it answers nobody until continued. Not its unit's
                    // fault: lost as if killed from outside, so its units go elsewhere.
                    match gpfarm_protocol::process::is_stopped(self.pid) {
                        false => stopped_since = None,
                        true if stopped_since.get_or_insert_with(Instant::now).elapsed() >= STOPPED_LIMIT => {
                            let why = format!("stopped by a signal for {STOPPED_LIMIT:?} (pid {})", self.pid);
                            return Err(Lost::Died(why, false));
                        }
                        true => {}
                    }
                    let now = self.seg.progress();
                    if now != progress {
                        (progress, since) = (now, Instant::now());
                    } else if since.elapsed() > limit {
                        return Err(Lost::Hung);
                    }
                }
            }
        }
    }

    pub(super) fn round_trip(&mut self, req: &Request, timeout: Duration) -> Result<Response, FarmError> {
        let id = self.id;
        let seen = self.seg.done().load(Ordering::Acquire);
        self.seg.write_request(req)?;
        self.seg.set_state(DaemonState::Processing);
        event::signal(self.seg.go());
        match self.await_done(seen, timeout) {
            Ok(()) => Ok(self.seg.read_response()?),
            // Killed from outside: trying again may work.
            Err(Lost::Died(m, false)) => Err(FarmError::Killed { id, message: m }),
            Err(Lost::Died(m, true)) | Err(Lost::Protocol(m)) => Err(FarmError::Daemon { id, message: m }),
            Err(Lost::Hung) => {
                Err(FarmError::Daemon { id, message: format!("no answer within {timeout:?}") })
            }
        }
    }
}
