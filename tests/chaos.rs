//! Chaos: daemons SIGKILLed at random, during start-up, handshakes and compiles, in spawned farms
//! (each call starts its own); and in a resident farm (kept by `gpfarm daemons start --detach`,
//! attached to by the calls), daemons killed, stopped (SIGSTOP), their segments' headers
//! overwritten (magic, version, header length, capacity) or their segments truncated, in turn. Every unit's status and CUBIN hash is compared with a clean run:
//! nothing may be lost, duplicated or changed, and no call may fail to start.
//!
//! A daemon is killed every 30-230 ms (longer where daemons take longer than 100 ms to warm up).
//! `GPFARM_CHAOS_KILLS` sets the faults per mode (default 150, so CI does 300; 7000 gives the
//! resident farm 1,000 of each kind). Each mode prints
//! one line of figures, `chaos <mode>: ...`, the source of the README's failure table.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{kernel, nvrtc_or_skip};
use gpfarm_client::{CompileOptions, Compiler, FailureKind, Farm, FarmConfig, SmArch, Unit, UnitOutcome};
use gpfarm_protocol::process::live_daemons;
use gpfarm_protocol::segment::list_segments;
use gpfarm_protocol::{DaemonState, FarmName, Segment};

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn kills_per_mode() -> usize {
    std::env::var("GPFARM_CHAOS_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(150)
}

fn config(daemons: usize) -> FarmConfig {
    FarmConfig { request_timeout: Duration::from_secs(60), ..common::config(daemons) }
}

fn options() -> CompileOptions {
    CompileOptions::cubin(SmArch::SM_90)
}

fn units() -> Vec<Unit> {
    (0..12).map(|i| Unit::new(format!("c{i}.cu"), kernel(&format!("c_{i}"), i))).collect()
}

/// What a unit came to: its CUBIN's hash, or its failure's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Cubin(blake3::Hash),
    Failed(FailureKind),
}

fn seen(outcome: &UnitOutcome) -> Seen {
    match outcome {
        UnitOutcome::Cubin(c) => Seen::Cubin(blake3::hash(c)),
        UnitOutcome::Failed(f) => Seen::Failed(f.kind),
    }
}

/// Tallies of one chaos run.
#[derive(Debug, Default)]
struct Tally {
    calls: usize,
    units: usize,
    lost: usize,
    wrong: usize,
    miscounted: usize,
    start_failures: usize,
    restarts: usize,
    errors: Vec<String>,
}

impl Tally {
    fn check(&mut self, want: &[Seen], batch: &gpfarm_client::Batch) {
        self.calls += 1;
        self.restarts += batch.stats.restarts;
        if batch.results.len() != want.len() {
            self.miscounted += 1;
            return;
        }
        for (r, w) in batch.results.iter().zip(want) {
            self.units += 1;
            let got = seen(&r.outcome);
            if got == *w {
                continue;
            }
            if got == Seen::Failed(FailureKind::Lost) {
                self.lost += 1;
            } else {
                self.wrong += 1;
            }
            if self.errors.len() < 5 {
                self.errors.push(format!("{:?}", r.outcome).chars().take(300).collect());
            }
        }
    }
}

/// What is done to a daemon: killed, stopped, its segment's header overwritten (magic, version,
/// header length, capacity), its segment cut to nothing, or (as user `nobody`, where this test
/// runs as root) its segment's name taken: a file and a link made under it, in the user's
/// directory of segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Stop,
    Magic,
    Version,
    HeaderLen,
    Capacity,
    Truncate,
    Squat,
}

/// Names another user managed to make in this user's directory of segments (must stay 0).
static SQUATTED: AtomicUsize = AtomicUsize::new(0);

impl Fault {
    /// Every fault a resident farm's keeper heals.
    const RESIDENT: [Fault; 7] = [
        Fault::Kill,
        Fault::Stop,
        Fault::Magic,
        Fault::Version,
        Fault::HeaderLen,
        Fault::Capacity,
        Fault::Truncate,
    ];

