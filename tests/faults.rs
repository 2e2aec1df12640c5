//! Faults through real processes: daemons that crash, hang or are killed, clients that die, and
//! hostile input. Daemons started here run with GPFARM_TEST_FAULTS=1, which makes a unit carrying
//! a `gpfarm-test-fault: crash|hang|kill` marker do just that.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{config, faulty_config, kernel, marked, nvrtc_or_skip, units};
use gpfarm_client::cubin::inspect;
use gpfarm_client::{CompileOptions, Compiler, FailureKind, Farm, SmArch, Unit, UnitOutcome};
use gpfarm_protocol::FarmName;

/// Recursion through templates, far past NVRTC's instantiation depth limit.
const TEMPLATE_DEPTH: &str =
    "template <int N> struct Depth { static constexpr int v = Depth<N - 1>::v + 1; };
template <> struct Depth<0> { static constexpr int v = 0; };
extern \"C\" __global__ void tmpl(int* y) { y[0] = Depth<100000>::v; }
";

fn options() -> CompileOptions {
    CompileOptions::cubin(SmArch::SM_90)
}

fn assert_compiled(results: &[gpfarm_client::UnitResult], units: &[Unit], skip: &[usize]) {
    for (i, (r, u)) in results.iter().zip(units).enumerate() {
        if skip.contains(&i) {
            continue;
        }
        let info =
            r.cubin().and_then(inspect).unwrap_or_else(|| panic!("unit {i} ({}): {:?}", u.name, r.outcome));
        let want = u.name.trim_end_matches(".cu").trim_start_matches('u');
        let want =
            if want.chars().all(|c| c.is_ascii_digit()) { format!("k_{want}") } else { want.to_string() };
        assert_eq!(info.kernels, vec![want], "unit {i} came back out of order");
    }
}

#[test]
fn a_unit_that_crashes_its_daemon_is_tried_twice_then_fails_alone() {
    if !nvrtc_or_skip("crash_on_demand") {
        return;
    }
    let mut farm = Farm::spawn(faulty_config(2, Duration::from_secs(60))).unwrap();
    let mut input = units(6);
    input.insert(2, marked("crasher", "crash"));
    let batch = farm.compile(&input, &options()).unwrap();
    let UnitOutcome::Failed(f) = &batch.results[2].outcome else { panic!("the crashing unit compiled") };
    assert_eq!(f.kind, FailureKind::Lost);
    assert!(f.message.contains("SIGABRT") && f.message.contains("on this unit"), "{f}");
    assert_compiled(&batch.results, &input, &[2]);
    assert_eq!((batch.stats.lost_daemons, batch.stats.restarts), (2, 2), "crashed once, retried once");
    eprintln!(
        "crash: {} units resent, call took {} ms",
        batch.stats.retried_units,
        batch.stats.wall_us / 1000
    );
}

#[test]
fn a_hung_daemon_is_killed_at_the_deadline_and_its_unit_fails_after_one_retry() {
    if !nvrtc_or_skip("hang_on_demand") {
        return;
    }
    let deadline = Duration::from_secs(2);
    let mut farm = Farm::spawn(faulty_config(2, deadline)).unwrap();
    let mut input = units(4);
    input.insert(1, marked("hanger", "hang"));
    let started = Instant::now();
    let batch = farm.compile(&input, &options()).unwrap();
    let took = started.elapsed();
    let UnitOutcome::Failed(f) = &batch.results[1].outcome else { panic!("the hanging unit compiled") };
    assert!(f.message.contains("no answer within"), "{f}");
    assert_compiled(&batch.results, &input, &[1]);
    assert_eq!(batch.stats.restarts, 2);
    assert!(took < deadline * 2 + Duration::from_secs(20), "took {took:?}");
    eprintln!("hang: call returned after {took:?} with a {deadline:?} deadline");
}

