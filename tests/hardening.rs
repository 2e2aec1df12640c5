//! Hardening, as a hostile or careless user would try it: files of another user named as this
//! user's segments, corrupted headers, daemons that hang, bloat or lose their client, daemons
//! killed before their handshake. Daemons here run with `GPFARM_TEST_FAULTS=1` (see
//! `gpfarm-daemon`'s `test_fault`). Tests take turns: `daemons stop --all` acts on every farm.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{faulty_config, kernel, marked, nvrtc_or_skip, units};
use gpfarm_client::{CompileOptions, Compiler, FailureKind, Farm, FarmConfig, SmArch};
use gpfarm_protocol::process::{self, effective_uid, find_daemon, is_daemon_of, live_daemons, process_alive};
use gpfarm_protocol::segment::list_segments;
use gpfarm_protocol::{DaemonId, FarmName, Segment, SegmentName};

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn gpfarm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(args)
        .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
        .env("GPFARM_TEST_FAULTS", "1")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// This build's daemons, taking test faults, with the default deadline.
fn config(daemons: usize) -> FarmConfig {
    faulty_config(daemons, gpfarm_client::DEFAULT_UNIT_DEADLINE)
}

fn options() -> CompileOptions {
    CompileOptions::cubin(SmArch::SM_90)
}

/// A resident farm started with `daemons start --detach` (extra arguments after the name); the
/// guard stops it and checks nothing of it is left.
struct Resident(FarmName);

impl Resident {
    fn start(prefix: &str, n: usize, extra: &[&str]) -> Resident {
        let name: FarmName = format!("{prefix}{}", std::process::id()).parse().unwrap();
        let mut args = vec!["daemons", "start", "-n"];
        let n = n.to_string();
        args.extend([n.as_str(), "--detach", "--name", name.as_str()]);
        args.extend(extra);
        let out = gpfarm(&args);
        assert!(out.status.success(), "daemons start: {}", text(&out.stderr));
        Resident(name)
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<(SegmentName, u32)> =
            live_daemons().into_iter().filter(|(n, _)| n.farm == self.0).collect();
        pids.sort_by_key(|(n, _)| n.id);
        pids.into_iter().map(|(_, p)| p).collect()
    }

    /// Waits up to `limit` for `check` to hold.
    fn wait(&self, limit: Duration, check: impl Fn(&Resident) -> bool) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if check(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        check(self)
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        gpfarm_client::stop_farm(&self.0, Duration::from_secs(5));
        let left = live_daemons().keys().filter(|n| n.farm == self.0).count()
            + list_segments().iter().filter(|n| n.farm == self.0).count();
        if !std::thread::panicking() {
            assert_eq!(left, 0, "farm {} left daemons or segments", self.0);
        }
    }
}