    /// The faults done to a resident farm here: [`Fault::RESIDENT`], and squatting as root.
    fn resident() -> Vec<Fault> {
        let mut all = Fault::RESIDENT.to_vec();
        if gpfarm_protocol::process::effective_uid() == 0 {
            all.push(Fault::Squat);
        } else {
            eprintln!("chaos resident: no squatting, as acting as another user (nobody) needs root");
        }
        all
    }

    /// Does it to the daemon `pid` serving `name`; whether it was done.
    fn apply(self, name: &gpfarm_protocol::SegmentName, pid: u32) -> bool {
        use std::io::{Seek, SeekFrom, Write};
        let signal = |sig| unsafe { libc::kill(pid as libc::pid_t, sig) } == 0;
        let poke = |offset: u64, bytes: &[u8]| {
            let Ok(path) = gpfarm_protocol::segment::path_of(name) else { return false };
            let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(path) else { return false };
            f.seek(SeekFrom::Start(offset)).is_ok() && f.write_all(bytes).is_ok()
        };
        match self {
            // SAFETY (both signals): kill(2) of a daemon of this test's farm, found in /proc a
            // moment ago.
            Fault::Kill => signal(libc::SIGKILL),
            Fault::Stop => signal(libc::SIGSTOP),
            Fault::Magic => poke(0, &[0; 8]),
            Fault::Version => poke(8, &999u32.to_le_bytes()),
            Fault::HeaderLen => poke(12, &7u32.to_le_bytes()),
            Fault::Capacity => poke(16, &(1u64 << 40).to_le_bytes()),
            Fault::Truncate => gpfarm_protocol::segment::path_of(name)
                .ok()
                .and_then(|p| std::fs::OpenOptions::new().write(true).open(p).ok())
                .is_some_and(|f| f.set_len(0).is_ok()),
            Fault::Squat => {
                use std::os::unix::process::CommandExt;
                let Ok(path) = gpfarm_protocol::segment::path_of(name) else { return false };
                let p = path.display();
                // Each attempt succeeds only if the directory lets another user in.
                let script = format!(
                    "n=0; touch '{p}.x' 2>/dev/null && n=$((n+1)); ln -s /tmp '{p}.l' 2>/dev/null && n=$((n+1)); \
                     rm -f '{p}' 2>/dev/null && [ ! -e '{p}' ] && n=$((n+1)); echo $n"
                );
                let Ok(out) = Command::new("sh").arg("-c").arg(script).uid(65534).gid(65534).output() else {
                    return false;
                };
                let made: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
                SQUATTED.fetch_add(made, Ordering::SeqCst);
                true
            }
        }
    }
}

/// Does one of `faults` (in turn) to a random daemon of the farm in `target` every 30 to
/// 30 + `span_ms` ms until `stop`; counts the faults (`kills`, and by kind in `by_kind`), and
/// those done to daemons still starting (no segment yet, or state `Starting`).
struct Killer<'a> {
    span_ms: u64,
    target: &'a Mutex<Option<FarmName>>,
    stop: &'a AtomicBool,
    kills: &'a AtomicUsize,
    starting: &'a AtomicUsize,
    faults: &'a [Fault],
    by_kind: &'a [AtomicUsize],
}

impl Killer<'_> {
    fn run(&self, seed: u64) {
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        while !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(30 + next() % self.span_ms));
            let Some(farm) = self.target.lock().unwrap().clone() else { continue };
            let mut daemons: Vec<_> = live_daemons().into_iter().filter(|(n, _)| n.farm == farm).collect();
            daemons.sort_by_key(|(_, pid)| *pid);
            if daemons.is_empty() {
                continue;
            }
            let (name, pid) = &daemons[next() as usize % daemons.len()];
            let starting =
                Segment::open(name).map_or(true, |s| s.state().ok() == Some(DaemonState::Starting));
            let k = self.kills.load(Ordering::SeqCst) % self.faults.len();
            if self.faults[k].apply(name, *pid) {
                self.kills.fetch_add(1, Ordering::SeqCst);
                self.by_kind[k].fetch_add(1, Ordering::SeqCst);
                self.starting.fetch_add(usize::from(starting), Ordering::SeqCst);
            }
        }
    }
}

