//! One supervisor for every child process this library starts: the compile daemons and the GPU
//! evaluation worker.
//!
//! A [`Supervised`] child is spawned with a parent-death signal (unless it is meant to outlive
//! us), checked for liveness without blocking, and killed and reaped when it is restarted or
//! dropped, so no child of ours outlives its owner or lingers as a zombie. A child that has
//! exited but is not yet reaped is *not* alive: liveness goes through `waitpid`, never `kill(0)`.
//! Also here: where the helper executables are found ([`locate_executable`]); processes it did
//! not start are looked at through `gpfarm_protocol::process`.
//!
//! Must never block without a bound, and never signal a pid it does not own: processes it did
//! not start are signalled only through [`signal_daemon`], which checks that the pid is this
//! user's daemon of the named segment.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus};
use std::time::{Duration, Instant};

use thiserror::Error;

/// What happens to a child when the thread that spawned it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentDeath {
    /// It gets this signal (`PR_SET_PDEATHSIG`). The kernel sends it when the spawning *thread*
    /// ends, so spawn from the thread that owns the [`Supervised`].
    Signal(i32),
    /// It gets this signal when this *process* ends, whichever thread asked for it: it is
    /// spawned from a thread of its own that lives as long as the process (for a child kept
    /// beyond the thread that started it, such as an idle GPU worker kept for the next run).
    ProcessSignal(i32),
    /// It outlives us, in a process group of its own so that a Ctrl-C meant for our terminal
    /// does not reach it either.
    Outlive,
}

/// A child could not be started.
#[derive(Debug, Error)]
#[error("cannot start {}", program.display())]
pub struct SpawnError {
    /// The executable.
    pub program: PathBuf,
    /// Why the OS refused.
    #[source]
    pub source: io::Error,
}

/// A helper executable could not be found.
#[derive(Debug, Error)]
pub enum LocateError {
    /// Where this process's own executable is could not be read.
    #[error("locating this executable")]
    CurrentExe(#[source] io::Error),
    /// It is nowhere it is looked for.
    #[error(
        "{name} not found beside {} or on PATH; build it with `cargo build --release` or set {env}",
        beside.display()
    )]
    NotFound {
        /// The executable's file name.
        name: &'static str,
        /// The executable it was looked for beside.
        beside: PathBuf,
        /// The environment variable that names it.
        env: &'static str,
    },
}

/// The directory of the Python interpreter that loaded gpfarm, as it was started (a virtual
/// environment's `bin/`, which the current executable's path, links followed, is not): pip puts
/// the package's commands there. Set by the Python package.
pub const PYTHON_BIN_VAR: &str = "GPFARM_PYTHON_BIN";

/// Finds the helper executable `name`: the path in environment variable `env` if set, then in
/// [`PYTHON_BIN_VAR`] (the environment of the Python that loaded gpfarm, ahead of the installation
/// its interpreter links to), then beside the current executable (and one level up, where test
/// binaries live), then on `PATH`.
pub fn locate_executable(name: &'static str, env: &'static str) -> Result<PathBuf, LocateError> {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(LocateError::CurrentExe)?;
    let python =
        std::env::var_os(PYTHON_BIN_VAR).filter(|p| !p.is_empty()).map(|d| PathBuf::from(d).join(name));
    let mut candidates: Vec<PathBuf> =
        python.into_iter().chain(exe.ancestors().skip(1).take(2).map(|d| d.join(name))).collect();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(name)));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or(LocateError::NotFound { name, beside: exe, env })
}

/// Whether a child is still running, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Running (or stopped), not exited.
    Alive,
    /// Exited and reaped.
    Ended {
        /// Its exit status.
        status: ExitStatus,
        /// Whether it ended by a crash of its own (a crash signal or an error exit) rather than
        /// a kill from outside or a clean exit.
        crashed: bool,
    },
}

/// A request to the keeper thread: a command to spawn with a parent-death signal, and where the
/// child goes.
type KeeperRequest = (Command, i32, std::sync::mpsc::Sender<Result<Supervised, SpawnError>>);

