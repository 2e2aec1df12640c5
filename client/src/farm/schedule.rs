//! Scheduling: which units go to which daemon, and what a lost daemon costs each unit.
//!
//! One coordinating thread (the caller's) hands out work to the next idle daemon, collects
//! answers, and on a loss decides per unit: the unit the daemon crashed or hung on is tried once
//! more alone and then fails as `Lost`; the others wait again at the front of the line. Every
//! unit is sent a bounded number of times, so no daemon failure can loop. Must never reorder the
//! results of a job.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::Sender;
use gpfarm_protocol::{CompileOptions, FailureKind, Unit, UnitResult};

use super::Farm;
use super::daemon::Daemon;
use super::dispatch::{Answer, Assignment, Outcome, daemon_loop, too_large};
use crate::compiler::{BatchStats, WorkerStats};
use crate::queue::{Finished, Queued, Worklist};

/// A unit its daemon crashed or hung on is tried this often before it fails.
const CULPRIT_TRIES: u8 = 2;
/// A unit lost with no culprit named is tried this often.
const MAX_ATTEMPTS: u8 = 3;
/// A unit is sent at most this often, whatever happens to its daemons (killed from outside
/// again and again costs a unit nothing else). 32 was too few: the first of two 1,000-kill
/// chaos runs of spawned farms on the 2-core machine (a daemon SIGKILLed every 30-230 ms) lost
/// one request's six units to this limit (the only way a unit whose daemons are killed from
/// outside is given up).
const MAX_SENDS: u8 = 128;

/// A job being compiled: its units, what is known of each, and its times.
struct JobState {
    id: u64,
    units: Arc<Vec<Unit>>,
    results: Vec<Option<UnitResult>>,
    open: usize,
    queued: Instant,
    started: Option<Instant>,
    busy_us: u64,
    strikes: Vec<u8>,
    attempts: Vec<u8>,
    sends: Vec<u8>,
}

impl JobState {
    fn resolve(&mut self, i: usize, r: UnitResult) {
        if self.results[i].is_none() {
            self.open -= 1;
        }
        self.results[i] = Some(r);
    }
}

/// Work waiting for a daemon: some units of one job.
struct Item {
    job: usize,
    picks: Vec<usize>,
}

