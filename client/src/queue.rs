//! A queue of compile jobs between a caller that produces work as it goes and a compiler that
//! takes each job as soon as it has a free worker, handing back each job's results as soon as
//! they are ready. This is what lets a caller evaluate the first compiled units while the rest
//! still compile, and keep every worker busy across its own rounds of work.
//!
//! Must never reorder the units of a job: results come back in the job's unit order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use gpfarm_protocol::{Unit, UnitResult};

/// Units compiled together, under an id of the caller's choosing.
#[derive(Debug, Clone)]
pub struct Job {
    /// The caller's name for the job, echoed in [`Finished`].
    pub id: u64,
    /// The units, each one translation unit.
    pub units: Vec<Unit>,
}

/// A job's results, with when it waited and ran.
#[derive(Debug)]
pub struct Finished {
    /// The job's id.
    pub id: u64,
    /// One result per unit, in the job's order.
    pub results: Vec<UnitResult>,
    /// When the job was submitted.
    pub queued: Instant,
    /// When a worker first took it.
    pub started: Instant,
    /// When its last result was in.
    pub ended: Instant,
    /// Time inside the compiler, summed over its units and attempts, microseconds.
    pub busy_us: u64,
}

/// A job with the time it was submitted.
pub(crate) struct Queued {
    pub(crate) job: Job,
    pub(crate) queued: Instant,
}

/// The caller's end: submits jobs, receives their results.
pub struct Submitter {
    jobs: Option<Sender<Queued>>,
    finished: Receiver<Finished>,
    free: Arc<AtomicUsize>,
    abandoned: Arc<AtomicBool>,
}

/// The compiler's end: takes jobs, returns their results (see [`crate::Compiler::serve`]).
pub struct Worklist {
    pub(crate) jobs: Receiver<Queued>,
    pub(crate) finished: Sender<Finished>,
    free: Arc<AtomicUsize>,
    abandoned: Arc<AtomicBool>,
}

/// A new, empty queue.
pub fn job_queue() -> (Submitter, Worklist) {
    let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let free = Arc::new(AtomicUsize::new(0));
    let abandoned = Arc::new(AtomicBool::new(false));
    (
        Submitter {
            jobs: Some(jobs_tx),
            finished: done_rx,
            free: free.clone(),
            abandoned: abandoned.clone(),
        },
        Worklist { jobs: jobs_rx, finished: done_tx, free, abandoned },
    )
}

impl Submitter {
    /// Queues a job. Jobs are taken in the order they were submitted. Returns `false` if the
    /// compiler has stopped serving (its results will never come).
    pub fn submit(&self, job: Job) -> bool {
        match &self.jobs {
            Some(tx) => tx.send(Queued { job, queued: Instant::now() }).is_ok(),
            None => false,
        }
    }

    /// No more jobs: the compiler finishes what it has and returns from `serve`.
    pub fn close(&mut self) {
        self.jobs = None;
    }

    /// Results, one per job, in the order jobs finish.
    pub fn finished(&self) -> &Receiver<Finished> {
        &self.finished
    }

    /// Workers that are idle with nothing queued for them: room for more work right now.
    pub fn free_workers(&self) -> usize {
        self.free.load(Ordering::Relaxed)
    }
}

impl Drop for Submitter {
    /// Nobody will read what is still queued: the compiler drops it and returns.
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }
}

impl Worklist {
    /// Whether the submitter is gone, so queued work is of no use to anyone.
    pub(crate) fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// Tells the submitter how many workers could take a job right now.
    pub(crate) fn set_free(&self, n: usize) {
        self.free.store(n, Ordering::Relaxed);
    }
}
