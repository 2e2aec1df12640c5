//! How many daemons a farm may have here: at least one, and no more than this machine's memory
//! and `/dev/shm` can hold.
//!
//! Checked before the first daemon is spawned, so a refused count costs no process and no
//! segment. Each warm daemon holds [`DAEMON_RSS`] of its own plus its segment
//! ([`SEGMENT_BYTES`], in `/dev/shm`, which is memory too); a count whose total exceeds what
//! `/proc/meminfo` calls available, or what `/dev/shm` has free, is refused with the numbers.
//! More daemons than cores is allowed (it only costs start-up time and memory) but worth a
//! warning. Must never start a process or touch a segment.

use gpfarm_protocol::segment::{HEADER_LEN, INITIAL_CAPACITY};
use thiserror::Error;

/// Resident memory of one warm `gpfarmd` (NVRTC loaded and warmed, CUBIN mode, tuned
/// allocator). Measured on NVRTC 13.0 with `gpfarm daemons start -n 2 --detach`: VmRSS in
/// `/proc/PID/status` was 81.5 and 81.8 MB idle, 88.0 and 88.6 MB after compiling 200 random
/// units (about 24 MB anonymous, 64 MB mapped files, mostly libnvrtc); rounded up. Counting the
/// shared library in full for every daemon overstates the cost, which errs on the safe side.
pub const DAEMON_RSS: u64 = 96 << 20;

/// Bytes of one daemon's segment as created: its header and its initial data region. The file
/// is sparse, but a large request or answer fills it.
pub const SEGMENT_BYTES: u64 = (HEADER_LEN + INITIAL_CAPACITY) as u64;

/// Most daemons one farm can name: ids are 16 bits.
pub const MAX_DAEMONS: usize = u16::MAX as usize;

/// A farm size this machine cannot run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FarmSizeError {
    /// Zero daemons asked for.
    #[error("a farm needs at least 1 daemon, 0 were asked for (leave the count out for one per core)")]
    NoDaemons,
    /// More daemons than a farm can number.
    #[error("{daemons} daemons asked for; a farm holds at most {MAX_DAEMONS}")]
    TooManyIds {
        /// Daemons asked for.
        daemons: usize,
    },
    /// More daemons than memory or `/dev/shm` can hold.
    #[error(
        "{daemons} daemons need {} MB of {what} ({:.1} MB each{}), but it has {} MB available; \
         at most {fits} fit",
        mb(need),
        *per_daemon as f64 / MB as f64,
        breakdown(what),
        mb(available)
    )]
    TooMany {
        /// Daemons asked for.
        daemons: usize,
        /// Bytes each daemon needs of the resource that ran short.
        per_daemon: u64,
        /// Bytes all of them need.
        need: u64,
        /// Bytes the resource has available.
        available: u64,
        /// Which resource: "memory" (MemAvailable) or "/dev/shm".
        what: &'static str,
        /// The largest count that fits.
        fits: u64,
    },
}

const MB: u64 = 1 << 20;

fn mb(bytes: &u64) -> u64 {
    bytes.div_ceil(MB)
}

fn breakdown(what: &str) -> String {
    if what == MEMORY {
        format!(": {:.1} MB segment + {} MB warm NVRTC", SEGMENT_BYTES as f64 / MB as f64, mb(&DAEMON_RSS))
    } else {
        String::new()
    }
}

const MEMORY: &str = "memory";
const SHM: &str = "/dev/shm";

/// What this machine has room for, as read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// `MemAvailable` of `/proc/meminfo`, bytes (`None`: unreadable, not checked).
    pub memory: Option<u64>,
    /// Free bytes of `/dev/shm` for this user (`None`: unreadable, not checked).
    pub shm: Option<u64>,
    /// Cores this process may run on.
    pub cores: usize,
}

impl Room {
    /// Reads the room of this machine.
    pub fn here() -> Room {
        Room {
            memory: std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| mem_available(&s)),
            shm: shm_free(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Whether `daemons` daemons fit; the error says which resource is short and by how much.
    pub fn check(&self, daemons: usize) -> Result<(), FarmSizeError> {
        if daemons == 0 {
            return Err(FarmSizeError::NoDaemons);
        }
        let n = daemons as u64;
        let short = |per_daemon: u64, available: u64, what| {
            let need = n.saturating_mul(per_daemon);
            (need > available).then_some(FarmSizeError::TooMany {
                daemons,
                per_daemon,
                need,
                available,
                what,
                fits: available / per_daemon,
            })
        };
        let memory = self.memory.and_then(|m| short(SEGMENT_BYTES + DAEMON_RSS, m, MEMORY));
        let shm = self.shm.and_then(|s| short(SEGMENT_BYTES, s, SHM));
        match memory.or(shm) {
            Some(e) => Err(e),
            None if daemons > MAX_DAEMONS => Err(FarmSizeError::TooManyIds { daemons }),
            None => Ok(()),
        }
    }
}

/// `MemAvailable` in bytes from the text of `/proc/meminfo`.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Bytes of `/dev/shm` an unprivileged user may still fill.
fn shm_free() -> Option<u64> {
    let path = c"/dev/shm";
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is writable memory of the struct statvfs fills.
    let r = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    st.f_bavail.checked_mul(st.f_frsize)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1 << 30;

    fn room(memory: u64, shm: u64) -> Room {
        Room { memory: Some(memory), shm: Some(shm), cores: 2 }
    }

    #[test]
    fn zero_daemons_are_refused() {
        assert_eq!(room(24 * GB, 24 * GB).check(0), Err(FarmSizeError::NoDaemons));
    }

    #[test]
    fn a_count_that_fits_in_memory_and_shm_is_accepted() {
        assert_eq!(room(24 * GB, 24 * GB).check(16), Ok(()));
        let unknown = Room { memory: None, shm: None, cores: 2 };
        assert_eq!(unknown.check(1000), Ok(()), "unreadable room is not checked");
    }

    #[test]
    fn a_count_beyond_memory_is_refused_with_the_numbers() {
        let e = room(24 * GB, 24 * GB).check(1000).unwrap_err();
        let FarmSizeError::TooMany { daemons, per_daemon, need, available, what, fits } = e.clone() else {
            panic!("{e:?}");
        };
        assert_eq!((daemons, what, available), (1000, "memory", 24 * GB));
        assert_eq!(per_daemon, SEGMENT_BYTES + DAEMON_RSS);
        assert_eq!(need, 1000 * per_daemon);
        assert!(fits * per_daemon <= available && (fits + 1) * per_daemon > available);
        let text = e.to_string();
        assert!(text.contains("1000 daemons") && text.contains("24576 MB available"), "{text}");
        assert!(text.contains("4.0 MB segment + 96 MB warm NVRTC"), "{text}");
        assert!(text.contains(&format!("at most {fits}")), "{text}");
    }

    #[test]
    fn a_small_dev_shm_limits_the_count_even_with_memory_to_spare() {
        let e = room(1 << 40, 64 << 20).check(16).unwrap_err();
        assert!(matches!(e, FarmSizeError::TooMany { what: "/dev/shm", fits: 15, .. }), "{e:?}");
    }

    #[test]
    fn more_daemons_than_ids_are_refused() {
        let e = room(u64::MAX, u64::MAX).check(MAX_DAEMONS + 1).unwrap_err();
        assert_eq!(e, FarmSizeError::TooManyIds { daemons: MAX_DAEMONS + 1 });
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24684096 kB\nMemFree: 1 kB\nMemAvailable:   23978808 kB\n";
        assert_eq!(mem_available(text), Some(23978808 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }
}
