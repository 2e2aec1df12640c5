//! Limits on what a run may ask for, checked before anything is allocated, so that an input too
//! large gets a one-line error instead of an abort or the OOM killer.

/// Most individuals per island (`--population`).
pub const MAX_POPULATION: usize = 100_000_000;

/// Most islands of one process (`--islands`): each is a thread with an evaluator of its own.
pub const MAX_ISLANDS: usize = 1024;

/// Bytes a population of `population` individuals of genomes up to `init_max_len` codons may
/// hold: parents and children, each with its genome and room for its phenotype and program.
pub fn population_bytes(population: usize, init_max_len: usize) -> u128 {
    population as u128 * 2 * (init_max_len as u128 * 4 + 512)
}

/// Bytes of memory this machine can still give (`MemAvailable` of `/proc/meminfo`), where the
/// system says.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `Ok` when `bytes` fit in [`available_memory`] (or the system does not say); else why not,
/// naming `what` needs them.
pub fn fits(what: &str, bytes: u128) -> Result<(), String> {
    fits_in(what, bytes, available_memory())
}

fn fits_in(what: &str, bytes: u128, available: Option<u64>) -> Result<(), String> {
    match available {
        Some(free) if bytes > u128::from(free) => Err(format!(
            "{what} would need {} of memory, and this machine has {} available",
            gib(bytes),
            gib(u128::from(free))
        )),
        _ => Ok(()),
    }
}

fn gib(bytes: u128) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_does_not_fit_says_how_much_it_needs() {
        assert!(fits_in("x", 10, Some(100)).is_ok());
        assert!(fits_in("x", 1 << 40, None).is_ok());
        let e = fits_in("the cases", 3 << 30, Some(1 << 30)).unwrap_err();
        assert_eq!(e, "the cases would need 3.0 GiB of memory, and this machine has 1.0 GiB available");
    }

    #[test]
    fn this_machine_says_what_it_has() {
        if cfg!(target_os = "linux") {
            assert!(available_memory().is_some_and(|b| b > 0));
        }
    }
}
