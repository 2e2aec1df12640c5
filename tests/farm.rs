//! The compile farm end to end: real gpfarmd processes, real NVRTC, real shared memory.

mod common;

use std::time::Duration;

use common::{config, kernel, nvrtc_or_skip, segments_of, units, wait_gone};
use gpfarm_client::cubin::inspect;
use gpfarm_client::{
    CompileOptions, Compiler, FailureKind, Farm, FarmError, InProcess, Nvcc, SmArch, Threads, Unit,
    UnitOutcome,
};
use gpfarm_toolchain::Toolchain;

#[test]
fn two_hundred_kernels_on_three_daemons_come_back_as_sm90_cubins_in_input_order() {
    if !nvrtc_or_skip("two_hundred_kernels") {
        return;
    }
    let mut farm = Farm::spawn(config(3)).expect("farm starts");
    let units = units(200);
    let batch = farm.compile(&units, &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    assert_eq!(batch.results.len(), 200);
    for (i, r) in batch.results.iter().enumerate() {
        let cubin = r.cubin().unwrap_or_else(|| panic!("unit {i} failed: {:?}\n{}", r.outcome, r.log));
        assert_eq!(&cubin[..4], b"\x7fELF", "unit {i} is not an ELF");
        let info = inspect(cubin).unwrap_or_else(|| panic!("unit {i} is not a CUDA ELF"));
        assert_eq!(info.sm, 90, "unit {i}");
        assert_eq!(info.kernels, vec![format!("k_{i}")], "unit {i} out of order");
    }
    assert_eq!(batch.stats.workers.iter().map(|w| w.units).sum::<usize>(), 200);
    let sizes: Vec<usize> = batch.stats.workers.iter().map(|w| w.units).collect();
    assert_eq!(sizes, vec![67, 67, 66]);
}

#[test]
fn all_four_compilers_produce_cubins_with_the_same_kernel_names() {
    if !nvrtc_or_skip("all_four_compilers") {
        return;
    }
    let tc = Toolchain::discover(None).unwrap();
    let options = CompileOptions::cubin(SmArch::SM_90);
    let units: Vec<Unit> = (0..4)
        .map(|i| {
            let src = format!("{}{}", kernel(&format!("a_{i}"), i), kernel(&format!("b_{i}"), i + 1));
            Unit::new(format!("pair{i}.cu"), src)
        })
        .collect();
    let mut compilers: Vec<Box<dyn Compiler>> = vec![
        Box::new(Farm::spawn(config(2)).unwrap()),
        Box::new(InProcess::new(&tc, &options).unwrap()),
        Box::new(Threads::new(&tc, &options, 2).unwrap()),
    ];
    if tc.nvcc.is_some() {
        compilers.push(Box::new(Nvcc::new(&tc).unwrap()));
    } else {
        eprintln!("nvcc not in this toolchain: comparing three compilers");
    }
    for c in &mut compilers {
        let batch = c.compile(&units, &options).unwrap();
        for (i, r) in batch.results.iter().enumerate() {
            let info = r
                .cubin()
                .and_then(inspect)
                .unwrap_or_else(|| panic!("{}: unit {i}: {:?}", c.name(), r.outcome));
            assert_eq!(info.sm, 90);
            assert_eq!(info.kernels, vec![format!("a_{i}"), format!("b_{i}")], "{}", c.name());
        }
    }
}

#[test]
fn a_syntax_error_fails_only_its_own_unit_and_carries_nvrtcs_log() {
    if !nvrtc_or_skip("syntax_error") {
        return;
    }
    let mut farm = Farm::spawn(config(2)).unwrap();
    let mut units = units(5);
    units[2] = Unit::new("broken.cu", "extern \"C\" __global__ void broken(float* y) { y[0] = ; }\n");
    let batch = farm.compile(&units, &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    for (i, r) in batch.results.iter().enumerate() {
        if i == 2 {
            let UnitOutcome::Failed(f) = &r.outcome else { panic!("broken unit compiled") };
            assert_eq!(f.kind, FailureKind::Compilation);
            assert!(r.log.contains("expected an expression"), "log: {}", r.log);
            assert!(r.log.contains("broken.cu"), "log names the unit: {}", r.log);
        } else {
            assert!(r.cubin().is_some(), "unit {i} failed: {:?}", r.outcome);
        }
    }
}

#[test]
fn a_unit_larger_than_the_segment_grows_it_and_compiles() {
    if !nvrtc_or_skip("large_unit") {
        return;
    }
    let mut farm = Farm::spawn(config(1)).unwrap();
    let padding = format!("/*{}*/\n", "x".repeat(6 << 20));
    let big = Unit::new("big.cu", format!("{padding}{}", kernel("big", 1)));
    let units = vec![big, units(1).remove(0)];
    let batch = farm.compile(&units, &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    assert!(batch.stats.workers[0].request_bytes > 6 << 20);
    let names: Vec<Vec<String>> =
        batch.results.iter().map(|r| inspect(r.cubin().unwrap()).unwrap().kernels).collect();
    assert_eq!(names, vec![vec!["big".to_string()], vec!["k_0".to_string()]]);
}

#[test]
fn dropping_a_farm_leaves_no_segment_and_no_daemon() {
    if !nvrtc_or_skip("drop_cleans_up") {
        return;
    }
    let farm = Farm::spawn(config(3)).unwrap();
    let name = farm.name().clone();
    let pids = farm.pids();
    assert_eq!(segments_of(&name).len(), 3);
    drop(farm);
    assert_eq!(segments_of(&name), Vec::<String>::new());
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new());
}

#[test]
fn a_daemon_without_nvrtc_fails_to_start_with_an_install_hint() {
    let mut cfg = config(1);
    cfg.cuda = Some(std::env::temp_dir().join("gpfarm-definitely-no-cuda"));
    let err = Farm::spawn(cfg).err().expect("start must fail").to_string();
    assert!(err.contains("install-toolchain"), "{err}");
}

#[test]
fn a_released_farm_is_shared_by_its_clients_and_an_unreleased_one_is_refused_at_once() {
    if !nvrtc_or_skip("second_client") {
        return;
    }
    let mut owner = Farm::spawn(config(1)).unwrap();
    let name = owner.name().clone();
    // A second client is another process; this one's lock would be re-entrant, so ask gpfarm.
    let second = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(["compile", "--attach", "--farm", name.as_str(), "--random", "3"])
            .output()
            .unwrap()
    };
    // The farm's owner holds its daemon for good: nothing to wait for.
    let t = std::time::Instant::now();
    let out = second();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("in use by process") && stderr.contains("does not share it"), "{stderr}");
    assert!(t.elapsed() < std::time::Duration::from_secs(10), "refused after {:?}", t.elapsed());
    // Released, it is shared: a client attached in this process and another process both compile.
    owner.release();
    let mut first = Farm::attach(Some(&name), config(1)).expect("first client attaches");
    let out = second();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let batch = first.compile(&units(2), &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
    let batch = owner.compile(&units(2), &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
}

#[test]
fn two_clients_of_one_process_take_turns_on_a_shared_daemon() {
    if !nvrtc_or_skip("clients_of_one_process") {
        return;
    }
    // Other processes know a client by its pid, so two clients in two threads of one process must
    // not both write into the one daemon's segment at once.
    let mut owner = Farm::spawn(config(1)).unwrap();
    let name = owner.name().clone();
    // Held for its life by a farm of this very process, it is refused at once, not waited for.
    let t = std::time::Instant::now();
    match Farm::attach(Some(&name), config(1)) {
        Err(FarmError::InUse { .. }) => {}
        Err(e) => panic!("an unreleased farm of this process refused with {e}"),
        Ok(_) => panic!("an unreleased farm of this process was attached to"),
    }
    assert!(t.elapsed() < Duration::from_secs(5), "refused only after {:?}", t.elapsed());
    owner.release();
    let want: Vec<Vec<u8>> = owner
        .compile(&units(3), &CompileOptions::cubin(SmArch::SM_90))
        .unwrap()
        .results
        .iter()
        .map(|r| r.cubin().expect("the clean run compiles").to_vec())
        .collect();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (name, want) = (&name, &want);
            s.spawn(move || {
                let mut client = Farm::attach(Some(name), config(1)).unwrap();
                for _ in 0..15 {
                    let batch = client.compile(&units(3), &CompileOptions::cubin(SmArch::SM_90)).unwrap();
                    let got: Vec<Option<&[u8]>> = batch.results.iter().map(|r| r.cubin()).collect();
                    assert!(
                        got.iter().zip(want).all(|(g, w)| *g == Some(w.as_slice())),
                        "a unit came back changed or failed: {:?}",
                        batch
                            .results
                            .iter()
                            .map(|r| format!("{:?}", r.outcome).chars().take(200).collect::<String>())
                            .collect::<Vec<_>>()
                    );
                    assert_eq!(batch.stats.lost_daemons, 0, "the daemon was lost");
                }
            });
        }
    });
}

