//! The crate's own thread pool in a forked process: the child has none of the parent's threads,
//! so it must make a pool of its own instead of waiting on them. A file of its own, so no other
//! test's thread holds a lock at the fork.

use std::time::{Duration, Instant};

use gpfarm_gp::pipeline::in_pool;
use rayon::prelude::*;

fn sum() -> u64 {
    in_pool(|| (0..10_000u64).into_par_iter().sum())
}

#[test]
fn a_forked_child_works_on_a_pool_of_its_own() {
    assert_eq!(sum(), 49_995_000);
    // SAFETY: the child only runs `sum` and exits; the parent waits for it with a deadline.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let ok = sum() == 49_995_000;
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child, without blocking.
        let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if done == child {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: our own child, which would otherwise be left behind.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, &mut status, 0);
            }
            panic!("the forked child did not finish its parallel work in 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
}