#[test]
fn a_daemon_killed_mid_batch_is_noticed_within_a_second_and_nothing_is_lost() {
    if !nvrtc_or_skip("kill_mid_batch") {
        return;
    }
    let mut farm = Farm::spawn(faulty_config(2, Duration::from_secs(60))).unwrap();
    let input = units(100);
    let victim = farm.pids()[0];
    let seg = gpfarm_protocol::Segment::open(&gpfarm_protocol::SegmentName::new(
        farm.name(),
        gpfarm_protocol::DaemonId(0),
    ))
    .unwrap();
    let started = Instant::now();
    let killer = std::thread::spawn(move || {
        // Mid-batch for sure: the daemon has finished two of its 50 units.
        while seg.progress() < 2 {
            std::thread::sleep(Duration::from_micros(200));
        }
        // SAFETY: kill(2) of a daemon this test started.
        unsafe { libc::kill(victim as libc::pid_t, libc::SIGKILL) };
        started.elapsed()
    });
    let batch = farm.compile(&input, &options()).unwrap();
    let killed_at = killer.join().unwrap();
    assert_compiled(&batch.results, &input, &[]);
    assert_eq!(batch.stats.restarts, 1);
    let noticed = Duration::from_micros(batch.stats.first_loss_detected_us.expect("the loss was noticed"));
    let delay = noticed.saturating_sub(killed_at);
    eprintln!(
        "killed at {killed_at:?}, noticed at {noticed:?} ({delay:?} later), {} units resent",
        batch.stats.retried_units
    );
    assert!(delay < Duration::from_secs(1), "noticed {delay:?} after the kill");
}