#[test]
fn another_users_file_named_as_a_farm_is_ignored_refused_and_never_signalled() {
    let _turn = one_at_a_time();
    if effective_uid() != 0 {
        eprintln!("SKIPPED another_users_file: giving a file to another user (uid 65534) needs root");
        return;
    }
    let farm: FarmName = format!("imp{}", std::process::id()).parse().unwrap();
    let name = SegmentName::new(&farm, DaemonId(0));
    // A process of this user the impostor's header points at.
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let seg = Segment::create(&name, DaemonId(0)).unwrap();
    let path = gpfarm_protocol::segment::path_of(&name).unwrap().display().to_string();
    {
        // The header's daemon pid sits at byte 40 (after magic, version, header length,
        // capacity, state, go, done, client pid).
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(40)).unwrap();
        f.write_all(&victim.id().to_le_bytes()).unwrap();
    }
    let c = std::ffi::CString::new(path.clone()).unwrap();
    // SAFETY: a valid path; 65534 is `nobody`.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);

    let status = gpfarm(&["daemons", "status"]);
    assert!(
        text(&status.stderr)
            .contains(&format!("ignored {path}: not this user's segment (owned by uid 65534")),
        "{}",
        text(&status.stderr)
    );
    assert!(!text(&status.stdout).contains(farm.as_str()), "{}", text(&status.stdout));
    let stop = gpfarm(&["daemons", "stop", farm.as_str()]);
    assert!(!stop.status.success() && text(&stop.stderr).contains("no farm named"), "{}", text(&stop.stderr));
    let stop_all = gpfarm(&["daemons", "stop", "--all"]);
    assert!(stop_all.status.success(), "{}", text(&stop_all.stderr));
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("k.cu");
    std::fs::write(&source, kernel("k", 1)).unwrap();
    let source = source.to_str().unwrap();
    let attach = gpfarm(&["compile", "--attach", "--farm", farm.as_str(), "--source", source]);
    assert!(!attach.status.success(), "attached to another user's segment");
    assert!(
        text(&attach.stderr).contains(&format!("no running farm named {farm}")),
        "{}",
        text(&attach.stderr)
    );
    let start = gpfarm(&["daemons", "start", "-n", "1", "--detach", "--name", farm.as_str()]);
    assert!(!start.status.success(), "started over another user's segment");
    let why = text(&start.stderr);
    assert!(why.contains("owned by uid 65534") && why.contains("someone else holds the name"), "{why}");
    let clean = gpfarm(&["daemons", "clean"]);
    assert!(clean.status.success());
    assert!(std::fs::symlink_metadata(&path).is_ok(), "another user's file was removed");

    assert!(process_alive(victim.id()), "a process named by another user's header was signalled");
    victim.kill().unwrap();
    victim.wait().unwrap();
    drop(seg);
}

#[test]
fn a_corrupted_header_neither_orphans_its_daemon_nor_hides_it() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("corrupt header") {
        return;
    }
    let farm = Resident::start("hdr", 1, &[]);
    let before = farm.pids();
    assert_eq!(before.len(), 1);
    let name = SegmentName::new(&farm.0, DaemonId(0));
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(gpfarm_protocol::segment::path_of(&name).unwrap())
            .unwrap();
        let noise: Vec<u8> = (0..64u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1).collect();
        f.write_all(&noise).unwrap();
    }
    // Listed whatever its header says; while its keeper replaces the daemon (within tens of
    // milliseconds) a status may fall between the two, so it is asked again for up to 10 s.
    let listed = |out: &str| out.contains(&format!("farm {}", farm.0));
    let mut out = String::new();
    let until = Instant::now() + Duration::from_secs(10);
    while !listed(&out) && Instant::now() < until {
        out = text(&gpfarm(&["daemons", "status"]).stdout);
    }
    assert!(listed(&out), "the farm vanished from status: {out}");
    // Its keeper replaces the daemon whose header was overwritten; either way a live daemon of
    // the farm serves the segment, and none is orphaned.
    assert!(
        farm.wait(Duration::from_secs(10), |f| {
            let now = f.pids();
            now.len() == 1 && now != before
        }),
        "not replaced"
    );
    assert!(!process_alive(before[0]) || !is_daemon_of(before[0], &name), "the first daemon was orphaned");
    let mut client = Farm::attach(Some(&farm.0), config(1)).unwrap();
    let batch = client.compile(&units(2), &options()).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
    drop(client);
    let stop = gpfarm(&["daemons", "stop", farm.0.as_str()]);
    assert!(text(&stop.stdout).contains("stopped 1 daemons"), "{}", text(&stop.stdout));
}

