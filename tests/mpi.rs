//! Islands on several processes: `mpirun -np 3 gpfarm evolve --islands K` is the run of 3K
//! islands in one process, bit for bit, and a rank that dies ends the whole job with every daemon
//! and segment gone. Built only with `--features mpi`; needs Open MPI's `mpirun` (the README's
//! test command installs it).

#![cfg(feature = "mpi")]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpfarm_protocol::segment::list_segments;

const GPFARM: &str = env!("CARGO_BIN_EXE_gpfarm");

fn mpirun(ranks: usize) -> Command {
    let mut c = Command::new("mpirun");
    // A job that stalls is ended (and fails its test) instead of hanging the suite.
    c.args(["--oversubscribe", "--timeout", "120", "-np", &ranks.to_string()])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // Shared memory and loopback only: the test needs no network.
        .env("OMPI_MCA_btl", "self,vader")
        .arg(GPFARM);
    c
}

/// Each island's records as (island, generation, best bits, mean bits, best phenotype), sorted,
/// and the summary's best and per-island bests.
type Row = (u64, u64, u64, Option<u64>, String);

fn records(stdout: &[u8]) -> (Vec<Row>, (f64, Vec<f64>)) {
    let mut rows = Vec::new();
    let mut summary = None;
    for line in String::from_utf8_lossy(stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if v["summary"] == true {
            let best: Vec<f64> =
                v["island_best"].as_array().unwrap().iter().map(|b| b.as_f64().unwrap()).collect();
            summary = Some((v["best_fitness"].as_f64().unwrap(), best));
        } else {
            rows.push((
                v["island"].as_u64().unwrap(),
                v["generation"].as_u64().unwrap(),
                v["best"].as_f64().unwrap().to_bits(),
                v["mean"].as_f64().map(f64::to_bits),
                v["best_phenotype"].as_str().unwrap_or("").to_owned(),
            ));
        }
    }
    rows.sort_by_key(|a| (a.0, a.1));
    (rows, summary.expect("a summary line"))
}

#[test]
fn three_ranks_run_exactly_the_islands_of_one_process() {
    let run = ["evolve", "--eval", "cpu", "--population", "80", "--generations", "8", "--seed", "4"];
    let more = ["--migrate-every", "3", "--migrants", "2", "--json"];
    let ranks = mpirun(3).args(run).args(more).args(["--islands", "2"]).output().unwrap();
    assert!(ranks.status.success(), "{}", String::from_utf8_lossy(&ranks.stderr));
    let alone = Command::new(GPFARM).args(run).args(more).args(["--islands", "6"]).output().unwrap();
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stderr));
    let (a, b) = (records(&ranks.stdout), records(&alone.stdout));
    assert_eq!(a.0.len(), 6 * 9, "rank 0 printed every island's records");
    assert_eq!(a, b);
    assert_eq!(a.1.1.len(), 6);
    // Migration crosses ranks: without it the islands' runs differ from these.
    let apart =
        mpirun(3).args(run).args(["--migrate-every", "100", "--json", "--islands", "2"]).output().unwrap();
    assert!(apart.status.success());
    assert_ne!(records(&apart.stdout).0, a.0);
}

/// One island per rank, the form of one rank per GPU: every rank's only island migrates (rank 0's
/// too; it used to keep its migrants, and the ring stalled at the first migration), and the job
/// gives the records of the same islands run as threads.
#[test]
fn one_island_per_rank_migrates_and_runs_the_islands_of_one_process() {
    let run = ["evolve", "--eval", "cpu", "--population", "80", "--generations", "8", "--seed", "4"];
    let more = ["--migrate-every", "3", "--migrants", "2", "--json"];
    let ranks = mpirun(2).args(run).args(more).args(["--islands", "1"]).output().unwrap();
    assert!(ranks.status.success(), "{}", String::from_utf8_lossy(&ranks.stderr));
    let alone = Command::new(GPFARM).args(run).args(more).args(["--islands", "2"]).output().unwrap();
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stderr));
    let (a, b) = (records(&ranks.stdout), records(&alone.stdout));
    assert_eq!(a.0.len(), 2 * 9, "rank 0 printed both islands' records");
    assert_eq!(a, b);
}

#[test]
fn a_rank_that_dies_ends_the_job_and_leaves_no_daemon_or_segment() {
    if !common::nvrtc_or_skip("a_rank_that_dies_ends_the_job_and_leaves_no_daemon_or_segment") {
        return;
    }
    let before = list_segments();
    // Compiled on farms of 2 daemons per rank, long enough to be killed midway.
    let mut job = mpirun(3)
        .args(["evolve", "--route", "nvrtc", "--eval", "cpu", "-n", "2", "--population", "60"])
        .args(["--generations", "400", "--migrate-every", "2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(job.stdout.take().unwrap()).lines();
    // Every rank is compiling once rank 0 has printed records of all three islands.
    let mut seen = [false; 3];
    while !seen.iter().all(|s| *s) {
        let line = lines.next().expect("records before the end").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        seen[v["island"].as_u64().unwrap() as usize] = true;
    }
    let ranks = rank_pids(job.id());
    assert_eq!(ranks.len(), 3, "{ranks:?}");
    let daemons: Vec<u32> = ranks.iter().flat_map(|&(_, pid)| children_named(pid, "gpfarmd")).collect();
    assert_eq!(daemons.len(), 6, "two daemons per rank: {daemons:?}");
    let victim = ranks.iter().find(|(rank, _)| *rank == 1).unwrap().1;
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let start = Instant::now();
    std::thread::spawn(move || lines.for_each(drop));
    let status = job.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "the job went on without rank 1");
    assert!(start.elapsed() < Duration::from_secs(60), "{:?} to end the job", start.elapsed());
    assert!(stderr.contains("rank 1"), "the dead rank is not named: {stderr}");
    let pids: Vec<u32> = ranks.iter().map(|r| r.1).chain(daemons).collect();
    assert_eq!(common::wait_gone(&pids, Duration::from_secs(20)), Vec::<u32>::new(), "{stderr}");
    // A daemon SIGKILLed by mpirun (it kills the ranks' process groups, daemons included) before
    // it unlinked its segment leaves the segment to the stale sweep that every farm start and
    // `gpfarm daemons clean` run: after it, none of the job's is left.
    let clean = Command::new(GPFARM).args(["daemons", "clean"]).output().unwrap();
    assert!(clean.status.success(), "{}", String::from_utf8_lossy(&clean.stderr));
    let left: Vec<_> = list_segments().into_iter().filter(|s| !before.contains(s)).collect();
    assert!(left.is_empty(), "segments left: {left:?}");
}

/// The ranks `mpirun` (pid `launcher`) started: (rank, pid) of its `gpfarm` children, by the
/// rank their environment names.
fn rank_pids(launcher: u32) -> Vec<(usize, u32)> {
    let mut found = Vec::new();
    for pid in children_named(launcher, "gpfarm") {
        let entry = std::fs::read_dir("/proc").unwrap().flatten().find(|e| e.file_name() == *pid.to_string());
        let Some(entry) = entry else { continue };
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        if exe != std::path::Path::new(GPFARM) {
            continue;
        }
        let env = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let rank = env
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("OMPI_COMM_WORLD_RANK=")?.parse().ok());
        if let Some(rank) = rank {
            found.push((rank, pid));
        }
    }
    found.sort_unstable();
    found
}

/// Children of `parent` whose name is `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let ppid =
            stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)).and_then(|p| p.parse().ok());
        if comm.trim() == name && ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}
