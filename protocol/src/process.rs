//! Which process is a daemon, and of which segment: decided from the process itself, never from
//! a segment's header.
//!
//! A header can be forged or corrupted by anyone who can write the segment; `/proc` cannot. A
//! process is the daemon of segment `gpfarm-<uid>-<farm>-<id>` when it is alive (not a zombie),
//! runs as this user (the owner of `/proc/PID`), is a `gpfarmd` (its `comm`), and was started
//! with `--farm <farm> --id <id>`. Signals go through a pidfd opened *before* that check, so a pid
//! recycled between the check and the signal gets nothing: the pidfd still names the process
//! that was checked, and a signal to it fails once it is gone.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;

use crate::names::{DaemonId, FarmName, SegmentName};

/// The effective user id of this process (the owner of the files and processes it creates).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether a process with this pid is running (it may belong to another user): it exists and is
/// not a zombie. A process that has died answers `kill(pid, 0)` until its parent reaps it, which
/// a parent that never reaps makes forever; its state in `/proc` says it is dead at once.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !is_zombie(pid)
}

/// Whether `pid` is stopped by a signal (`T`, SIGSTOP and the like) or by a tracer (`t`): it
/// runs no code until it is continued. Where `/proc` cannot say, no.
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with(['T', 't'])))
        .unwrap_or(false)
}

/// Whether `pid` has died and waits to be reaped (`Z`) or is being reaped (`X`). Where `/proc`
/// cannot say, no.
pub fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

/// The segment that live process `pid` serves, if it is a `gpfarmd` of this user; `None` for
/// any other process, a dead one, or one of another user.
pub fn daemon_segment(pid: u32) -> Option<SegmentName> {
    segment_from_args(&own_command_line(pid, |comm| comm.starts_with("gpfarmd"))?)
}

/// The command line of `pid` if it is a live process of this user whose command name passes
/// `comm`; `None` for any other process, a dead one, or one of another user.
fn own_command_line(pid: u32, comm: impl Fn(&str) -> bool) -> Option<Vec<u8>> {
    if pid == 0 || pid > i32::MAX as u32 {
        return None;
    }
    let dir = format!("/proc/{pid}");
    if std::fs::metadata(&dir).ok()?.uid() != effective_uid() || !comm(&comm_of(pid)?) {
        return None;
    }
    let cmdline = std::fs::read(format!("{dir}/cmdline")).ok()?;
    (!is_zombie(pid)).then_some(cmdline)
}

/// The pids in `/proc`, but this process's own.
fn other_pids() -> impl Iterator<Item = u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(move |&pid| pid != me)
}

/// The arguments of a NUL-separated command line that are UTF-8.
fn args_of(cmdline: &[u8]) -> Vec<&str> {
    cmdline.split(|&b| b == 0).filter_map(|a| std::str::from_utf8(a).ok()).collect()
}

/// The value of `flag` in `args`, given as `FLAG VALUE` or `FLAG=VALUE`.
fn flag_value<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    let eq = format!("{flag}=");
    args.iter()
        .enumerate()
        .find_map(|(i, a)| if *a == flag { args.get(i + 1).copied() } else { a.strip_prefix(eq.as_str()) })
}

/// The segment named by `--farm F --id I` (or `--farm=F --id=I`) in a NUL-separated command line.
fn segment_from_args(cmdline: &[u8]) -> Option<SegmentName> {
    let args = args_of(cmdline);
    let farm: FarmName = flag_value(&args, "--farm")?.parse().ok()?;
    let id: DaemonId = flag_value(&args, "--id")?.parse().ok()?;
    Some(SegmentName::new(&farm, id))
}

/// The farm named by a background keeper's command line (`gpfarm daemons start --keeper --name
/// F`, as `gpfarm daemons start --detach` starts it).
fn kept_farm_from_args(cmdline: &[u8]) -> Option<FarmName> {
    let args = args_of(cmdline);
    if !args.contains(&"--keeper") {
        return None;
    }
    flag_value(&args, "--name")?.parse().ok()
}

/// The farm that live process `pid` keeps in the background, if it is this user's `gpfarm daemons
/// start --keeper`. Found even while none of its daemons runs (one is between two lives).
pub fn kept_farm(pid: u32) -> Option<FarmName> {
    kept_farm_from_args(&own_command_line(pid, |comm| comm == "gpfarm")?)
}

/// Every live background keeper of farm `name` (see [`kept_farm`]).
pub fn keepers_of(name: &FarmName) -> Vec<u32> {
    other_pids().filter(|&pid| kept_farm(pid).is_some_and(|f| &f == name)).collect()
}

/// Whether `pid` is the live daemon of segment `name`.
pub fn is_daemon_of(pid: u32, name: &SegmentName) -> bool {
    daemon_segment(pid).is_some_and(|n| &n == name)
}