/// Spawns `cmd` from the keeper: a thread started on first use that lives as long as the
/// process, so the child's parent-death signal `sig` fires when the process ends.
fn spawn_from_keeper(cmd: Command, sig: i32) -> Result<Supervised, SpawnError> {
    // The keeper of this process: a process forked from one with a keeper has the channel but
    // not the thread, and starts its own.
    type Keeper = (u32, std::sync::mpsc::Sender<KeeperRequest>);
    static KEEPER: std::sync::Mutex<Option<Keeper>> = std::sync::Mutex::new(None);
    let program = PathBuf::from(cmd.get_program());
    let gone = |why: &str| SpawnError { program: program.clone(), source: io::Error::other(why.to_owned()) };
    let me = std::process::id();
    let (reply, answer) = std::sync::mpsc::channel();
    {
        let mut keeper = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
        if keeper.as_ref().is_none_or(|(pid, _)| *pid != me) {
            let (tx, rx) = std::sync::mpsc::channel::<KeeperRequest>();
            // If the thread cannot start, the request finds the channel closed and fails below.
            let _ = std::thread::Builder::new().name("gpfarm-keeper".into()).spawn(move || {
                for (cmd, sig, reply) in rx {
                    let _ = reply.send(Supervised::spawn(cmd, ParentDeath::Signal(sig)));
                }
            });
            if let Some(old) = keeper.replace((me, tx)) {
                // The parent's channel: its receiver belongs to no thread here.
                std::mem::forget(old);
            }
        }
        let (_, tx) = keeper.as_ref().expect("set above");
        tx.send((cmd, sig, reply)).map_err(|_| gone("the keeper thread is not running"))?;
    }
    // Spawning is a fork and an exec: it answers at once or not at all.
    answer.recv_timeout(Duration::from_secs(30)).map_err(|_| gone("the keeper thread did not answer"))?
}

/// Signals that mean a process crashed by itself.
pub(crate) const CRASH_SIGNALS: [i32; 5] =
    [libc::SIGSEGV, libc::SIGABRT, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// A child process that is ended and reaped when dropped (unless detached).
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    ended: Option<ExitStatus>,
    policy: ParentDeath,
    detached: bool,
}

impl Supervised {
    /// Starts `cmd` with the given parent-death policy.
    pub fn spawn(mut cmd: Command, on_parent_death: ParentDeath) -> Result<Supervised, SpawnError> {
        if let ParentDeath::ProcessSignal(sig) = on_parent_death {
            let mut child = spawn_from_keeper(cmd, sig)?;
            child.policy = on_parent_death;
            return Ok(child);
        }
        match on_parent_death {
            ParentDeath::ProcessSignal(_) => unreachable!("spawned by the keeper above"),
            ParentDeath::Outlive => {
                cmd.process_group(0);
            }
            ParentDeath::Signal(sig) => {
                let parent = std::process::id() as libc::pid_t;
                // SAFETY: between fork and exec only async-signal-safe calls: prctl and getppid.
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) != 0 {
                            return Err(io::Error::last_os_error());
                        }
                        // The parent may have died before the signal was registered.
                        if libc::getppid() != parent {
                            return Err(io::Error::other("the parent process is gone"));
                        }
                        Ok(())
                    })
                };
            }
        }
        let program = PathBuf::from(cmd.get_program());
        let child = cmd.spawn().map_err(|source| SpawnError { program, source })?;
        Ok(Supervised { child, ended: None, policy: on_parent_death, detached: false })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs; never blocks. An exited child is reaped here, so a zombie never
    /// counts as alive.
    pub fn liveness(&mut self) -> Liveness {
        if self.ended.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.ended = Some(status);
        }
        match self.ended {
            None => Liveness::Alive,
            Some(status) => Liveness::Ended {
                status,
                crashed: match status.signal() {
                    Some(sig) => CRASH_SIGNALS.contains(&sig),
                    None => !status.success(),
                },
            },
        }
    }

    /// Waits up to `limit` for it to exit by itself; returns whether it did.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if let Liveness::Ended { .. } = self.liveness() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills it (SIGKILL) and reaps it; does nothing more once it has ended.
    pub fn kill(&mut self) {
        if self.ended.is_some() {
            return;
        }
        let _ = self.child.kill();
        if let Ok(status) = self.child.wait() {
            self.ended = Some(status);
        }
    }

    /// Sends it SIGKILL without waiting for it to end (a process with a CUDA context can take a
    /// while to be torn down); [`Supervised::kill`], or dropping it, reaps it later.
    pub fn signal_kill(&mut self) {
        if self.ended.is_none() {
            let _ = self.child.kill();
        }
    }

    /// Gives it `grace` to exit by itself (after being asked to), then kills and reaps it.
    pub fn stop(&mut self, grace: Duration) {
        if !self.wait_exit(grace) {
            self.kill();
        }
    }

    /// Ends this child and starts `cmd` in its place, with the same parent-death policy.
    pub fn restart(&mut self, cmd: Command) -> Result<(), SpawnError> {
        self.kill();
        let fresh = Supervised::spawn(cmd, self.policy)?;
        *self = fresh;
        Ok(())
    }

    /// Takes its stdin and stdout, if they were piped.
    pub fn take_pipes(&mut self) -> (Option<ChildStdin>, Option<ChildStdout>) {
        (self.child.stdin.take(), self.child.stdout.take())
    }

    /// Lets it run on after this handle is dropped (a child spawned with [`ParentDeath::Signal`]
    /// still ends with the thread that spawned it); returns its pid.
    pub fn detach(mut self) -> u32 {
        self.detached = true;
        self.child.id()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if !self.detached {
            self.kill();
        }
    }
}

