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
    /// Which submitter of a shared queue this is ([`shared_job_queue`]), in the top bits of the
    /// ids it sends.
    tag: u64,
    free: Arc<AtomicUsize>,
    abandoned: Arc<AtomicBool>,
}

/// The compiler's end: takes jobs, returns their results (see [`crate::Compiler::serve`]).
pub struct Worklist {
    pub(crate) jobs: Receiver<Queued>,
    /// One per submitter.
    finished: Vec<Sender<Finished>>,
    free: Arc<AtomicUsize>,
    abandoned: Arc<AtomicBool>,
}

/// Bits of a job id left to the caller of a shared queue; the rest name the submitter.
const ID_BITS: u32 = 48;

/// A new, empty queue.
pub fn job_queue() -> (Submitter, Worklist) {
    let (mut submitters, work) = shared_job_queue(1);
    (submitters.pop().expect("one submitter"), work)
}

/// A queue that `n` callers share (islands of one run, say): each submits through its own
/// [`Submitter`] and gets back only its own jobs' results; the compiler takes all jobs in the
/// order they were submitted. Each caller may use job ids below 2^48. The compiler returns from
/// `serve` once every submitter is closed and every job is done, or once any is dropped
/// without closing.
pub fn shared_job_queue(n: usize) -> (Vec<Submitter>, Worklist) {
    let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
    let free = Arc::new(AtomicUsize::new(0));
    let abandoned = Arc::new(AtomicBool::new(false));
    let (finished, submitters) = (0..n.max(1) as u64)
        .map(|tag| {
            let (done_tx, done_rx) = crossbeam_channel::unbounded();
            let submitter = Submitter {
                jobs: Some(jobs_tx.clone()),
                finished: done_rx,
                tag,
                free: free.clone(),
                abandoned: abandoned.clone(),
            };
            (done_tx, submitter)
        })
        .unzip();
    (submitters, Worklist { jobs: jobs_rx, finished, free, abandoned })
}

impl Submitter {
    /// Queues a job. Jobs are taken in the order they were submitted. Returns `false` if the
    /// compiler has stopped serving (its results will never come).
    pub fn submit(&self, mut job: Job) -> bool {
        debug_assert!(job.id >> ID_BITS == 0, "job ids of a shared queue must stay below 2^48");
        job.id |= self.tag << ID_BITS;
        match &self.jobs {
            Some(tx) => tx.send(Queued { job, queued: Instant::now() }).is_ok(),
            None => false,
        }
    }

    /// No more jobs: the compiler finishes what it has and returns from `serve` (once every
    /// submitter of a shared queue is closed).
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
    /// Unless closed first, nobody will read what is still queued: the compiler drops it and
    /// returns.
    fn drop(&mut self) {
        if self.jobs.is_some() {
            self.abandoned.store(true, Ordering::Relaxed);
        }
    }
}

impl Worklist {
    /// Whether the submitter is gone, so queued work is of no use to anyone.
    pub(crate) fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// Hands a job's results to the submitter that sent it; `false` if it is gone.
    pub(crate) fn finish(&self, mut finished: Finished) -> bool {
        let tag = (finished.id >> ID_BITS) as usize;
        finished.id &= (1 << ID_BITS) - 1;
        self.finished.get(tag).is_some_and(|tx| tx.send(finished).is_ok())
    }

    /// Tells the submitter how many workers could take a job right now.
    pub(crate) fn set_free(&self, n: usize) {
        self.free.store(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(id: u64) -> Finished {
        let now = Instant::now();
        Finished { id, results: Vec::new(), queued: now, started: now, ended: now, busy_us: 0 }
    }

    #[test]
    fn a_shared_queue_takes_jobs_in_order_and_gives_each_submitter_its_own_results() {
        let (mut submitters, work) = shared_job_queue(3);
        for (k, s) in submitters.iter().enumerate() {
            assert!(s.submit(Job { id: 7, units: Vec::new() }));
            assert!(s.submit(Job { id: k as u64, units: Vec::new() }));
        }
        let taken: Vec<u64> = work.jobs.try_iter().map(|q| q.job.id).collect();
        assert_eq!(taken.len(), 6);
        // In submission order, each id tagged with its submitter.
        assert_eq!(taken.iter().map(|id| id >> ID_BITS).collect::<Vec<_>>(), [0, 0, 1, 1, 2, 2]);
        for &id in taken.iter().rev() {
            assert!(work.finish(done(id)));
        }
        for (k, s) in submitters.iter().enumerate() {
            let got: Vec<u64> = s.finished().try_iter().map(|f| f.id).collect();
            assert_eq!(got, [k as u64, 7], "submitter {k}");
        }
        // Closing every submitter ends the work; dropping closed ones abandons nothing.
        for s in &mut submitters {
            s.close();
        }
        drop(submitters);
        assert!(!work.abandoned() && work.jobs.recv().is_err());
    }

    #[test]
    fn dropping_an_open_submitter_abandons_the_queue() {
        let (mut submitters, work) = shared_job_queue(2);
        submitters[0].close();
        drop(submitters.remove(0));
        assert!(!work.abandoned());
        drop(submitters);
        assert!(work.abandoned());
    }
}
