//! Mappings of files that another process may cut short.
//!
//! A process that maps a segment it did not create (a client, a resident farm's keeper) cannot
//! stop the file being truncated under the mapping (by its daemon, or any process of the same
//! user), and touching a page past the new end raises SIGBUS, which would kill it. So such
//! mappings are *watched*: this module's SIGBUS handler, finding the faulting address inside a
//! watched mapping, maps a page of zeros over the lost page (anonymous, private) and returns, so
//! that the access completes, reads zeros, and the mapping is marked lost. Zeros are never a
//! valid header (its magic is gone), so every check of the segment then reports it, and the
//! process goes on: a keeper replaces the daemon, a client gives up on it. A fault anywhere else
//! goes to the handler that was there before (Rust's own, for stack overflows) or, without one,
//! to the default action, as if this handler were not there.
//!
//! The handler only reads a fixed table of atomics and calls `mmap`, so it takes no lock and
//! allocates nothing. At most [`SLOTS`] mappings are watched at once; beyond that a mapping is
//! left unwatched (and a fault in it is fatal, as before).

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Mappings watched at once.
pub const SLOTS: usize = 4096;

struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    lost: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot =
    Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), lost: AtomicBool::new(false) };
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
static INSTALL: Once = Once::new();
/// The SIGBUS action this module's handler replaced.
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
static HAVE_PREVIOUS: AtomicBool = AtomicBool::new(false);

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// Watches the mapping of `len` bytes at `start`; the slot to pass to [`unwatch`] and [`lost`],
/// or `None` when every slot is taken.
pub fn watch(start: usize, len: usize) -> Option<usize> {
    INSTALL.call_once(install);
    for (i, slot) in TABLE.iter().enumerate() {
        // Claim a free slot by its length: 0 free, usize::MAX being filled in.
        if slot.len.compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            slot.lost.store(false, Ordering::Relaxed);
            slot.start.store(start, Ordering::Release);
            slot.len.store(len, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Stops watching the mapping of `slot` (before it is unmapped).
pub fn unwatch(slot: usize) {
    if let Some(s) = TABLE.get(slot) {
        s.start.store(0, Ordering::Release);
        s.len.store(0, Ordering::Release);
    }
}

/// Whether a page of the mapping of `slot` was lost to truncation (and reads zeros now).
pub fn lost(slot: usize) -> bool {
    TABLE.get(slot).is_some_and(|s| s.lost.load(Ordering::Acquire))
}

fn install() {
    // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature; the
    // previous action is written once, here, before any fault can call the handler that reads it.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        let previous = &raw mut PREVIOUS;
        if libc::sigaction(libc::SIGBUS, &action, (*previous).as_mut_ptr()) == 0 {
            HAVE_PREVIOUS.store(true, Ordering::Release);
        }
    }
}

extern "C" fn handler(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in &TABLE {
        let len = slot.len.load(Ordering::Acquire);
        let start = slot.start.load(Ordering::Acquire);
        if len == 0 || len == usize::MAX || addr < start || addr >= start + len {
            continue;
        }
        let page = addr & !(page_size() - 1);
        // SAFETY: the page lies inside a mapping this process made and still holds (it is
        // unwatched before it is unmapped); a fixed anonymous mapping replaces just that page.
        let p = unsafe {
            libc::mmap(
                page as *mut libc::c_void,
                page_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            slot.lost.store(true, Ordering::Release);
            return;
        }
    }
    // Not a watched mapping: what was there before this handler.
    // SAFETY: PREVIOUS was written by `install` before this handler could run.
    unsafe {
        let previous: &libc::sigaction = &*(&raw const PREVIOUS).cast::<libc::sigaction>();
        let custom = HAVE_PREVIOUS.load(Ordering::Acquire)
            && previous.sa_sigaction != libc::SIG_DFL
            && previous.sa_sigaction != libc::SIG_IGN;
        if custom && previous.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(previous.sa_sigaction);
            f(signal, info, context);
        } else if custom {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(previous.sa_sigaction);
            f(signal);
        } else {
            // The default action: returning re-runs the access, which faults again, fatally.
            libc::signal(libc::SIGBUS, libc::SIG_DFL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_file_cut_short_under_a_watched_mapping_reads_zeros_instead_of_killing() {
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &[7u8; 8192]).unwrap();
        let len = 8192;
        // SAFETY: a fresh shared mapping of a file this test owns.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let slot = watch(p as usize, len).unwrap();
        // SAFETY: reading inside the mapping.
        assert_eq!(unsafe { std::ptr::read_volatile((p as *const u8).add(5000)) }, 7);
        file.set_len(0).unwrap();
        // SAFETY: inside the mapping; the page is gone from the file, so this faults and the
        // handler puts zeros there.
        let after = unsafe { std::ptr::read_volatile((p as *const u8).add(5000)) };
        assert_eq!(after, 0);
        assert!(lost(slot));
        unwatch(slot);
        // SAFETY: unmapping the test's own mapping.
        unsafe { libc::munmap(p, len) };
    }
}