/// The clean run every chaos call is compared with, and the kill interval's span: 200 ms, twice
/// the daemons' warm-up, or four times a farm's start and one unit's compile, whichever is
/// longest, so that a daemon usually lives through being replaced and compiling a unit. Where
/// warm-up takes a second (a CUDA toolkit's NVRTC), kills every 130 ms would leave no start a
/// chance; where it takes 100 ms, a span of twice that lost units after 128 sends each (the
/// client notices a death, the daemon restarts and warms up, then compiles, all between kills).
fn reference() -> (Vec<Seen>, u64) {
    let t = Instant::now();
    let mut farm = Farm::spawn(config(2)).unwrap();
    let start_ms = t.elapsed().as_millis() as u64;
    let warmup_ms = farm.daemon_info().iter().map(|i| i.warmup_us / 1000).max().unwrap_or(0);
    let t = Instant::now();
    let batch = farm.compile(&units(), &options()).unwrap();
    // Two daemons share the units.
    let unit_ms = t.elapsed().as_millis() as u64 * 2 / units().len() as u64;
    let span_ms = (2 * warmup_ms).max(4 * (start_ms + unit_ms)).max(200);
    eprintln!(
        "a farm starts in {start_ms} ms, daemons warm up in {warmup_ms} ms, a unit compiles in {unit_ms} ms: a kill every 30 to {} ms",
        30 + span_ms
    );
    let want: Vec<Seen> = batch.results.iter().map(|r| seen(&r.outcome)).collect();
    assert!(want.iter().all(|s| matches!(s, Seen::Cubin(_))), "the clean run failed: {want:?}");
    // NVRTC is deterministic: a second clean run gives the same CUBINs.
    let again = farm.compile(&units(), &options()).unwrap();
    assert_eq!(again.results.iter().map(|r| seen(&r.outcome)).collect::<Vec<_>>(), want);
    (want, span_ms)
}

fn report(mode: &str, tally: &Tally, kills: usize, starting: usize, wall: Duration) {
    eprintln!(
        "chaos {mode}: {kills} kills ({starting} during start-up), {} calls, {} units, {} lost, {} wrong, {} miscounted calls, {} calls failed to start, {} restarts seen by clients, {:.1} s",
        tally.calls,
        tally.units,
        tally.lost,
        tally.wrong,
        tally.miscounted,
        tally.start_failures,
        tally.restarts,
        wall.as_secs_f64()
    );
    assert!(tally.errors.is_empty(), "{mode}: units went wrong: {:?}", tally.errors);
    assert_eq!(
        (tally.lost, tally.wrong, tally.miscounted, tally.start_failures),
        (0, 0, 0, 0),
        "{mode}: lost, wrong, miscounted, start failures"
    );
    assert!(kills >= kills_per_mode(), "{mode}: only {kills} kills");
}