#[test]
fn a_client_attaching_while_the_keeper_has_no_daemon_running_waits_for_the_next_one() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("attach between two lives") {
        return;
    }
    let farm = Resident::start("gap", 1, &[]);
    let keepers = process::keepers_of(&farm.0);
    assert_eq!(keepers.len(), 1, "{keepers:?}");
    let (keeper, before) = (keepers[0], farm.pids());
    // The keeper is held still while its only daemon dies, so the farm has no daemon running
    // and no segment a daemon serves: what a client sees between a daemon's death and the
    // start of its replacement.
    assert_eq!(unsafe { libc::kill(keeper as i32, libc::SIGSTOP) }, 0);
    assert_eq!(unsafe { libc::kill(before[0] as i32, libc::SIGKILL) }, 0);
    assert!(common::wait_gone(&before, Duration::from_secs(5)).is_empty(), "the daemon outlived SIGKILL");
    let held = Duration::from_millis(500);
    let resume = std::thread::spawn(move || {
        std::thread::sleep(held);
        unsafe { libc::kill(keeper as i32, libc::SIGCONT) }
    });
    let asked = Instant::now();
    let attached = Farm::attach(Some(&farm.0), config(1));
    let waited = asked.elapsed();
    assert_eq!(resume.join().unwrap(), 0);
    let mut client = attached.expect("a farm whose keeper lives was given up");
    assert!(waited >= held / 2, "attached after {waited:?}, while the keeper was still held");
    assert_ne!(farm.pids(), before);
    let batch = client.compile(&units(2), &options()).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
}

/// A daemon of a spawned farm stopped by a signal (SIGSTOP) costs a call about a second, not
/// the unit's deadline: its client counts it lost after `STOPPED_LIMIT`, replaces it and sends
/// its units elsewhere. Holds whichever daemon is stopped, every unit compiled.
#[test]
fn a_stopped_daemon_of_a_spawned_farm_is_replaced_long_before_the_deadline() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("stopped spawned daemon") {
        return;
    }
    let mut farm = Farm::spawn(config(2)).unwrap();
    let warm = farm.compile(&units(2), &options()).unwrap();
    assert!(warm.results.iter().all(|r| r.cubin().is_some()));
    for k in 0..2 {
        let before = farm.pids();
        assert_eq!(unsafe { libc::kill(before[k] as i32, libc::SIGSTOP) }, 0);
        let asked = Instant::now();
        let batch = farm.compile(&units(6), &options()).unwrap();
        let took = asked.elapsed();
        eprintln!("stopped daemon {k} of a spawned farm: a 6-unit call took {took:?}");
        assert!(batch.results.iter().all(|r| r.cubin().is_some()), "{:?}", batch.results);
        // The default deadline is 120 s; the stop is noticed after 1 s.
        assert!(took < Duration::from_secs(20), "the stopped daemon held the call for {took:?}");
        let after = farm.pids();
        assert_ne!(after[k], before[k], "the stopped daemon was kept");
        assert!(
            common::wait_gone(&[before[k]], Duration::from_secs(5)).is_empty(),
            "the stopped daemon lives on"
        );
    }
}

/// A client attaching to a resident farm whose keeper is stopped (SIGSTOP) while a daemon is
/// lost is told so within seconds, naming the keeper, instead of waiting out the start-up
/// timeout; once the keeper is continued the farm serves again.
#[test]
fn a_stopped_keeper_is_named_to_its_clients_at_once() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("stopped keeper") {
        return;
    }
    let farm = Resident::start("held", 1, &[]);
    let keepers = process::keepers_of(&farm.0);
    assert_eq!(keepers.len(), 1, "{keepers:?}");
    let (keeper, before) = (keepers[0], farm.pids());
    assert_eq!(unsafe { libc::kill(keeper as i32, libc::SIGSTOP) }, 0);
    assert_eq!(unsafe { libc::kill(before[0] as i32, libc::SIGKILL) }, 0);
    assert!(common::wait_gone(&before, Duration::from_secs(5)).is_empty(), "the daemon outlived SIGKILL");
    let asked = Instant::now();
    let attached = Farm::attach(Some(&farm.0), config(1));
    let waited = asked.elapsed();
    assert_eq!(unsafe { libc::kill(keeper as i32, libc::SIGCONT) }, 0);
    let err = attached.err().expect("attached to a farm with no daemon and a stopped keeper").to_string();
    eprintln!("attach with a stopped keeper: {waited:?}: {err}");
    assert!(err.contains(&format!("keeper (pid {keeper}) is stopped by a signal")), "{err}");
    assert!(waited < Duration::from_secs(20), "waited {waited:?} on a stopped keeper");
    let mut client = Farm::attach(Some(&farm.0), config(1)).expect("the continued keeper's farm");
    let batch = client.compile(&units(2), &options()).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
}