#[test]
fn hostile_units_each_get_a_clear_error_and_the_farm_keeps_working() {
    if !nvrtc_or_skip("hostile_input") {
        return;
    }
    let mut farm = Farm::spawn(faulty_config(2, Duration::from_secs(3))).unwrap();
    let huge = format!(
        "extern \"C\" __global__ void huge(float* y, float x) {{ y[0] = {}; }}\n",
        vec!["x"; 500_000].join("+")
    );
    let deep = format!(
        "extern \"C\" __global__ void deep(float* y, float x) {{ y[0] = {}x{}; }}\n",
        "(".repeat(50_000),
        ")".repeat(50_000)
    );
    let mut invalid_utf8 = b"extern \"C\" __global__ void bad(float* y) { y[0] = ".to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, b';', b' ', b'}', b'\n']);
    // A byte that is not UTF-8 after a whole kernel: NVRTC used to compile the first kernel and
    // drop the rest without a word.
    let first = "extern \"C\" __global__ void first(float* y) { y[0] = 1.0f; }\n";
    let mut after_first = first.as_bytes().to_vec();
    after_first.push(0xff);
    after_first.extend_from_slice(b"\nextern \"C\" __global__ void second(float* y) { y[0] = 2.0f; }\n");
    let hostile = [
        (
            "a non-UTF-8 byte after the first kernel",
            Unit {
                name: "two.cu".into(),
                source: after_first,
                language: Default::default(),
                libraries: Vec::new(),
            },
        ),
        (
            "include of a file on disk",
            Unit::new("inc.cu", "#include \"/etc/hostname\"\n__global__ void k() {}\n"),
        ),
        ("#error", Unit::new("err.cu", "#error stop here\n")),
        (
            "invalid UTF-8",
            Unit {
                name: "utf.cu".into(),
                source: invalid_utf8,
                language: Default::default(),
                libraries: Vec::new(),
            },
        ),
        (
            "undefined identifier",
            Unit::new("undef.cu", "extern \"C\" __global__ void k(float* y) { y[0] = nope; }\n"),
        ),
        (
            "NUL byte",
            Unit {
                name: "nul.cu".into(),
                source: b"__global__ void k() {}\0 junk".to_vec(),
                language: Default::default(),
                libraries: Vec::new(),
            },
        ),
        ("1 MB expression", Unit::new("huge.cu", huge)),
        ("template recursion past the compiler's depth limit", Unit::new("tmpl.cu", TEMPLATE_DEPTH)),
    ];
    let mut input: Vec<Unit> = hostile.iter().map(|(_, u)| u.clone()).collect();
    input.extend(units(3));
    // Deep parenthesised nesting: NVRTC copes (it compiled 1,000,000 levels in 2.6 s), so this
    // one only has to come back, compiled or with a reason, without harm to the farm.
    input.push(Unit::new("deep.cu", deep));
    // Zeroed pages that are never touched: a request larger than any segment costs no memory.
    input.push(Unit {
        name: "giant.cu".into(),
        source: vec![0; gpfarm_protocol::segment::MAX_CAPACITY + 1],
        language: Default::default(),
        libraries: Vec::new(),
    });
    let started = Instant::now();
    let batch = farm.compile(&input, &options()).unwrap();
    let giant = batch.results.last().unwrap();
    let UnitOutcome::Failed(f) = &giant.outcome else { panic!("a unit larger than a segment compiled") };
    assert_eq!(f.kind, FailureKind::InvalidSource);
    assert!(f.message.contains("larger than the largest request"), "{f}");
    eprintln!("request larger than the segment: {f}");
    for ((what, unit), r) in hostile.iter().zip(&batch.results) {
        let UnitOutcome::Failed(f) = &r.outcome else { panic!("{what} ({}) compiled", unit.name) };
        assert!(!f.message.is_empty(), "{what}: empty reason");
        eprintln!("{what}: {:?}: {}", f.kind, f.message.lines().next().unwrap_or(""));
    }
    // Both units that are not UTF-8 are refused before NVRTC, saying where.
    for (k, at) in [(0, first.len()), (3, 50)] {
        let UnitOutcome::Failed(f) = &batch.results[k].outcome else { unreachable!("checked above") };
        assert_eq!(f.kind, FailureKind::InvalidSource, "{}: {f}", hostile[k].0);
        assert!(f.message.contains(&format!("not valid UTF-8 at byte offset {at}")), "{}: {f}", hostile[k].0);
    }
    let fine = &batch.results[hostile.len()..hostile.len() + 3];
    assert!(fine.iter().all(|r| r.cubin().is_some()), "good units beside the bad ones");
    let deep = &batch.results[hostile.len() + 3];
    eprintln!(
        "50,000-deep nesting: {}",
        deep.cubin().map_or_else(|| format!("{:?}", deep.outcome), |_| "compiled".into())
    );
    eprintln!("hostile batch took {:?}, {} restarts", started.elapsed(), batch.stats.restarts);
    let again = farm.compile(&units(4), &options()).unwrap();
    assert!(again.results.iter().all(|r| r.cubin().is_some()), "the farm still works");
}