/// Daemons and segments of `farm` still there after `limit`.
fn leftovers(farm: &FarmName, limit: Duration) -> (usize, usize) {
    let until = Instant::now() + limit;
    loop {
        let daemons = live_daemons().keys().filter(|n| &n.farm == farm).count();
        let segments = list_segments().iter().filter(|n| &n.farm == farm).count();
        if (daemons, segments) == (0, 0) || Instant::now() > until {
            return (daemons, segments);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn spawned_farms_lose_nothing_while_daemons_are_killed_at_random() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("chaos spawned") {
        return;
    }
    let (want, span_ms) = reference();
    let target = Mutex::new(None);
    let (stop, kills, starting) = (AtomicBool::new(false), AtomicUsize::new(0), AtomicUsize::new(0));
    let mut tally = Tally::default();
    let mut farms = Vec::new();
    let started = Instant::now();
    let by_kind = [AtomicUsize::new(0)];
    std::thread::scope(|s| {
        let killer = Killer {
            span_ms,
            target: &target,
            stop: &stop,
            kills: &kills,
            starting: &starting,
            faults: &[Fault::Kill],
            by_kind: &by_kind,
        };
        s.spawn(move || killer.run(0x5eed_0001));
        while kills.load(Ordering::SeqCst) < kills_per_mode() {
            let name = FarmName::random();
            *target.lock().unwrap() = Some(name.clone());
            farms.push(name.clone());
            let mut farm = match Farm::spawn_named(name, config(2)) {
                Ok(f) => f,
                Err(e) => {
                    tally.start_failures += 1;
                    tally.errors.push(format!("start: {e}"));
                    continue;
                }
            };
            for _ in 0..3 {
                match farm.compile(&units(), &options()) {
                    Ok(batch) => tally.check(&want, &batch),
                    Err(e) => tally.errors.push(format!("compile: {e}")),
                }
            }
            *target.lock().unwrap() = None;
            drop(farm);
        }
        stop.store(true, Ordering::SeqCst);
    });
    let wall = started.elapsed();
    for farm in &farms {
        assert_eq!(leftovers(farm, Duration::from_secs(5)), (0, 0), "farm {farm} left daemons or segments");
    }
    report("spawned", &tally, kills.into_inner(), starting.into_inner(), wall);
}

#[test]
fn a_resident_farm_loses_nothing_while_its_daemons_are_killed_at_random() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("chaos resident") {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .try_init();
    let (want, span_ms) = reference();
    let name: FarmName = format!("chaos{}", std::process::id()).parse().unwrap();
    let gpfarm = env!("CARGO_BIN_EXE_gpfarm");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("keeper.log");
    let start = Command::new(gpfarm)
        .args(["daemons", "start", "-n", "2", "--detach", "--name", name.as_str(), "--log"])
        .arg(&log)
        .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
        .output()
        .unwrap();
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    /// Stops the farm however the test ends.
    struct StopFarm<'a>(&'a FarmName);
    impl Drop for StopFarm<'_> {
        fn drop(&mut self) {
            gpfarm_client::stop_farm(self.0, Duration::from_secs(5));
        }
    }
    let guard = StopFarm(&name);
    let target = Mutex::new(Some(name.clone()));
    let (stop, kills, starting) = (AtomicBool::new(false), AtomicUsize::new(0), AtomicUsize::new(0));
    let mut tally = Tally::default();
    let started = Instant::now();
    let faults = Fault::resident();
    let by_kind: Vec<AtomicUsize> = faults.iter().map(|_| AtomicUsize::new(0)).collect();
    std::thread::scope(|s| {
        let killer = Killer {
            span_ms,
            target: &target,
            stop: &stop,
            kills: &kills,
            starting: &starting,
            faults: &faults,
            by_kind: &by_kind,
        };
        s.spawn(move || killer.run(0x5eed_0002));
        while kills.load(Ordering::SeqCst) < kills_per_mode() {
            let mut farm = match Farm::attach(Some(&name), config(2)) {
                Ok(f) => f,
                Err(e) => {
                    tally.start_failures += 1;
                    tally.errors.push(format!("attach: {e}"));
                    if tally.start_failures >= 10 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            for _ in 0..5 {
                match farm.compile(&units(), &options()) {
                    Ok(batch) => tally.check(&want, &batch),
                    Err(e) => tally.errors.push(format!("compile: {e}")),
                }
            }
        }
        stop.store(true, Ordering::SeqCst);
    });
    let wall = started.elapsed();
    let kept = std::fs::read_to_string(&log).unwrap_or_default();
    let replaced = kept.lines().filter(|l| l.ends_with("; replaced")).count();
    eprintln!("the keeper replaced {replaced} daemons");
    let kinds: Vec<String> =
        faults.iter().zip(&by_kind).map(|(f, n)| format!("{f:?} {}", n.load(Ordering::SeqCst))).collect();
    eprintln!("chaos resident faults by kind: {}", kinds.join(", "));
    assert_eq!(
        SQUATTED.load(Ordering::SeqCst),
        0,
        "another user made or removed names in the directory of segments"
    );
    // Still whole: both daemons serve, and the farm compiles.
    let farm = Farm::attach(Some(&name), config(2));
    let mut farm = farm.unwrap_or_else(|e| panic!("{e}; keeper's log:\n{kept}"));
    assert_eq!(farm.len(), 2, "the resident farm shrank");
    tally.check(&want, &farm.compile(&units(), &options()).unwrap());
    drop(farm);
    drop(guard);
    assert_eq!(leftovers(&name, Duration::from_secs(5)), (0, 0), "the stopped farm left daemons or segments");
    report("resident", &tally, kills.into_inner(), starting.into_inner(), wall);
}

/// Seconds four clients share a resident farm in [`several_clients_share_a_resident_farm_while_its_daemons_are_killed`]
/// (`GPFARM_CHAOS_CLIENTS_S`; 20 by default, 600 for the figure in docs/failures.md).
fn shared_seconds() -> u64 {
    std::env::var("GPFARM_CHAOS_CLIENTS_S").ok().and_then(|v| v.parse().ok()).unwrap_or(20)
}

/// Four client processes (`gpfarm compile --attach`, one call each, one after another) share one
/// resident farm of two daemons while its daemons are killed at random: clients take turns, so
/// no call may be refused, and every CUBIN must be the clean run's.
#[test]
fn several_clients_share_a_resident_farm_while_its_daemons_are_killed() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("chaos shared") {
        return;
    }
    let (_, span_ms) = reference();
    let gpfarm = env!("CARGO_BIN_EXE_gpfarm");
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean");
    let call = |farm: &[&str], out: &std::path::Path| {
        let _ = std::fs::remove_dir_all(out);
        Command::new(gpfarm)
            .args(["compile", "--random", "12", "--seed", "5", "--json", "--out-dir"])
            .arg(out)
            .args(farm)
            .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    let out = call(&["-n", "2"], &clean);
    assert!(out.status.success(), "the clean run: {}", String::from_utf8_lossy(&out.stderr));
    let cubins = |d: &std::path::Path| -> Vec<Option<Vec<u8>>> {
        (0..12).map(|i| std::fs::read(d.join(format!("random_{i}.cubin"))).ok()).collect()
    };
    let want = cubins(&clean);
    assert!(want.iter().all(Option::is_some), "the clean run left out a CUBIN");

    let name: FarmName = format!("share{}", std::process::id()).parse().unwrap();
    let start = Command::new(gpfarm)
        .args(["daemons", "start", "-n", "2", "--detach", "--name", name.as_str()])
        .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
        .output()
        .unwrap();
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    struct StopFarm<'a>(&'a FarmName);
    impl Drop for StopFarm<'_> {
        fn drop(&mut self) {
            gpfarm_client::stop_farm(self.0, Duration::from_secs(5));
        }
    }
    let guard = StopFarm(&name);
    let target = Mutex::new(Some(name.clone()));
    let (stop, kills, starting) = (AtomicBool::new(false), AtomicUsize::new(0), AtomicUsize::new(0));
    let faults = [Fault::Kill];
    let by_kind = [AtomicUsize::new(0)];
    let until = Instant::now() + Duration::from_secs(shared_seconds());
    #[derive(Default, Debug)]
    struct Calls {
        calls: usize,
        refused: usize,
        lost: usize,
        wrong: usize,
        longest: Duration,
        errors: Vec<String>,
    }
    let tallies: Vec<Calls> = std::thread::scope(|s| {
        let killer = Killer {
            span_ms,
            target: &target,
            stop: &stop,
            kills: &kills,
            starting: &starting,
            faults: &faults,
            by_kind: &by_kind,
        };
        s.spawn(move || killer.run(0x5eed_0003));
        let clients: Vec<_> = (0..4)
            .map(|c| {
                let (out_dir, want, name, call) =
                    (dir.path().join(format!("client{c}")), &want, &name, &call);
                s.spawn(move || {
                    let mut t = Calls::default();
                    while Instant::now() < until {
                        let began = Instant::now();
                        let out = call(&["--attach", "--farm", name.as_str()], &out_dir);
                        t.longest = t.longest.max(began.elapsed());
                        t.calls += 1;
                        if !out.status.success() {
                            t.refused += 1;
                            t.errors.push(
                                String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").into(),
                            );
                            continue;
                        }
                        for (got, w) in cubins(&out_dir).iter().zip(want) {
                            match got {
                                None => t.lost += 1,
                                Some(b) if Some(b) != w.as_ref() => t.wrong += 1,
                                Some(_) => {}
                            }
                        }
                    }
                    t
                })
            })
            .collect();
        let tallies = clients.into_iter().map(|c| c.join().unwrap()).collect();
        stop.store(true, Ordering::SeqCst);
        tallies
    });
    drop(guard);
    assert_eq!(leftovers(&name, Duration::from_secs(5)), (0, 0), "the stopped farm left daemons or segments");
    let sum = |f: fn(&Calls) -> usize| tallies.iter().map(f).sum::<usize>();
    let longest = tallies.iter().map(|t| t.longest).max().unwrap_or_default();
    let per_client: Vec<usize> = tallies.iter().map(|t| t.calls).collect();
    eprintln!(
        "chaos shared: 4 clients, {} s, {} kills, {} calls (by client {per_client:?}), {} refused, {} units lost, {} wrong, the longest call {longest:?}",
        shared_seconds(),
        kills.load(Ordering::SeqCst),
        sum(|t| t.calls),
        sum(|t| t.refused),
        sum(|t| t.lost),
        sum(|t| t.wrong),
    );
    let errors: Vec<&String> = tallies.iter().flat_map(|t| &t.errors).take(5).collect();
    assert_eq!(
        (sum(|t| t.refused), sum(|t| t.lost), sum(|t| t.wrong)),
        (0, 0, 0),
        "refused, lost, wrong: {errors:?}"
    );
    assert!(per_client.iter().all(|&n| n > 0), "a client was never served: {per_client:?}");
    assert!(kills.load(Ordering::SeqCst) > 0, "no daemon was killed");
}

