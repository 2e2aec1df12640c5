//! The "go" and "done" events: a sequence counter in shared memory plus a Linux futex.
//!
//! The paper uses two named auto-reset events per daemon. Here each event is an `AtomicU32`
//! inside the segment that the signalling side increments before waking waiters. A waiter
//! remembers the last value it saw and waits while the counter still holds it, so a signal sent
//! before the waiter sleeps is never lost, and nothing (no mutex) can be left locked by a peer
//! that dies. Every wait is bounded; callers loop, checking liveness and deadlines in between.
//! This replaces `raw_sync`'s events, whose sub-second timeouts fail at random and whose mutex
//! hangs when a peer dies inside it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How a bounded wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The counter moved on from the value waited on.
    Signalled(u32),
    /// The timeout passed with the counter unchanged.
    TimedOut,
}

/// Signals the event: increments the counter and wakes every waiter.
pub fn signal(word: &AtomicU32) -> u32 {
    let next = word.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
    futex_wake(word);
    next
}

/// Waits up to `timeout` for the counter to differ from `seen`.
pub fn wait(word: &AtomicU32, seen: u32, timeout: Duration) -> Wake {
    let now = word.load(Ordering::Acquire);
    if now != seen {
        return Wake::Signalled(now);
    }
    futex_wait(word, seen, timeout);
    let now = word.load(Ordering::Acquire);
    if now != seen { Wake::Signalled(now) } else { Wake::TimedOut }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call (it lives in a mapping
    // that outlives this borrow); FUTEX_WAIT (shared, not private, because the word is in memory
    // mapped by several processes) only reads it. EINTR, EAGAIN and ETIMEDOUT are all fine: the
    // caller re-reads the counter.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE does not touch the word.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_signal_sent_before_waiting_is_not_lost() {
        let word = AtomicU32::new(5);
        signal(&word);
        assert_eq!(wait(&word, 5, Duration::from_secs(5)), Wake::Signalled(6));
    }

    #[test]
    fn an_unsignalled_wait_times_out_near_its_deadline() {
        let word = AtomicU32::new(0);
        let start = Instant::now();
        assert_eq!(wait(&word, 0, Duration::from_millis(300)), Wake::TimedOut);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(250), "returned after {took:?}");
    }

    #[test]
    fn a_signal_from_another_thread_wakes_the_waiter() {
        let word = Arc::new(AtomicU32::new(0));
        let signaller = {
            let word = Arc::clone(&word);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                signal(&word);
            })
        };
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Wake::Signalled(v) = wait(&word, seen, Duration::from_secs(1)) {
                seen = v;
                break;
            }
        }
        signaller.join().unwrap();
        assert_eq!(seen, 1);
    }
}