/// Starts resident farm `name` of one daemon, the executable `gpfarmd`, kept in the background;
/// with `faults`, its daemons act on the test-fault markers.
fn start_detached(name: &FarmName, gpfarmd: &std::path::Path, faults: bool) {
    let mut start = Command::new(env!("CARGO_BIN_EXE_gpfarm"));
    start.args(["daemons", "start", "-n", "1", "--detach", "--name", name.as_str()]).env("GPFARMD", gpfarmd);
    if faults {
        start.env("GPFARM_TEST_FAULTS", "1");
    }
    let out = start.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn resident_daemons_free_themselves_when_their_client_dies() {
    if !nvrtc_or_skip("client_death") {
        return;
    }
    let gpfarm = env!("CARGO_BIN_EXE_gpfarm");
    let name: FarmName = format!("cd{}", std::process::id()).parse().unwrap();
    start_detached(&name, env!("CARGO_BIN_EXE_gpfarmd").as_ref(), true);
    let stop = || gpfarm_client::stop_farm(&name, Duration::from_secs(5));
    // A client that attaches and then hangs in a request, so it is surely holding the daemon.
    let dir = tempfile::tempdir().unwrap();
    let hang = dir.path().join("hang.cu");
    std::fs::write(&hang, "// gpfarm-test-fault: hang\n__global__ void k() {}\n").unwrap();
    let mut client = Command::new(gpfarm)
        .args(["compile", "--attach", "--farm", name.as_str(), "--source"])
        .arg(&hang)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let holder = client.id();
    let until = Instant::now() + Duration::from_secs(10);
    let held = || {
        gpfarm_client::farm_status()
            .iter()
            .any(|f| f.name == name.as_str() && f.daemons[0].client_pid == holder)
    };
    while !held() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(held(), "the client never attached");
    let stuck = gpfarm_client::farm_status().iter().find(|f| f.name == name.as_str()).unwrap().daemons[0].pid;
    client.kill().unwrap();
    client.wait().unwrap();
    let _ = BufReader::new(client.stderr.take().unwrap()).lines();
    // The daemon is stuck in the hung unit of a dead client: the keeper replaces it.
    let until = Instant::now() + Duration::from_secs(30);
    let replaced = || {
        gpfarm_client::farm_status().iter().any(|f| {
            f.name == name.as_str()
                && f.daemons[0].pid != 0
                && f.daemons[0].pid != stuck
                && f.daemons[0].state == "available"
        })
    };
    while !replaced() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(replaced(), "the keeper did not replace the daemon its dead client left stuck");
    let stopped = stop();
    assert_eq!(stopped, 1);
    assert!(gpfarm_client::farm_status().iter().all(|f| f.name != name.as_str()), "segment left behind");

    // Again with a client that dies between requests: the daemon frees itself.
    start_detached(&name, env!("CARGO_BIN_EXE_gpfarmd").as_ref(), false);
    let mut farm = Farm::attach(Some(&name), config(1)).unwrap();
    farm.compile(&units(1), &options()).unwrap();
    // Simulate this client dying: a dead pid holds the lock.
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    drop(farm);
    let seg = gpfarm_protocol::Segment::open(&gpfarm_protocol::SegmentName::new(
        &name,
        gpfarm_protocol::DaemonId(0),
    ))
    .unwrap();
    assert_eq!(seg.lock_client(dead), Ok(()));
    let t = Instant::now();
    while seg.client_pid() != 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let freed = seg.client_pid() == 0;
    eprintln!("daemon freed itself {:?} after its client was found dead", t.elapsed());
    drop(seg);
    stop();
    assert!(freed, "the daemon still belongs to a dead client");
}

#[test]
fn a_farm_stopped_while_its_keeper_replaces_a_daemon_is_stopped_whole() {
    if !nvrtc_or_skip("stop_mid_replacement") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let name: FarmName = format!("gap{}", std::process::id()).parse().unwrap();
    // A daemon executable that, once `slow` exists, takes 3 s before it becomes the daemon: the
    // keeper's replacement stays that long between two lives, with no daemon and no segment.
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow");
    let wrapper = dir.path().join("slowd");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ -e '{}' ]; then sleep 3; fi\nexec '{}' \"$@\"\n",
            slow.display(),
            env!("CARGO_BIN_EXE_gpfarmd")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    start_detached(&name, &wrapper, false);
    let keepers = gpfarm_protocol::process::keepers_of(&name);
    assert_eq!(keepers.len(), 1, "one background keeper");
    std::fs::write(&slow, "").unwrap();
    let seg = gpfarm_protocol::SegmentName::new(&name, gpfarm_protocol::DaemonId(0));
    let first = gpfarm_protocol::process::find_daemon(&seg).expect("the daemon runs");
    // SAFETY: kill(2) of the farm's own daemon, found above.
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    let until = Instant::now() + Duration::from_secs(2);
    while gpfarm_protocol::process::process_alive(first) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(gpfarm_protocol::process::find_daemon(&seg), None, "the replacement is still on its way");
    let t = Instant::now();
    gpfarm_client::stop_farm(&name, Duration::from_secs(10));
    eprintln!("stopped mid-replacement in {:?}", t.elapsed());
    assert!(!gpfarm_protocol::process::process_alive(keepers[0]), "the keeper still runs");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(gpfarm_protocol::process::find_daemon(&seg), None, "a daemon came back");
    assert!(gpfarm_client::farm_status().iter().all(|f| f.name != name.as_str()), "segment left behind");
}

