//! `gpfarm daemons` and the daemon counts every command takes, run as a user would: how many
//! daemons may start, resident farms shared by `evolve --attach`, and `status`/`stop` telling a
//! resident farm from a running job's temporary one.
//!
//! `daemons stop` without a name acts on every farm of this user, so the tests here take turns
//! (`one_at_a_time`), and every farm a test starts is stopped by a guard even when it fails.

mod common;

use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::{config, nvrtc_or_skip, segments_of, units, wait_gone};
use gpfarm_client::{
    CompileOptions, Compiler, Farm, FarmError, FarmKind, FarmSizeError, SmArch, farm_status,
};
use gpfarm_protocol::FarmName;

fn gpfarm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpfarm"))
}

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A farm name no other test (here or in another test process) uses.
fn unique(prefix: &str) -> FarmName {
    format!("{prefix}{}", std::process::id()).parse().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(args: &[&str]) -> Output {
    gpfarm().args(args).output().unwrap()
}

/// Pids of running gpfarmd processes of farm `name`, found by their command lines.
fn daemons_named(name: &FarmName) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let is_daemon = args.first().is_some_and(|a| a.ends_with(b"gpfarmd"));
            is_daemon && args.windows(2).any(|w| w[0] == b"--farm" && w[1] == name.as_str().as_bytes())
        })
        .collect()
}

/// Starts a resident farm of `n` daemons in the background; the guard stops it.
fn resident(name: &FarmName, n: usize) -> StopOnDrop {
    let out = run(&["daemons", "start", "-n", &n.to_string(), "--detach", "--name", name.as_str()]);
    assert!(out.status.success(), "daemons start: {}", text(&out.stderr));
    StopOnDrop(name.clone())
}

/// Runs `gpfarm daemons stop NAME` when dropped, so a failing test leaves no daemon behind.
struct StopOnDrop(FarmName);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = run(&["daemons", "stop", "--all", self.0.as_str()]);
    }
}

fn kind_of(name: &FarmName) -> Option<FarmKind> {
    farm_status().into_iter().find(|f| f.name == name.as_str()).map(|f| f.kind)
}

#[test]
fn zero_daemons_is_an_error_for_start_compile_and_evolve() {
    let _turn = one_at_a_time();
    let name = unique("zero");
    let commands: [&[&str]; 3] = [
        &["daemons", "start", "-n", "0", "--detach", "--name", name.as_str()],
        &["compile", "-n", "0", "--random", "5"],
        &["evolve", "-n", "0", "--eval", "cpu", "--route", "ptx", "--population", "10", "--generations", "1"],
    ];
    for args in commands {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains("0 daemons") || err.contains("0 were asked for"), "{args:?}: {err}");
    }
    assert!(segments_of(&name).is_empty());
    assert!(daemons_named(&name).is_empty());
    let e = Farm::spawn(config(0)).err().expect("a farm of 0 daemons must not start");
    assert!(matches!(e, FarmError::FarmSize(FarmSizeError::NoDaemons)), "{e:?}");
}