pub use gpfarm_protocol::process::signal_daemon;

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_protocol::process::process_alive as process_running;
    use std::path::Path;

    fn sleeper() -> Command {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        cmd
    }

    #[test]
    fn a_killed_child_is_reaped_and_not_alive() {
        let mut child = Supervised::spawn(sleeper(), ParentDeath::Signal(libc::SIGKILL)).unwrap();
        let pid = child.pid();
        assert_eq!(child.liveness(), Liveness::Alive);
        child.kill();
        assert!(matches!(child.liveness(), Liveness::Ended { crashed: false, .. }));
        assert!(!process_running(pid), "pid {pid} left behind");
    }

    #[test]
    fn an_exited_child_is_not_alive_before_anyone_waits_for_it() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        let mut child = Supervised::spawn(cmd, ParentDeath::Signal(libc::SIGKILL)).unwrap();
        assert!(child.wait_exit(Duration::from_secs(10)));
        let Liveness::Ended { status, crashed } = child.liveness() else { panic!("still alive") };
        assert_eq!(status.code(), Some(3));
        assert!(crashed, "an error exit is the child's own failure");
    }

    #[test]
    fn a_crash_signal_counts_as_a_crash() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "kill -SEGV $$"]);
        let mut child = Supervised::spawn(cmd, ParentDeath::Signal(libc::SIGKILL)).unwrap();
        assert!(child.wait_exit(Duration::from_secs(10)));
        assert!(matches!(child.liveness(), Liveness::Ended { crashed: true, .. }));
    }

    #[test]
    fn dropping_a_child_ends_it_and_restarting_replaces_it() {
        let mut child = Supervised::spawn(sleeper(), ParentDeath::Signal(libc::SIGKILL)).unwrap();
        let first = child.pid();
        child.restart(sleeper()).unwrap();
        let second = child.pid();
        assert_ne!(first, second);
        assert!(!process_running(first), "the replaced child {first} still runs");
        drop(child);
        assert!(!process_running(second), "the dropped child {second} still runs");
    }

    #[test]
    fn a_missing_program_is_a_spawn_error_naming_it() {
        let err =
            Supervised::spawn(Command::new("/nonexistent/gpfarm-x"), ParentDeath::Signal(libc::SIGKILL))
                .unwrap_err();
        assert_eq!(err.program, Path::new("/nonexistent/gpfarm-x"));
        assert_eq!(err.source.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_child_kept_for_the_process_outlives_the_thread_that_asked_and_ends_when_dropped() {
        let mut child = std::thread::spawn(|| {
            Supervised::spawn(sleeper(), ParentDeath::ProcessSignal(libc::SIGKILL)).unwrap()
        })
        .join()
        .unwrap();
        // The asking thread has ended; the child runs on (the keeper thread spawned it).
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(child.liveness(), Liveness::Alive);
        let first = child.pid();
        // Restarted, it is spawned by the keeper again.
        std::thread::scope(|s| s.spawn(|| child.restart(sleeper()).unwrap()).join().unwrap());
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(child.liveness(), Liveness::Alive);
        assert!(!process_running(first), "the replaced child {first} still runs");
        let pid = child.pid();
        drop(child);
        assert!(!process_running(pid), "the dropped child {pid} still runs");
    }

    #[test]
    fn a_child_dies_with_the_thread_that_spawned_it() {
        let pid = std::thread::spawn(|| {
            let child = Supervised::spawn(sleeper(), ParentDeath::Signal(libc::SIGKILL)).unwrap();
            child.detach()
        })
        .join()
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Our child until reaped: wait for it here so it does not linger as a zombie.
        let mut status = 0;
        // SAFETY: waitpid on our own child's pid.
        let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        assert_eq!(reaped, pid as libc::pid_t);
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
        assert!(Instant::now() < deadline);
    }
}