#[test]
fn a_resident_farm_replaces_daemons_that_hang_or_lose_their_client_and_stays_whole() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("resident healing") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("keeper.log");
    let farm = Resident::start("heal", 2, &["--log", log.to_str().unwrap()]);
    // A unit that never ends: the client gives up on it, and the farm is whole again.
    let mut client =
        Farm::attach(Some(&farm.0), FarmConfig { request_timeout: Duration::from_secs(2), ..config(2) })
            .unwrap();
    let mut input = units(3);
    input.insert(1, marked("stuck", "hang"));
    let batch = client.compile(&input, &options()).unwrap();
    let lost = &batch.results[1];
    assert!(
        matches!(&lost.outcome, gpfarm_client::UnitOutcome::Failed(f) if f.kind == FailureKind::Lost),
        "{:?}",
        lost.outcome
    );
    assert!([0, 2, 3].iter().all(|&i| batch.results[i].cubin().is_some()), "the others compiled");
    assert_eq!(client.len(), 2, "the client lost a daemon");
    let again = client.compile(&units(4), &options()).unwrap();
    assert!(again.results.iter().all(|r| r.cubin().is_some()));
    drop(client);
    assert!(farm.wait(Duration::from_secs(10), |f| f.pids().len() == 2), "the farm shrank");

    // A client killed while its daemon works for it: the keeper abandons the unit with the
    // daemon, and the next client is served at once.
    let hang = dir.path().join("hang.cu");
    std::fs::write(&hang, "// gpfarm-test-fault: hang\n__global__ void k() {}\n").unwrap();
    let mut dead = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["compile", "--attach", "--farm", farm.0.as_str(), "--source"])
        .arg(&hang)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let holder = dead.id();
    let held = |f: &Resident| {
        (0..2).any(|i| {
            Segment::open(&SegmentName::new(&f.0, DaemonId(i))).is_ok_and(|s| s.client_pid() == holder)
        })
    };
    assert!(farm.wait(Duration::from_secs(10), held), "the client never attached");
    let pids = farm.pids();
    std::thread::sleep(Duration::from_millis(200));
    dead.kill().unwrap();
    dead.wait().unwrap();
    let t = Instant::now();
    assert!(
        farm.wait(Duration::from_secs(10), |f| {
            let now = f.pids();
            now.len() == 2 && now != pids
        }),
        "the daemon of the dead client was not replaced"
    );
    let mut next = Farm::attach(Some(&farm.0), config(2)).unwrap();
    let batch = next.compile(&units(4), &options()).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
    eprintln!("a dead client's daemon was replaced and the next client served in {:?}", t.elapsed());
    drop(next);
    let kept = std::fs::read_to_string(&log).unwrap();
    assert!(kept.contains("died while it was compiling; replaced"), "{kept}");
}