/// The pid of daemon `id` of farm `farm`, 0 while it has none.
fn daemon_pid(farm: &Farm, id: usize) -> u32 {
    gpfarm_client::farm_status()
        .iter()
        .find(|f| f.name == farm.name().as_str())
        .and_then(|f| f.daemons.iter().find(|d| d.id.0 as usize == id).map(|d| d.pid))
        .unwrap_or(0)
}

/// Kills daemon `id` of `farm` and heals the farm until it reports what it did (5 s at most).
fn kill_and_heal(farm: &mut Farm, id: usize) -> Vec<gpfarm_client::Healed> {
    let pid = daemon_pid(farm, id);
    assert_ne!(pid, 0, "daemon {id} runs");
    // SAFETY: kill(2) of this farm's own daemon, found above.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let report = farm.heal();
        if !report.is_empty() || Instant::now() >= until {
            return report;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_farm_told_to_stop_replaces_no_daemon_it_loses() {
    if !nvrtc_or_skip("stop_replaces_none") {
        return;
    }
    // A keeper told to stop may see a daemon end (asked to by `gpfarm daemons stop`) before it
    // leaves its keeping loop: that daemon must not come back.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let mut farm = Farm::spawn(gpfarm_client::FarmConfig { stop: Some(stop.clone()), ..config(2) }).unwrap();
    let healed = kill_and_heal(&mut farm, 0);
    assert_eq!(healed.len(), 1, "{healed:?}");
    assert!(healed[0].replaced, "a running farm replaces a lost daemon: {healed:?}");
    assert_eq!(farm.len(), 2);
    stop.store(true, Ordering::SeqCst);
    let healed = kill_and_heal(&mut farm, 1);
    assert_eq!(healed.len(), 1, "{healed:?}");
    assert!(!healed[0].replaced && !healed[0].again, "a farm told to stop started a daemon: {healed:?}");
    assert_eq!(farm.len(), 1, "the lost daemon is given up");
    assert_eq!(daemon_pid(&farm, 1), 0, "no daemon serves slot 1");
}

#[test]
fn chaos_every_call_returns_every_unit_in_order_while_daemons_are_killed() {
    if !nvrtc_or_skip("chaos") {
        return;
    }
    const CALLS: usize = 30;
    let mut farm = Farm::spawn(faulty_config(3, Duration::from_secs(60))).unwrap();
    let farm_name = farm.name().to_string();
    let done = AtomicBool::new(false);
    let kills = AtomicUsize::new(0);
    let (mut restarts, mut resent) = (0, 0);
    /// Stops the killer however the calls end, so a failed assertion cannot leave it running.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    std::thread::scope(|s| {
        let _stop = Stop(&done);
        s.spawn(|| {
            let mut seed = 0x9e37_79b9_u64;
            while !done.load(Ordering::SeqCst) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                std::thread::sleep(Duration::from_millis(300 + seed % 700));
                let pids: Vec<u32> = std::fs::read_dir("/proc")
                    .unwrap()
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|pid| {
                        std::fs::read(format!("/proc/{pid}/cmdline"))
                            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&farm_name))
                    })
                    .collect();
                if let Some(&pid) = pids.get((seed as usize / 7) % pids.len().max(1)) {
                    // SAFETY: kill(2) of a daemon of this test's farm.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    kills.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        for call in 0..CALLS {
            let input: Vec<Unit> = (0..12)
                .map(|i| {
                    Unit::new(format!("u{}.cu", call * 100 + i), kernel(&format!("k_{}", call * 100 + i), i))
                })
                .collect();
            let batch = farm.compile(&input, &options()).unwrap();
            assert_eq!(batch.results.len(), input.len());
            assert_compiled(&batch.results, &input, &[]);
            restarts += batch.stats.restarts;
            resent += batch.stats.retried_units;
        }
    });
    let kills = kills.load(Ordering::SeqCst);
    eprintln!(
        "chaos: {CALLS} calls of 12 units, {kills} daemons killed, {restarts} restarts, {resent} units resent; every unit came back once, in order"
    );
    assert!(kills > 0 && restarts > 0, "the chaos did not happen");
}

