//! NVRTC 13 crashes (SIGSEGV) on about 1 in 900 valid random Search programs
//! (`tests/data/nvrtc13_crash.cu` is one). These tests hold gpfarm to what it promises then:
//! an in-process compiler dies of the signal, but first prints one line that names the unit and
//! its individuals and points to the farm; the farm isolates the crash.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use common::nvrtc_or_skip;

const CRASH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nvrtc13_crash.cu");

fn gpfarm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(args)
        .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
        .env("CUDA_CACHE_DISABLE", "1")
        .output()
        .expect("gpfarm runs")
}

/// Whether this NVRTC still crashes on the reproducer (a fixed NVRTC skips the crash tests).
fn nvrtc_crashes(test: &str) -> bool {
    if !nvrtc_or_skip(test) {
        return false;
    }
    let out = gpfarm(&["compile", "--compiler", "farm", "-n", "1", "--source", CRASH]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let crashes = stdout.contains("Lost") && stdout.contains("SIGSEGV");
    if !crashes {
        eprintln!("SKIPPED {test}: this NVRTC compiles {CRASH}\n{stdout}");
    }
    crashes
}

#[test]
fn an_nvrtc_crash_in_process_ends_in_one_line_that_names_the_unit_and_points_to_the_farm() {
    if !nvrtc_crashes("in_process_crash") {
        return;
    }
    for compiler in ["inprocess", "threads:2"] {
        let out = gpfarm(&["compile", "--compiler", compiler, "--source", CRASH]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{compiler}: {:?}\n{stderr}", out.status);
        let line = stderr
            .lines()
            .find(|l| l.starts_with("error: NVRTC crashed (SIGSEGV) compiling "))
            .unwrap_or_else(|| panic!("{compiler}: no crash line in\n{stderr}"));
        assert!(
            line.contains(&format!("{} (individual 14 of generation 0)", Path::new(CRASH).display())),
            "{line}"
        );
        assert!(line.contains("--compiler farm") && line.contains("isolates"), "{line}");
    }
}

#[test]
fn an_evolve_run_whose_individual_crashes_nvrtc_in_process_names_it_before_dying() {
    if !nvrtc_crashes("in_process_evolve_crash") {
        return;
    }
    let out = gpfarm(&[
        "evolve",
        "--problem",
        "search",
        "--population",
        "50",
        "--generations",
        "5",
        "--seed",
        "3",
        "--eval",
        "cpu",
        "--compiler",
        "inprocess",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{:?}\n{stderr}", out.status);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: NVRTC crashed (SIGSEGV) compiling g0_j"))
        .unwrap_or_else(|| panic!("no crash line in\n{stderr}"));
    assert!(line.contains("of generation 0)") && line.contains("--compiler farm"), "{line}");
}