/// Every live daemon of this user, by the segment it serves (this process left out: a daemon
/// asking whether its own name is taken means by another). Where two claim one segment, the
/// lower pid is given.
pub fn live_daemons() -> HashMap<SegmentName, u32> {
    let mut found = HashMap::new();
    for pid in other_pids() {
        if let Some(name) = daemon_segment(pid) {
            found.entry(name).and_modify(|p: &mut u32| *p = (*p).min(pid)).or_insert(pid);
        }
    }
    found
}

/// The live daemon of segment `name`, found in `/proc`.
pub fn find_daemon(name: &SegmentName) -> Option<u32> {
    live_daemons().remove(name)
}

/// Sends `signal` to `pid` only if it is the live daemon of `name`; returns whether it was sent.
/// The pid is pinned by a pidfd before it is checked, so a pid recycled in between is not hit.
pub fn signal_daemon(pid: u32, name: &SegmentName, signal: i32) -> bool {
    signal_checked(pid, signal, |pid| is_daemon_of(pid, name))
}

/// Sends `signal` to `pid` only if `check(pid)` holds and the process is this user's; returns
/// whether it was sent. The process is pinned by a pidfd before it is checked, so a pid recycled
/// between the check and the signal is not hit.
pub fn signal_checked(pid: u32, signal: i32, check: impl Fn(u32) -> bool) -> bool {
    if pid <= 1 || pid > i32::MAX as u32 {
        return false;
    }
    let ours = |pid: u32| {
        std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == effective_uid()) && check(pid)
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        // Kernels before 5.3 have no pidfds: check, then signal by pid.
        return ours(pid)
            // SAFETY: kill(2) with a plain signal to a positive pid just checked to be ours.
            && unsafe { libc::kill(pid as libc::pid_t, signal) } == 0;
    }
    let fd = fd as libc::c_int;
    let sent = ours(pid)
        // SAFETY: a pidfd this function opened; no siginfo; no flags.
        && unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, fd, signal, std::ptr::null::<libc::siginfo_t>(), 0)
        } == 0;
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    sent
}

/// The command name of `pid` (`/proc/PID/comm`).
pub fn comm_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|c| c.trim_end().to_owned())
}

/// Resident memory of `pid` in bytes (`VmRSS`), if it can be read.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The parent of `pid`, from `/proc`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keeper_is_known_by_its_flag_and_farm_name() {
        let farm = |s: &str| kept_farm_from_args(s.replace(' ', "\0").as_bytes()).map(|f| f.to_string());
        assert_eq!(farm("gpfarm daemons start --keeper --name abc --arch sm_90").as_deref(), Some("abc"));
        assert_eq!(farm("gpfarm daemons start --keeper --name=abc").as_deref(), Some("abc"));
        // The starter itself and a foreground farm are no background keepers.
        assert_eq!(farm("gpfarm daemons start --detach --name abc"), None);
        assert_eq!(farm("gpfarm daemons start --keeper"), None);
        assert_eq!(farm("gpfarm daemons start --keeper --name ../x"), None);
    }

    #[test]
    fn the_segment_is_read_from_either_flag_form() {
        let name = |s: &str| segment_from_args(s.replace(' ', "\0").as_bytes());
        let farm: FarmName = "abc".parse().unwrap();
        let want = SegmentName::new(&farm, DaemonId(3));
        assert_eq!(name("gpfarmd --farm abc --id 3 --parent-pid 9"), Some(want.clone()));
        assert_eq!(name("/x/gpfarmd --id=3 --farm=abc"), Some(want));
        assert_eq!(name("gpfarmd --farm abc"), None);
        assert_eq!(name("gpfarmd --farm ABC --id 3"), None);
        assert_eq!(name("gpfarmd --farm abc --id x"), None);
    }

    #[test]
    fn a_process_that_is_not_a_daemon_is_never_one_and_is_not_signalled() {
        // A shell whose arguments look like a daemon's: the name decides, not the arguments.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30; :", "x", "--farm", "abc", "--id", "0"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let name = SegmentName::new(&"abc".parse().unwrap(), DaemonId(0));
        assert_eq!(daemon_segment(pid), None, "sleep is not a gpfarmd");
        assert!(!signal_daemon(pid, &name, libc::SIGKILL));
        assert!(process_alive(pid), "a process that is not a daemon was signalled");
        assert!(!signal_daemon(std::process::id(), &name, libc::SIGTERM));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!signal_daemon(pid, &name, libc::SIGKILL));
    }

    #[test]
    fn this_process_has_a_resident_size_and_a_parent() {
        assert!(resident_bytes(std::process::id()).is_some_and(|b| b > 0));
        assert!(parent_of(std::process::id()).is_some_and(|p| p > 0));
    }
}