impl Farm {
    /// Serves a job queue (see [`Compiler::serve`]): each job goes to the next free daemon as
    /// one request, and its results go back as soon as they are in. A daemon that dies or hangs
    /// is restarted; the unit it crashed or hung on is tried once more on its own and then fails
    /// as `Lost` with the reason; the rest of its request is sent again at no cost to it.
    pub(super) fn serve_queue(&mut self, options: &CompileOptions, work: Worklist) -> BatchStats {
        let start = Instant::now();
        let mut stats = BatchStats::default();
        let daemons: Vec<Mutex<Daemon>> =
            std::mem::take(&mut self.daemons).into_iter().map(Mutex::new).collect();
        stats.workers = vec![WorkerStats::default(); daemons.len()];
        let mut gone = vec![false; daemons.len()];
        let timeout = self.config.request_timeout;
        std::thread::scope(|scope| {
            let (answer_tx, answers) = crossbeam_channel::unbounded::<Answer>();
            let mut to_daemon: Vec<Option<Sender<Assignment>>> = Vec::with_capacity(daemons.len());
            for (k, d) in daemons.iter().enumerate() {
                let (tx, rx) = crossbeam_channel::unbounded();
                let answer_tx = answer_tx.clone();
                scope.spawn(move || daemon_loop(k, d, options, timeout, rx, answer_tx));
                to_daemon.push(Some(tx));
            }
            drop(answer_tx);
            let mut jobs: HashMap<usize, JobState> = HashMap::new();
            let mut next_job = 0usize;
            let mut pending: VecDeque<Item> = VecDeque::new();
            let mut idle: Vec<usize> = (0..daemons.len()).rev().collect();
            let mut busy = 0usize;
            let mut open = true;
            let never = crossbeam_channel::never();
            loop {
                while !pending.is_empty() && !idle.is_empty() {
                    let (Some(item), Some(k)) = (pending.pop_front(), idle.pop()) else { break };
                    let Some(job) = jobs.get_mut(&item.job) else { continue };
                    job.started.get_or_insert_with(Instant::now);
                    for &i in &item.picks {
                        job.sends[i] += 1;
                    }
                    let assignment =
                        Assignment { job: item.job, units: job.units.clone(), picks: item.picks };
                    if let Some(tx) = &to_daemon[k]
                        && tx.send(assignment).is_ok()
                    {
                        busy += 1;
                    }
                }
                let why = if to_daemon.iter().all(Option::is_none) {
                    Some("no daemon left to compile it")
                } else if work.abandoned() {
                    Some("abandoned: nobody waits for it")
                } else {
                    None
                };
                if let Some(why) = why {
                    for item in pending.drain(..) {
                        if let Some(job) = jobs.get_mut(&item.job) {
                            for i in item.picks {
                                job.resolve(i, UnitResult::failed(FailureKind::Lost, why));
                            }
                        }
                    }
                }
                // Room first, then results: whoever wakes on a result sees the room it left.
                work.set_free(if pending.is_empty() { idle.len() } else { 0 });
                self.finish_jobs(&mut jobs, &work);
                if !open && pending.is_empty() && busy == 0 {
                    break;
                }
                let incoming = if open { &work.jobs } else { &never };
                crossbeam_channel::select! {
                    recv(incoming) -> msg => match msg {
                        Ok(Queued { job, queued }) => {
                            let n = job.units.len();
                            let mut state = JobState {
                                id: job.id,
                                units: Arc::new(job.units),
                                results: vec![None; n],
                                open: n,
                                queued,
                                started: None,
                                busy_us: 0,
                                strikes: vec![0; n],
                                attempts: vec![0; n],
                                sends: vec![0; n],
                            };
                            let mut picks = Vec::with_capacity(n);
                            for i in 0..n {
                                match too_large(&state.units[i]) {
                                    Some(r) => state.resolve(i, r),
                                    None => picks.push(i),
                                }
                            }
                            if !picks.is_empty() {
                                pending.push_back(Item { job: next_job, picks });
                            }
                            jobs.insert(next_job, state);
                            next_job += 1;
                        }
                        Err(_) => open = false,
                    },
                    recv(answers) -> answer => {
                        let Ok(answer) = answer else { break };
                        busy -= 1;
                        let k = answer.daemon;
                        stats.write_us += answer.write_us;
                        stats.read_us += answer.read_us;
                        stats.workers[k].request_bytes += answer.request_bytes;
                        let Assignment { job: job_index, picks, .. } = answer.assignment;
                        let Some(job) = jobs.get_mut(&job_index) else { continue };
                        match answer.outcome {
                            Outcome::Compiled { results, daemon_us } => {
                                stats.workers[k].units += results.len();
                                stats.workers[k].busy_us += daemon_us;
                                job.busy_us += daemon_us;
                                for (i, r) in picks.into_iter().zip(results) {
                                    job.resolve(i, r);
                                }
                                // A unit that left NVRTC's allocator holding far more than a warm
                                // daemon's memory would leave it so for good: start afresh.
                                // (A resident farm's keeper does this for its own daemons.)
                                let mut d = daemons[k].lock().unwrap_or_else(|e| e.into_inner());
                                match self.over_memory(&d).filter(|_| self.owns_daemons) {
                                    None => idle.push(k),
                                    Some((rss, limit)) => {
                                        tracing::info!(
                                            "daemon {} holds {} MiB after its units, over {} MiB: replaced",
                                            d.id,
                                            rss >> 20,
                                            limit >> 20
                                        );
                                        let back = self.recover(&mut d);
                                        after_recovery(back, k, &mut stats, &mut idle, &mut gone, &mut to_daemon);
                                    }
                                }
                            }
                            Outcome::Busy(why) => {
                                for i in picks {
                                    job.resolve(i, UnitResult::failed(FailureKind::Lost, why.clone()));
                                }
                                idle.push(k);
                            }
                            Outcome::NotSent(why) => {
                                for i in picks {
                                    job.resolve(i, UnitResult::failed(FailureKind::Internal, why.clone()));
                                }
                                idle.push(k);
                            }
                            Outcome::Lost { reason, culpable, done } => {
                                stats.lost_daemons += 1;
                                stats.first_loss_detected_us.get_or_insert(start.elapsed().as_micros() as u64);
                                let named = culpable && done < picks.len();
                                let mut again = Vec::new();
                                for (pos, i) in picks.into_iter().enumerate() {
                                    if named && pos == done {
                                        job.strikes[i] += 1;
                                        let why = format!("{reason} (on this unit)");
                                        if job.strikes[i] >= CULPRIT_TRIES || job.sends[i] >= MAX_SENDS {
                                            job.resolve(i, UnitResult::failed(FailureKind::Lost, why));
                                        } else {
                                            // Alone, so that a second crash costs no one else.
                                            stats.retried_units += 1;
                                            pending.push_back(Item { job: job_index, picks: vec![i] });
                                        }
                                        continue;
                                    }
                                    job.attempts[i] += u8::from(culpable && !named);
                                    if job.attempts[i] >= MAX_ATTEMPTS || job.sends[i] >= MAX_SENDS {
                                        let why = format!(
                                            "{reason} (sent {} times, lost {} times by a fault of its daemon)",
                                            job.sends[i], job.attempts[i]
                                        );
                                        job.resolve(i, UnitResult::failed(FailureKind::Lost, why));
                                    } else {
                                        again.push(i);
                                    }
                                }
                                if !again.is_empty() {
                                    // They waited through a loss that was not theirs: first in line.
                                    stats.retried_units += again.len();
                                    pending.push_front(Item { job: job_index, picks: again });
                                }
                                let mut d = daemons[k].lock().unwrap_or_else(|e| e.into_inner());
                                let back = self.recover(&mut d);
                                after_recovery(back, k, &mut stats, &mut idle, &mut gone, &mut to_daemon);
                            }
                        }
                    },
                }
            }
            drop(to_daemon);
            for job in jobs.values_mut() {
                for i in 0..job.results.len() {
                    if job.results[i].is_none() {
                        job.resolve(i, UnitResult::failed(FailureKind::Lost, "no daemon left to compile it"));
                    }
                }
            }
            self.finish_jobs(&mut jobs, &work);
        });
        self.daemons = daemons
            .into_iter()
            .zip(gone)
            .filter_map(|(d, gone)| {
                let d = d.into_inner().unwrap_or_else(|e| e.into_inner());
                if gone {
                    d.seg.unlock_client(std::process::id());
                    None
                } else {
                    Some(d)
                }
            })
            .collect();
        work.set_free(0);
        stats.wait_us = start.elapsed().as_micros() as u64;
        stats.wall_us = stats.wait_us;
        stats
    }

    /// Sends back every job whose units all have a result.
    fn finish_jobs(&self, jobs: &mut HashMap<usize, JobState>, work: &Worklist) {
        let done: Vec<usize> = jobs.iter().filter(|(_, j)| j.open == 0).map(|(&k, _)| k).collect();
        for k in done {
            let Some(job) = jobs.remove(&k) else { continue };
            let now = Instant::now();
            let results = job
                .results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| UnitResult::failed(FailureKind::Lost, "lost")))
                .collect();
            work.finish(Finished {
                id: job.id,
                results,
                queued: job.queued,
                started: job.started.unwrap_or(now),
                ended: now,
                busy_us: job.busy_us,
            });
        }
    }
}

/// Daemon `k` is back (idle again, one more restart) or gone for good (no more work for it).
fn after_recovery(
    back: bool,
    k: usize,
    stats: &mut BatchStats,
    idle: &mut Vec<usize>,
    gone: &mut [bool],
    to_daemon: &mut [Option<Sender<Assignment>>],
) {
    if back {
        stats.restarts += 1;
        idle.push(k);
    } else {
        gone[k] = true;
        to_daemon[k] = None;
    }
}