#[test]
fn an_absurd_daemon_count_is_refused_with_the_numbers_before_any_daemon_starts() {
    let _turn = one_at_a_time();
    let name = unique("absurd");
    // The command takes at most 4096; more is a usage error before anything is measured.
    let out = run(&["daemons", "start", "-n", "100000", "--detach", "--name", name.as_str()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("100000 is more than 4096, the most it takes"), "{err}");
    assert!(segments_of(&name).is_empty(), "segments created: {:?}", segments_of(&name));
    assert!(daemons_named(&name).is_empty(), "daemons started: {:?}", daemons_named(&name));

    let e = Farm::spawn_named(name.clone(), config(100_000)).err().expect("refused");
    let FarmError::FarmSize(FarmSizeError::TooMany { daemons, need, available, .. }) = e else {
        panic!("{e:?}");
    };
    assert_eq!(daemons, 100_000);
    assert!(need > available);
    assert!(segments_of(&name).is_empty() && daemons_named(&name).is_empty());
}

#[test]
fn evolve_attaches_to_resident_daemons_and_leaves_them_running() {
    if !nvrtc_or_skip("evolve_attach") {
        return;
    }
    let _turn = one_at_a_time();
    let name = unique("ev");
    let _stop = resident(&name, 1);
    let before: Vec<u32> = daemons_named(&name);
    assert_eq!(before.len(), 1);

    let out = run(&[
        "evolve",
        "--route",
        "ptx",
        "--attach",
        "--farm",
        name.as_str(),
        "--eval",
        "cpu",
        "--population",
        "20",
        "--generations",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a summary line")).unwrap();
    let compiled = summary["totals"]["compiled"].as_u64().expect("totals.compiled");
    assert!(compiled > 0, "nothing compiled: {summary}");

    assert_eq!(daemons_named(&name), before, "the resident daemon must outlive the run");
    assert_eq!(segments_of(&name).len(), 1);
    assert_eq!(kind_of(&name), Some(FarmKind::Resident));
}

#[test]
fn status_marks_a_running_jobs_farm_as_temporary_and_stop_leaves_it_alone() {
    if !nvrtc_or_skip("status_temporary") {
        return;
    }
    let _turn = one_at_a_time();
    let me = std::process::id();
    let mut job = Farm::spawn(config(1)).expect("farm starts");
    let job_name = job.name().clone();
    let res_name = unique("res");
    let _stop = resident(&res_name, 1);

    assert_eq!(kind_of(&job_name), Some(FarmKind::Temporary { owner_pid: me }));
    assert_eq!(kind_of(&res_name), Some(FarmKind::Resident));
    let status = run(&["daemons", "status"]);
    let shown = text(&status.stdout);
    assert!(shown.contains(&format!("farm {job_name} (1 daemons, temporary, owned by pid {me})")), "{shown}");
    assert!(shown.contains(&format!("farm {res_name} (1 daemons, resident)")), "{shown}");
    let json = run(&["daemons", "status", "--json"]);
    let farms: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let ours = farms.as_array().unwrap().iter().find(|f| f["name"] == job_name.as_str()).unwrap();
    assert_eq!((ours["kind"].as_str(), ours["owner_pid"].as_u64()), (Some("temporary"), Some(me.into())));

    // Named without --all, a job's farm is refused and keeps working.
    let out = run(&["daemons", "stop", job_name.as_str()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains(&format!("owned by pid {me}")), "{}", text(&out.stderr));

    // Without a name, resident farms go and the job's farm stays. Another user of this account
    // with a resident farm of its own would lose it here: skip that part rather than harm it.
    let others: Vec<String> = farm_status()
        .into_iter()
        .filter(|f| f.kind == FarmKind::Resident && f.name != res_name.as_str())
        .map(|f| f.name)
        .collect();
    if others.is_empty() {
        let res_pids = daemons_named(&res_name);
        let out = run(&["daemons", "stop"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(&format!("farm {res_name}: stopped 1 daemons")));
        assert_eq!(wait_gone(&res_pids, Duration::from_secs(5)), Vec::<u32>::new());
        assert!(segments_of(&res_name).is_empty());
        let out = run(&["daemons", "stop"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("no resident farm running"), "{}", text(&out.stdout));
    } else {
        eprintln!("SKIPPED stop without a name: other resident farms run ({others:?})");
    }
    assert_eq!(segments_of(&job_name).len(), 1, "the job's farm was stopped");
    let batch = job.compile(&units(2), &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()), "the job's farm no longer compiles");
    let pids = job.pids();
    drop(job);
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new());
    assert!(segments_of(&job_name).is_empty());
}

#[test]
fn stopping_an_unknown_farm_fails_and_names_the_farms_that_run() {
    if !nvrtc_or_skip("stop_unknown") {
        return;
    }
    let _turn = one_at_a_time();
    let name = unique("known");
    let stop = resident(&name, 1);
    let out = run(&["daemons", "stop", "nosuchfarm"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "stopping an unknown farm succeeded");
    assert!(err.contains("no farm named nosuchfarm"), "{err}");
    assert!(err.contains(&format!("{name} (resident)")), "the running farm is not named: {err}");
    assert_eq!(segments_of(&name).len(), 1, "stopping another name touched this farm");

    let pids = daemons_named(&name);
    drop(stop);
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new());
    assert!(segments_of(&name).is_empty());
}

#[test]
fn more_daemons_than_cores_run_with_one_warning_line() {
    if !nvrtc_or_skip("more_than_cores") {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores > 8 {
        eprintln!("SKIPPED more_than_cores: {cores} cores; one daemon more each would be slow to start");
        return;
    }
    let _turn = one_at_a_time();
    let n = (cores + 1).to_string();
    let out = run(&["compile", "--daemons", &n, "--random", "4", "--json"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let warnings: Vec<&str> =
        err.lines().filter(|l| l.contains(&format!("daemons on {cores} cores"))).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains(&format!("{n} daemons")), "{err}");
}

#[test]
fn a_farm_started_in_the_foreground_is_resident_too() {
    if !nvrtc_or_skip("foreground_resident") {
        return;
    }
    let _turn = one_at_a_time();
    let name = unique("fg");
    let mut child = gpfarm()
        .args(["daemons", "start", "-n", "1", "--name", name.as_str()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _stop = StopOnDrop(name.clone());
    // Kept open to the end: the starter prints more, and a closed pipe would fail it.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut ready).unwrap();
    assert!(ready.contains("1 daemons ready"), "{ready}");
    let kind = kind_of(&name);
    let pids = daemons_named(&name);

    // SAFETY: kill(2) of our own child with SIGINT, as Ctrl-C would.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert!(child.wait().unwrap().success());
    assert_eq!(kind, Some(FarmKind::Resident));
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new());
    assert!(segments_of(&name).is_empty());
}