/// Clients of a resident farm take turns: one waiting behind a unit that never ends is told, in
/// one line at its deadline, that the farm is busy and when to try again; once the holder is
/// gone (its daemon replaced by the keeper), the waiting kind of client is served.
#[test]
fn a_client_waiting_past_its_deadline_on_a_busy_farm_is_told_so_in_one_line() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("busy farm") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let farm = Resident::start("busy", 1, &[]);
    let hang = dir.path().join("hang.cu");
    std::fs::write(&hang, "// gpfarm-test-fault: hang\n__global__ void k() {}\n").unwrap();
    let mut holder = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["compile", "--attach", "--farm", farm.0.as_str(), "--source"])
        .arg(&hang)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = holder.id();
    let held = |f: &Resident| {
        Segment::open(&SegmentName::new(&f.0, DaemonId(0))).is_ok_and(|s| s.client_pid() == pid)
    };
    assert!(farm.wait(Duration::from_secs(10), held), "the first client never took the daemon");
    let t = Instant::now();
    let out = gpfarm(&["compile", "--attach", "--farm", farm.0.as_str(), "--random", "2", "--deadline", "2"]);
    let waited = t.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("busy with other clients' units") && stderr.contains("try again"), "{stderr}");
    assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(10), "told after {waited:?}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out =
        gpfarm(&["compile", "--attach", "--farm", farm.0.as_str(), "--random", "2", "--deadline", "20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_daemon_that_a_unit_bloated_is_replaced_in_spawned_and_resident_farms() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("bloat") {
        return;
    }
    // Spawned: the farm replaces it after the unit; its results stand.
    let mut farm = Farm::spawn(config(1)).unwrap();
    let before = farm.pids();
    let mut input = units(2);
    input.push(marked("fat", "bloat"));
    let batch = farm.compile(&input, &options()).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
    assert_eq!(batch.stats.restarts, 1, "the bloated daemon was not replaced");
    assert_ne!(farm.pids(), before);
    let lean = farm.compile(&units(2), &options()).unwrap();
    assert_eq!(lean.stats.restarts, 0, "a lean daemon was replaced");
    drop(farm);

    // Resident: its keeper replaces it once it is idle.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("keeper.log");
    let resident = Resident::start("fat", 1, &["--log", log.to_str().unwrap()]);
    let before = resident.pids();
    let mut client = Farm::attach(Some(&resident.0), config(1)).unwrap();
    let batch = client.compile(&[marked("fat", "bloat")], &options()).unwrap();
    assert!(batch.results[0].cubin().is_some());
    assert!(resident.wait(Duration::from_secs(10), |f| f.pids().len() == 1 && f.pids() != before), "kept");
    let again = client.compile(&units(2), &options()).unwrap();
    assert!(again.results.iter().all(|r| r.cubin().is_some()), "the client lost its daemon");
    drop(client);
    let kept = std::fs::read_to_string(&log).unwrap();
    assert!(kept.contains("MiB limit; replaced"), "{kept}");
}

