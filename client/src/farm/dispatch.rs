//! One daemon's side of [`Farm::serve`](crate::Compiler::serve): a thread that takes
//! assignments, writes each as one request into the daemon's segment, waits (bounded, with
//! liveness checks) and reports what came of it.
//!
//! Must never decide retries; it only reports whether the daemon answered, died (and whether by
//! its own crash), hung, or broke the protocol.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use gpfarm_protocol::event;
use gpfarm_protocol::segment::MAX_CAPACITY;
use gpfarm_protocol::{CompileOptions, CompileRef, DaemonState, FailureKind, Response, Unit, UnitResult};

use super::daemon::{Daemon, Lost};

/// Room for the options and framing of a request around its units.
pub(super) const REQUEST_OVERHEAD: usize = 64 << 10;

/// Why a unit cannot be sent at all, if it cannot: it does not fit in a segment on its own.
pub(super) fn too_large(unit: &Unit) -> Option<UnitResult> {
    let bytes = unit.source.len() + unit.name.len() + unit.libraries.iter().map(Vec::len).sum::<usize>();
    (bytes + REQUEST_OVERHEAD > MAX_CAPACITY).then(|| {
        let why = format!(
            "unit of {bytes} bytes is larger than the largest request a segment holds ({} MiB)",
            MAX_CAPACITY >> 20
        );
        UnitResult::failed(FailureKind::InvalidSource, why)
    })
}

/// Units of one job sent to one daemon in one request.
pub(super) struct Assignment {
    pub(super) job: usize,
    pub(super) units: Arc<Vec<Unit>>,
    /// Indices into `units`, in request order.
    pub(super) picks: Vec<usize>,
}

/// What became of an assignment.
pub(super) enum Outcome {
    Compiled {
        results: Vec<UnitResult>,
        daemon_us: u64,
    },
    /// The daemon was lost; `culpable` when it crashed or hung by itself (rather than being killed
    /// from outside), `done` the units it had finished, so the one after them was being compiled.
    Lost {
        reason: String,
        culpable: bool,
        done: usize,
    },
    /// The request could not be written.
    NotSent(String),
    /// Other clients of a shared daemon held it for the whole wait; the line that says so.
    Busy(String),
}

/// An assignment's outcome, with what it cost.
pub(super) struct Answer {
    pub(super) daemon: usize,
    pub(super) assignment: Assignment,
    pub(super) outcome: Outcome,
    pub(super) write_us: u64,
    pub(super) read_us: u64,
    pub(super) request_bytes: u64,
}

/// One daemon's side of the farm's `serve`: takes assignments, runs each as one request.
pub(super) fn daemon_loop(
    k: usize,
    daemon: &Mutex<Daemon>,
    options: &CompileOptions,
    timeout: Duration,
    assignments: Receiver<Assignment>,
    answers: Sender<Answer>,
) {
    for assignment in assignments {
        let mut d = daemon.lock().unwrap_or_else(|e| e.into_inner());
        let t = Instant::now();
        let refs: Vec<&Unit> = assignment.picks.iter().map(|&i| &assignment.units[i]).collect();
        // A shared daemon first waits for this client's turn (up to the unit deadline).
        let turn = d.take_turn(timeout);
        let held = turn.is_ok();
        let t = if d.shared { Instant::now() } else { t };
        let seen = d.seg.done().load(Ordering::Acquire);
        let written = match &turn {
            Ok(()) => Some(d.seg.write_request(&CompileRef { options, units: &refs })),
            Err(_) => None,
        };
        let write_us = t.elapsed().as_micros() as u64;
        let (mut read_us, mut request_bytes) = (0, 0);
        let outcome = match written {
            None => match turn {
                Err(Lost::Busy(holder, waited)) => {
                    Outcome::Busy(super::error::busy_message(d.id, holder, waited))
                }
                Err(Lost::Died(m, crash)) => {
                    Outcome::Lost { reason: format!("gpfarmd {k} was lost: {m}"), culpable: crash, done: 0 }
                }
                _ => Outcome::Lost { reason: format!("gpfarmd {k} was lost"), culpable: false, done: 0 },
            },
            Some(Err(e)) => {
                Outcome::NotSent(format!("request not sent: {}", gpfarm_protocol::error_chain(&e)))
            }
            Some(Ok(bytes)) => {
                request_bytes = bytes as u64;
                d.seg.set_progress(0);
                d.seg.set_state(DaemonState::Processing);
                event::signal(d.seg.go());
                let waited = d.await_done(seen, timeout);
                let t = Instant::now();
                let response = waited.and_then(|()| {
                    d.seg.read_response().map_err(|e| Lost::Protocol(gpfarm_protocol::error_chain(&e)))
                });
                read_us = t.elapsed().as_micros() as u64;
                let lost = |reason: String, culpable: bool| Outcome::Lost {
                    reason,
                    culpable,
                    done: d.seg.progress() as usize,
                };
                match response {
                    Ok(Response::Compiled { results, daemon_us, .. }) if results.len() == refs.len() => {
                        Outcome::Compiled { results, daemon_us }
                    }
                    Ok(Response::Compiled { results, .. }) => {
                        lost(format!("answered {} results for {} units", results.len(), refs.len()), false)
                    }
                    Ok(Response::Error(m)) => lost(m, false),
                    Ok(other) => lost(format!("unexpected answer {other:?}"), false),
                    Err(Lost::Died(m, crash)) => {
                        lost(format!("gpfarmd {k} died while compiling: {m}"), crash)
                    }
                    Err(Lost::Hung) => lost(format!("gpfarmd {k} gave no answer within {timeout:?}"), true),
                    Err(Lost::Protocol(m)) => lost(m, false),
                    Err(Lost::Busy(..)) => unreachable!("await_done never waits for a turn"),
                }
            }
        };
        if held {
            d.let_go();
        }
        drop(d);
        let answer = Answer { daemon: k, assignment, outcome, write_us, read_us, request_bytes };
        if answers.send(answer).is_err() {
            return;
        }
    }
}