/// Pids and farm name of the gpfarmd processes whose parent is `client`.
fn daemons_of(client: u32) -> (Vec<u32>, Option<String>) {
    let mut pids = Vec::new();
    let mut farm = None;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<String> =
            cmd.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let after = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
        if after("--parent-pid") == Some(client.to_string()) {
            pids.push(pid);
            farm = after("--farm");
        }
    }
    (pids, farm)
}

#[test]
fn a_client_killed_mid_request_takes_its_daemons_and_segments_with_it() {
    if !nvrtc_or_skip("client_killed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hang = dir.path().join("hang.cu");
    std::fs::write(&hang, "// gpfarm-test-fault: hang\n__global__ void k() {}\n").unwrap();
    let fine = dir.path().join("fine.cu");
    std::fs::write(&fine, kernel("fine", 1)).unwrap();
    let mut client = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["compile", "--daemons", "2", "--source"])
        .arg(&hang)
        .arg("--source")
        .arg(&fine)
        .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
        .env("GPFARM_TEST_FAULTS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until both daemons run and one of them is stuck in the hanging unit.
    let until = Instant::now() + Duration::from_secs(60);
    let (pids, farm) = loop {
        let (pids, farm) = daemons_of(client.id());
        let busy = farm.as_deref().is_some_and(|f| {
            gpfarm_client::farm_status()
                .iter()
                .any(|s| s.name == f && s.daemons.iter().any(|d| d.state == "processing"))
        });
        if pids.len() == 2 && busy {
            break (pids, farm.unwrap());
        }
        assert!(Instant::now() < until, "the client's daemons never got busy");
        std::thread::sleep(Duration::from_millis(20));
    };
    client.kill().unwrap();
    client.wait().unwrap();
    let killed = Instant::now();
    let left = common::wait_gone(&pids, Duration::from_secs(5));
    let gone_after = killed.elapsed();
    assert!(left.is_empty(), "daemons {left:?} outlived their client");
    let farm: FarmName = farm.parse().unwrap();
    assert!(common::segments_of(&farm).is_empty(), "segments left: {:?}", common::segments_of(&farm));
    eprintln!("client killed mid-request: both daemons gone {gone_after:?} later, no segment left");
}

#[test]
fn a_served_job_with_a_crashing_unit_loses_that_unit_alone() {
    if !nvrtc_or_skip("served_crash") {
        return;
    }
    let mut farm = Farm::spawn(faulty_config(2, Duration::from_secs(60))).unwrap();
    let (mut submitter, work) = gpfarm_client::job_queue();
    let mut crashing = units(4);
    crashing.insert(1, marked("crasher", "crash"));
    std::thread::scope(|s| {
        let serving = s.spawn(|| farm.serve(&options(), work));
        submitter.submit(gpfarm_client::Job { id: 1, units: crashing.clone() });
        submitter.submit(gpfarm_client::Job { id: 2, units: units(3) });
        submitter.close();
        let mut finished: Vec<_> = submitter.finished().iter().collect();
        finished.sort_by_key(|f| f.id);
        assert_eq!(finished.len(), 2);
        let UnitOutcome::Failed(f) = &finished[0].results[1].outcome else { panic!("the crasher compiled") };
        assert_eq!(f.kind, FailureKind::Lost);
        assert_compiled(&finished[0].results, &crashing, &[1]);
        assert_compiled(&finished[1].results, &units(3), &[]);
        let stats = serving.join().unwrap().unwrap();
        assert_eq!(stats.restarts, 2, "crashed once, retried alone once");
    });
}