#[test]
fn start_up_survives_daemons_killed_before_their_handshake() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("start-up kills") {
        return;
    }
    let name = FarmName::random();
    let killed = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let farm = std::thread::scope(|s| {
        s.spawn(|| {
            // Each of the first three daemon processes is killed as soon as it is seen.
            let mut seen = Vec::new();
            while seen.len() < 3 && !done.load(std::sync::atomic::Ordering::SeqCst) {
                for id in 0..2 {
                    let seg = SegmentName::new(&name, DaemonId(id));
                    if let Some(pid) = find_daemon(&seg).filter(|p| !seen.contains(p)) {
                        // SAFETY: kill(2) of a daemon of this test's farm.
                        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                        seen.push(pid);
                        killed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let farm = Farm::spawn_named(name.clone(), config(2));
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        farm
    });
    let mut farm = farm.expect("start-up failed although every daemon could be started again");
    assert_eq!(killed.into_inner(), 3, "the kills did not happen during start-up");
    assert_eq!(farm.len(), 2);
    let batch = farm.compile(&units(4), &options()).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
}

/// Runs `script` with `sh -c` as user `nobody` (65534); whether it succeeded.
fn as_nobody(script: &str) -> bool {
    use std::os::unix::process::CommandExt;
    Command::new("sh").arg("-c").arg(script).uid(65534).gid(65534).status().unwrap().success()
}

#[test]
fn another_user_can_neither_pre_create_a_farms_names_nor_stop_it_starting() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let _turn = one_at_a_time();
    if effective_uid() != 0 {
        eprintln!("SKIPPED another_user_names: acting as a second user (nobody) needs root");
        return;
    }
    if !nvrtc_or_skip("another user's names") {
        return;
    }
    // A fresh root like /dev/shm (world-writable, sticky) where `nobody` got there first: the
    // directory this user's segments would go to is theirs.
    let root = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let root_s = root.path().to_str().unwrap().to_owned();
    let usual = root.path().join("gpfarm-0");
    assert!(as_nobody(&format!("mkdir -m 0777 {}", usual.display())), "nobody could not squat");
    let src = root.path().join("k.cu");
    std::fs::write(&src, kernel("k", 1)).unwrap();
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(args)
            .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
            .env(gpfarm_protocol::dir::ROOT_VAR, &root_s)
            .env(gpfarm_protocol::dir::STATE_VAR, state.path())
            .output()
            .unwrap()
    };
    let out = run(&["compile", "-n", "2", "--source", src.to_str().unwrap()]);
    assert!(out.status.success(), "a squatted name stopped the farm: {}", text(&out.stderr));
    // The farm went to a directory of this user's own, which `nobody` cannot write in, and
    // left it empty; the squatter's directory is untouched.
    let ours: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("gpfarm-0-x"))
        .collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    let meta = std::fs::symlink_metadata(&ours[0]).unwrap();
    assert!(meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o7777 == 0o700, "{meta:?}");
    assert_eq!(std::fs::read_dir(&ours[0]).unwrap().count(), 0, "segments were left behind");
    assert_eq!(
        std::fs::symlink_metadata(&usual).unwrap().uid(),
        65534,
        "the squatter's directory was touched"
    );
    let planted = ours[0].join("gpfarm-0-abc-0");
    assert!(!as_nobody(&format!("touch {} 2>/dev/null", planted.display())), "nobody wrote in the directory");
    assert!(!planted.exists());

    // A resident farm in that directory: its names are public (command lines), yet `nobody`
    // cannot take the name of a killed daemon's segment, and the farm stays whole.
    let name: FarmName = format!("sq{}", std::process::id()).parse().unwrap();
    let start = run(&["daemons", "start", "-n", "2", "--detach", "--name", name.as_str()]);
    assert!(start.status.success(), "{}", text(&start.stderr));
    let pids =
        || live_daemons().into_iter().filter(|(n, _)| n.farm == name).map(|(_, p)| p).collect::<Vec<u32>>();
    let first = SegmentName::new(&name, DaemonId(0));
    let victim = find_daemon(&first).expect("daemon 0 runs");
    let target = ours[0].join(first.to_string());
    assert!(target.exists(), "daemon 0's segment is not in this user's directory");
    // SAFETY: signalling a daemon this test started.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let mut planted_any = false;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        planted_any |= as_nobody(&format!("touch {} 2>/dev/null", target.display()));
        if pids().len() == 2 && !pids().contains(&victim) {
            break;
        }
    }
    assert!(!planted_any, "nobody created a daemon's name");
    assert!(pids().len() == 2 && !pids().contains(&victim), "the farm did not heal: {:?}", pids());
    // The squatter lets the usual name go: the farm's directory was decided once and recorded,
    // so clients, status and stop still find the farm (they would look in a fresh usual
    // directory otherwise and see nothing).
    assert!(as_nobody(&format!("rmdir {}", usual.display())), "nobody could not let the name go");
    let status = run(&["daemons", "status"]);
    assert!(text(&status.stdout).contains(name.as_str()), "status lost the farm: {}", text(&status.stdout));
    let t0 = Instant::now();
    let attach = run(&["compile", "--attach", "--farm", name.as_str(), "--source", src.to_str().unwrap()]);
    assert!(attach.status.success(), "attach lost the farm: {}", text(&attach.stderr));
    assert!(t0.elapsed() < Duration::from_secs(20), "attach took {:?}", t0.elapsed());
    assert!(!usual.exists(), "a lookup made the usual directory although one was recorded");
    let stop = run(&["daemons", "stop", name.as_str()]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert_eq!(std::fs::read_dir(&ours[0]).unwrap().count(), 0, "segments were left behind");
}

/// Segments truncated every 20 ms for 3 s (`truncate -s 0` in a loop) kill by SIGBUS the
/// daemons that start meanwhile; the keeper keeps every slot and tries again after a growing
/// wait, so the farm lives through the burst and serves within seconds of its end.
#[test]
fn sustained_truncation_ends_no_resident_farm() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("sustained truncation") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("keeper.log");
    let farm = Resident::start("burst", 2, &["--log", log.to_str().unwrap()]);
    let keepers = process::keepers_of(&farm.0);
    assert_eq!(keepers.len(), 1, "{keepers:?}");
    let keeper = keepers[0];
    let paths: Vec<_> = (0..2)
        .map(|k| gpfarm_protocol::segment::path_of(&SegmentName::new(&farm.0, DaemonId(k))).unwrap())
        .collect();
    // GPFARM_BURST_S lengthens the burst for a measurement (30 s in docs/failures.md).
    let burst = std::env::var("GPFARM_BURST_S").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let until = Instant::now() + Duration::from_secs(burst);
    // A client calls all through the burst: each call ends, served or failed, within its
    // deadlines (5 s to meet the daemons, 5 s a unit).
    let caller = {
        let name = farm.0.clone();
        std::thread::spawn(move || {
            let (mut served, mut failed, mut longest) = (0, 0, Duration::ZERO);
            while Instant::now() < until {
                let t = Instant::now();
                let cfg = FarmConfig {
                    start_timeout: Duration::from_secs(5),
                    request_timeout: Duration::from_secs(5),
                    ..config(2)
                };
                let ok = Farm::attach(Some(&name), cfg)
                    .ok()
                    .and_then(|mut c| c.compile(&units(2), &options()).ok())
                    .is_some_and(|b| b.results.iter().all(|r| r.cubin().is_some()));
                longest = longest.max(t.elapsed());
                if ok { served += 1 } else { failed += 1 }
            }
            (served, failed, longest)
        })
    };
    let mut cuts = 0;
    while Instant::now() < until {
        for p in &paths {
            if let Ok(f) = std::fs::OpenOptions::new().write(true).open(p) {
                cuts += usize::from(f.set_len(0).is_ok());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = Instant::now();
    let kept = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(cuts > 10, "only {cuts} truncations");
    let (served_during, failed_during, longest) = caller.join().unwrap();
    assert!(longest < Duration::from_secs(15), "a call during the burst took {longest:?}");
    assert!(process_alive(keeper) && !process::is_zombie(keeper), "the keeper ended; its log:\n{}", kept());
    let served = loop {
        let batch = Farm::attach(Some(&farm.0), config(2))
            .ok()
            .and_then(|mut c| c.compile(&units(4), &options()).ok());
        if batch.is_some_and(|b| b.results.iter().all(|r| r.cubin().is_some())) {
            break ended.elapsed();
        }
        assert!(
            ended.elapsed() < Duration::from_secs(60),
            "not served 60 s after the burst; log:\n{}",
            kept()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "sustained truncation: {cuts} truncations in {burst} s; during it {served_during} calls served, \
         {failed_during} failed, the longest {longest:?}; served {served:?} after the burst"
    );
    assert!(
        farm.wait(Duration::from_secs(10), |f| f.pids().len() == 2),
        "the farm lost a daemon: {:?}",
        farm.pids()
    );
}

#[test]
fn a_resident_farm_heals_stopped_overwritten_and_truncated_daemons_and_its_keeper_and_clients_live() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("resident faults") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("keeper.log");
    let farm = Resident::start("rf", 2, &["--log", log.to_str().unwrap()]);
    let kept = || std::fs::read_to_string(&log).unwrap_or_default();
    let name0 = SegmentName::new(&farm.0, DaemonId(0));
    let keeper = process::parent_of(find_daemon(&name0).expect("daemon 0 runs")).expect("a keeper");
    // An attached client that holds daemon 0's mapping through every fault (this test process:
    // a SIGBUS here fails the test by killing it).
    let mut client = Farm::attach(Some(&farm.0), config(2)).unwrap();
    assert!(client.compile(&units(4), &options()).unwrap().results.iter().all(|r| r.cubin().is_some()));
    // Header offsets: magic 0 (u64), version 8 and header length 12 (u32), capacity 16 (u64).
    let faults: [(&str, Box<Fault>); 6] = [
        ("stopped", Box::new(|_, pid| unsafe { assert_eq!(libc::kill(pid as i32, libc::SIGSTOP), 0) })),
        ("magic", Box::new(|p, _| poke(p, 0, &[0; 8]))),
        ("version", Box::new(|p, _| poke(p, 8, &999u32.to_le_bytes()))),
        ("header length", Box::new(|p, _| poke(p, 12, &7u32.to_le_bytes()))),
        ("capacity", Box::new(|p, _| poke(p, 16, &(1u64 << 40).to_le_bytes()))),
        (
            "truncated",
            Box::new(|p, _| std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(0).unwrap()),
        ),
    ];
    for (what, fault) in &faults {
        // Daemon 0 has made its segment and is up (a header written over while it is still
        // being made is written again by its daemon, and there is nothing to heal).
        let up = farm.wait(Duration::from_secs(10), |_| {
            find_daemon(&name0).is_some_and(|pid| {
                Segment::open(&name0).is_ok_and(|s| {
                    s.daemon_pid() == pid
                        && s.state().is_ok_and(|st| st != gpfarm_protocol::DaemonState::Starting)
                })
            })
        });
        assert!(up, "{what}: daemon 0 did not come up");
        let before = find_daemon(&name0).expect("daemon 0 runs");
        let path = gpfarm_protocol::segment::path_of(&name0).unwrap();
        let t0 = Instant::now();
        fault(&path, before);
        // One look at the pids per check: two could see the old daemon gone before its
        // replacement is there, and take that for healed.
        let healed = farm.wait(Duration::from_secs(10), |f| {
            let pids = f.pids();
            pids.len() == 2 && !pids.contains(&before)
        });
        let took = t0.elapsed();
        let status: Vec<_> =
            gpfarm_client::farm_status().into_iter().filter(|f| f.name == farm.0.as_str()).collect();
        assert!(
            healed,
            "{what}: daemon 0 was not replaced: {:?}; status {status:?}; keeper's log:\n{}",
            farm.pids(),
            kept()
        );
        assert!(process_alive(keeper), "{what}: the keeper died");
        let t1 = Instant::now();
        let batch = client.compile(&units(4), &options()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(batch.results.iter().all(|r| r.cubin().is_some()), "{what}: {:?}", batch.results);
        eprintln!(
            "resident fault {what}: replaced in {took:?}, the held client's next call took {:?}",
            t1.elapsed()
        );
        assert!(t1.elapsed() < Duration::from_secs(30), "{what}: the client stalled");
    }
    drop(client);
}

/// Something done to a daemon (its segment's path, its pid).
type Fault = dyn Fn(&std::path::Path, u32);

/// Writes `bytes` at `offset` of the file at `path`.
fn poke(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn a_client_killed_mid_call_never_stalls_the_next_one() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("client killed mid-call") {
        return;
    }
    let farm = Resident::start("kc", 2, &[]);
    let dir = tempfile::tempdir().unwrap();
    // A call long enough to be killed in any of its phases: 150 kernels in one unit.
    let big = dir.path().join("big.cu");
    std::fs::write(&big, (0..150).map(|i| kernel(&format!("k{i}"), i)).collect::<String>()).unwrap();
    let small = dir.path().join("small.cu");
    std::fs::write(&small, kernel("s", 3)).unwrap();
    let attach = |source: &std::path::Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpfarm"));
        c.args(["compile", "--attach", "--farm", farm.0.as_str(), "--deadline", "10", "--source"]);
        c.arg(source).env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"));
        c
    };
    let mut slowest = Duration::ZERO;
    for i in 0..40u64 {
        let mut doomed = attach(&big).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(50 + (i * 37) % 400));
        doomed.kill().unwrap();
        doomed.wait().unwrap();
        let t0 = Instant::now();
        let next = attach(&small).output().unwrap();
        let took = t0.elapsed();
        slowest = slowest.max(took);
        assert!(
            next.status.success(),
            "try {i}: the next client failed after {took:?}: {}",
            text(&next.stderr)
        );
        assert!(took < Duration::from_secs(15), "try {i}: the next client took {took:?}");
    }
    eprintln!("client killed mid-call: 40 tries, the next client's call took at most {slowest:?}");
}