#[test]
fn a_unit_that_crashes_the_compiler_fails_alone_and_its_daemon_restarts() {
    if !nvrtc_or_skip("compiler_crash") {
        return;
    }
    let crash = Unit::new("crash.cu", include_str!("data/nvrtc13_crash.cu"));
    let mut farm = Farm::spawn(config(2)).unwrap();
    let pids = farm.pids();
    let mut units = units(4);
    units.insert(1, crash);
    let batch = farm.compile(&units, &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    let UnitOutcome::Failed(f) = &batch.results[1].outcome else {
        eprintln!("SKIPPED compiler_crash: this NVRTC compiles tests/data/nvrtc13_crash.cu");
        return;
    };
    assert_eq!(f.kind, FailureKind::Lost, "{f}");
    assert!(f.message.contains("SIGSEGV") && f.message.contains("on this unit"), "{f}");
    // The units that shared the crashed daemon's part were sent again and compiled.
    for i in [0, 2, 3, 4] {
        assert!(batch.results[i].cubin().is_some(), "unit {i}: {:?}", batch.results[i].outcome);
    }
    // It crashed its daemon, was tried once more on a fresh one, crashed that too, and failed.
    assert_eq!(batch.stats.lost_daemons, 2);
    assert_eq!(batch.stats.restarts, 2);
    // At least the culprit and the unit after it in the first daemon's part were resent.
    assert!(batch.stats.retried_units >= 2, "{:?}", batch.stats);
    assert_ne!(farm.pids(), pids, "the crashed daemon was replaced");
    let again = farm.compile(&common::units(3), &CompileOptions::cubin(SmArch::SM_90)).unwrap();
    assert!(again.results.iter().all(|r| r.cubin().is_some()));
}

/// Units `first..first + n`, one kernel `k_<i>` each.
fn numbered(first: usize, n: usize) -> Vec<Unit> {
    (first..first + n).map(|i| Unit::new(format!("u{i}.cu"), kernel(&format!("k_{i}"), i))).collect()
}

fn kernels_of(finished: &gpfarm_client::Finished) -> Vec<String> {
    finished
        .results
        .iter()
        .map(|r| {
            let cubin = r.cubin().unwrap_or_else(|| panic!("job {}: {:?}", finished.id, r.outcome));
            inspect(cubin).expect("a CUDA ELF").kernels.concat()
        })
        .collect()
}

#[test]
fn a_served_queue_answers_each_job_as_it_finishes_and_takes_jobs_submitted_meanwhile() {
    if !nvrtc_or_skip("served_queue") {
        return;
    }
    let mut farm = Farm::spawn(config(2)).expect("farm starts");
    let options = CompileOptions::cubin(SmArch::SM_90);
    let (mut submitter, work) = gpfarm_client::job_queue();
    std::thread::scope(|s| {
        let serving = s.spawn(|| farm.serve(&options, work));
        for job in 0..4u64 {
            assert!(submitter.submit(gpfarm_client::Job { id: job, units: numbered(job as usize * 10, 3) }));
        }
        // A result comes back before anything else is submitted or the queue is closed.
        let first = submitter.finished().recv().expect("a first job finishes");
        assert_eq!(
            kernels_of(&first),
            (0..3).map(|i| format!("k_{}", first.id * 10 + i)).collect::<Vec<_>>()
        );
        assert!(first.queued <= first.started && first.started <= first.ended);
        assert!(submitter.submit(gpfarm_client::Job { id: 7, units: numbered(70, 2) }));
        submitter.close();
        let mut rest: Vec<_> = submitter.finished().iter().collect();
        rest.sort_by_key(|f| f.id);
        let mut ids: Vec<u64> = rest.iter().map(|f| f.id).chain([first.id]).collect();
        ids.sort();
        assert_eq!(ids, [0, 1, 2, 3, 7]);
        for f in &rest {
            let n = f.results.len() as u64;
            assert_eq!(kernels_of(f), (0..n).map(|i| format!("k_{}", f.id * 10 + i)).collect::<Vec<_>>());
            assert!(f.busy_us > 0, "job {} reports no compile time", f.id);
        }
        let stats = serving.join().unwrap().unwrap();
        assert_eq!(stats.workers.iter().map(|w| w.units).sum::<usize>(), 14);
    });
    // The farm is still whole afterwards.
    let batch = farm.compile(&units(4), &options).unwrap();
    assert!(batch.results.iter().all(|r| r.cubin().is_some()));
    assert_eq!(farm.len(), 2);
}

#[test]
fn an_abandoned_queue_is_dropped_and_serve_returns_without_compiling_it() {
    if !nvrtc_or_skip("abandoned_queue") {
        return;
    }
    let mut farm = Farm::spawn(config(1)).expect("farm starts");
    let options = CompileOptions::cubin(SmArch::SM_90);
    let (submitter, work) = gpfarm_client::job_queue();
    for job in 0..200u64 {
        submitter.submit(gpfarm_client::Job { id: job, units: numbered(job as usize, 1) });
    }
    drop(submitter);
    let stats = farm.serve(&options, work).unwrap();
    let compiled: usize = stats.workers.iter().map(|w| w.units).sum();
    assert!(compiled <= 1, "compiled {compiled} units nobody waited for");
    assert!(farm.compile(&units(1), &options).unwrap().results[0].cubin().is_some());
}