#[test]
fn a_client_killed_while_its_farm_starts_leaves_no_daemon_and_no_segment() {
    let _turn = one_at_a_time();
    if !nvrtc_or_skip("chaos client") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("k.cu");
    std::fs::write(&source, kernel("k", 1)).unwrap();
    let before: Vec<_> = list_segments();
    let daemons_before: HashMap<_, _> = live_daemons();
    for i in 0..20u64 {
        let mut client = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(["compile", "-n", "2", "--source"])
            .arg(&source)
            .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(5 + i * 3));
        client.kill().unwrap();
        client.wait().unwrap();
    }
    let until = Instant::now() + Duration::from_secs(10);
    let (daemons, segments) = loop {
        let daemons: Vec<_> =
            live_daemons().into_keys().filter(|n| !daemons_before.contains_key(n)).collect();
        let segments: Vec<_> = list_segments().into_iter().filter(|n| !before.contains(n)).collect();
        if (daemons.is_empty() && segments.is_empty()) || Instant::now() > until {
            break (daemons, segments);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(daemons.is_empty(), "daemons outlived their killed clients: {daemons:?}");
    assert!(segments.is_empty(), "segments outlived their killed clients: {segments:?}");
}

/// A copy of built-in problem `problem` in a fresh directory.
fn problem_copy(problem: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let original = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("gp/problems").join(problem);
    for name in ["problem.toml", "grammar.bnf", "cases.json", "template.cu"] {
        std::fs::copy(original.join(name), dir.path().join(name)).unwrap();
    }
    dir
}

/// Inputs out of range, drawn at random in a loop (`GPFARM_CHAOS_KILLS` of them): populations,
/// island counts, `max_len`, case values beyond a float, zero deadlines and limits, text where a
/// number goes. Every run ends with status 1 and one line on stderr, or status 2 (a usage error);
/// none panics, aborts or is killed, and none takes more than a few seconds.
#[test]
fn inputs_out_of_range_in_a_loop_are_clear_errors_and_never_crash() {
    let count = kills_per_mode();
    let (search, keijzer) = (problem_copy("search"), problem_copy("keijzer6"));
    let search_toml = std::fs::read_to_string(search.path().join("problem.toml")).unwrap();
    assert!(search_toml.contains("max_len = 20"));
    let mut state = 0x1234_5678_9abc_def1_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut by_kind = [0usize; 6];
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for i in 0..count {
        let kind = i % by_kind.len();
        let mut args: Vec<String> =
            ["evolve", "--route", "cpu", "--generations", "0"].map(String::from).to_vec();
        let big = |r: u64| (100_000_001 + r % (u64::MAX - 100_000_001)).to_string();
        match kind {
            0 => args.extend(["--population".into(), if next() % 4 == 0 { "0".into() } else { big(next()) }]),
            1 => args.extend(["--islands".into(), (1025 + next() % 1_000_000_000).to_string()]),
            2 => {
                let v = 2_147_483_647 + next() % (i64::MAX as u64 - 2_147_483_647);
                let toml = search_toml.replace("max_len = 20", &format!("max_len = {v}"));
                std::fs::write(search.path().join("problem.toml"), toml).unwrap();
                args.extend(["--problem-dir".into(), search.path().display().to_string()]);
            }
            3 => {
                let sign = if next() % 2 == 0 { "" } else { "-" };
                let value = format!("{sign}{}.{}e{}", 1 + next() % 9, next() % 1000, 39 + next() % 269);
                let cases = format!(r#"[{{"x": 1.0, "target": 1.0}}, {{"x": {value}, "target": 2.0}}]"#);
                std::fs::write(keijzer.path().join("cases.json"), cases).unwrap();
                args.extend(["--problem-dir".into(), keijzer.path().display().to_string()]);
            }
            4 => {
                let flag =
                    ["--deadline", "--max-steps", "--gpu-deadline", "--population"][next() as usize % 4];
                args.extend([flag.into(), "0".into()]);
            }
            _ => {
                let flag = ["--population", "--islands", "--deadline", "--max-steps", "--fit-cases"]
                    [next() as usize % 5];
                let junk = ["-1", "1e9x", "", "NaN", "18446744073709551616", "0x10"][next() as usize % 6];
                args.extend([flag.into(), junk.into()]);
            }
        }
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        slowest = slowest.max(t.elapsed());
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        assert!(!err.contains("panicked") && !err.contains("backtrace"), "{args:?}: {err}");
        match code {
            Some(1) => assert!(err.lines().count() == 1 && err.starts_with("gpfarm: "), "{args:?}: {err}"),
            Some(2) => assert!(err.contains("error"), "{args:?}: {err}"),
            other => panic!(
                "{args:?}: status {other:?} (a signal, a crash or a run that should not have run): {err}"
            ),
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{args:?} took {:?}", t.elapsed());
        by_kind[kind] += 1;
    }
    eprintln!(
        "chaos inputs: {count} runs (population {}, islands {}, max_len {}, case values {}, zeros {}, junk {}), all clear errors, slowest {slowest:?}, {:.1} s",
        by_kind[0],
        by_kind[1],
        by_kind[2],
        by_kind[3],
        by_kind[4],
        by_kind[5],
        started.elapsed().as_secs_f64()
    );
}
