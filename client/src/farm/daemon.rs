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
    /// Shared with other clients (a daemon this process attached to, or released): its client
    /// lock is taken for each request, in turn behind the clients that waited longer
    /// ([`Daemon::take_turn`]), and let go after the answer. Otherwise the farm holds it for
    /// its whole life.
    pub(super) shared: bool,
}

/// Why a daemon did not answer.
pub(super) enum Lost {
    /// It ended; `true` if by a crash of its own.
    Died(String, bool),
    Hung,
    Protocol(String),
    /// Other clients held it for the whole wait; the holder's pid (0: free, others ahead).
    Busy(u32, Duration),
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

    /// For a shared daemon, waits (up to `limit`) for this client's turn and takes the daemon's
    /// client lock: clients are served in the order they began to wait, each for one request
    /// ([`Daemon::let_go`]). Wakes when a client lets go, and checks every [`POLL`] that the
    /// daemon lives and still serves this segment (a keeper replaces a lost one under a fresh
    /// segment: the daemon is then lost, not waited for). A daemon held by this farm alone
    /// needs nothing.
    pub(super) fn take_turn(&mut self, limit: Duration) -> Result<(), Lost> {
        if !self.shared {
            return Ok(());
        }
        let me = std::process::id();
        let start = Instant::now();
        // Other processes know this one by its pid alone: its own clients take turns here first.
        if !ours::take(self.seg.name(), limit) {
            return Err(Lost::Busy(me, limit));
        }
        let mut place = gpfarm_protocol::Place::default();
        let result = loop {
            let seen = self.seg.turn().load(Ordering::Acquire);
            let holder = match self.seg.take_turn(me, &mut place) {
                Ok(()) => break Ok(()),
                Err(holder) => holder,
            };
            if self.seg.links() == Some(0) || self.seg.health().is_err() {
                break Err(Lost::Died(
                    "its segment was replaced while this client waited its turn".into(),
                    false,
                ));
            }
            if let Err((m, crash)) = self.alive() {
                break Err(Lost::Died(m, crash));
            }
            if start.elapsed() >= limit {
                break Err(Lost::Busy(holder, limit));
            }
            let left = limit.saturating_sub(start.elapsed());
            event::wait(self.seg.turn(), seen, POLL.min(left));
        };
        self.seg.leave_line(&mut place);
        if result.is_err() {
            ours::let_go(self.seg.name());
        }
        result
    }

    /// Records that this farm spawned the daemon and holds it for its life (until
    /// [`Daemon::share`]).
    pub(super) fn hold_for_life(&self) {
        ours::hold_for_life(self.seg.name());
    }

    /// Whether a farm of this process holds the daemon of `name` for its life: the check for a
    /// client of this process that finds the daemon locked by this pid.
    pub(super) fn held_for_life_here(name: &gpfarm_protocol::SegmentName) -> bool {
        ours::held_for_life(name)
    }

    /// Shares a daemon this farm held alone with other clients: its lock is let go, and taken
    /// again for each request in turn.
    pub(super) fn share(&mut self) {
        if !self.shared {
            self.shared = true;
            ours::end_life(self.seg.name());
        }
        self.seg.let_go(std::process::id());
    }

    /// Lets go of a shared daemon after a request, waking the clients waiting for it.
    pub(super) fn let_go(&self) {
        if self.shared {
            self.seg.let_go(std::process::id());
            ours::let_go(self.seg.name());
        }
    }

    /// One request and its answer (within `timeout`), after waiting up to `turn` for this
    /// client's turn at a shared daemon.
    pub(super) fn round_trip(
        &mut self,
        req: &Request,
        turn: Duration,
        timeout: Duration,
    ) -> Result<Response, FarmError> {
        let id = self.id;
        self.take_turn(turn).map_err(|lost| lost_error(id, lost, timeout))?;
        let answer = self.round_trip_held(req, timeout);
        self.let_go();
        answer
    }

    fn round_trip_held(&mut self, req: &Request, timeout: Duration) -> Result<Response, FarmError> {
        let id = self.id;
        let seen = self.seg.done().load(Ordering::Acquire);
        self.seg.write_request(req)?;
        self.seg.set_state(DaemonState::Processing);
        event::signal(self.seg.go());
        match self.await_done(seen, timeout) {
            Ok(()) => Ok(self.seg.read_response()?),
            Err(lost) => Err(lost_error(id, lost, timeout)),
        }
    }
}

/// What a lost round with daemon `id` is to a caller.
impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.shared {
            ours::end_life(self.seg.name());
        }
    }
}

fn lost_error(id: DaemonId, lost: Lost, timeout: Duration) -> FarmError {
    match lost {
        // Killed from outside: trying again may work.
        Lost::Died(m, false) => FarmError::Killed { id, message: m },
        Lost::Died(m, true) | Lost::Protocol(m) => FarmError::Daemon { id, message: m },
        Lost::Hung => FarmError::Daemon { id, message: format!("no answer within {timeout:?}") },
        Lost::Busy(holder, waited) => FarmError::Busy { id, holder, waited },
    }
}

/// The shared daemons that a client of this process holds. A segment's lock names a process, so
/// two clients of one process (two farms attached in two threads) would both pass it: they take
/// turns on this first.
mod ours {
    use std::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    use gpfarm_protocol::SegmentName;

    static HELD: Mutex<Vec<SegmentName>> = Mutex::new(Vec::new());
    static FREED: Condvar = Condvar::new();

    /// Takes `name` for one client of this process, waiting up to `limit`; whether it did.
    pub(super) fn take(name: &SegmentName, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        while held.contains(name) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            held = FREED.wait_timeout(held, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        held.push(name.clone());
        true
    }

    /// Lets go of `name`.
    pub(super) fn let_go(name: &SegmentName) {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = held.iter().position(|n| n == name) {
            held.swap_remove(k);
            FREED.notify_all();
        }
    }

    /// The daemons that a farm of this process spawned and holds for its whole life (not
    /// released): a client of this process that finds one locked by this pid must not wait for
    /// it. One entry per holder, so a replacement under the same name counts apart.
    static FOR_LIFE: Mutex<Vec<SegmentName>> = Mutex::new(Vec::new());

    /// Records that a farm of this process holds `name` for its life.
    pub(super) fn hold_for_life(name: &SegmentName) {
        FOR_LIFE.lock().unwrap_or_else(|e| e.into_inner()).push(name.clone());
    }

    /// Whether a farm of this process holds `name` for its life.
    pub(super) fn held_for_life(name: &SegmentName) -> bool {
        FOR_LIFE.lock().unwrap_or_else(|e| e.into_inner()).contains(name)
    }

    /// Ends one holder's hold on `name` (it was released or dropped).
    pub(super) fn end_life(name: &SegmentName) {
        let mut held = FOR_LIFE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = held.iter().position(|n| n == name) {
            held.swap_remove(k);
        }
    }
}
