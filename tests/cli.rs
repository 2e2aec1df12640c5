//! The `gpfarm` command line, run as a user would.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{nvrtc_or_skip, segments_of, wait_gone};
use gpfarm_protocol::FarmName;

fn gpfarm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpfarm"))
}

#[test]
fn compile_json_returns_one_hundred_cubins() {
    if !nvrtc_or_skip("compile_json") {
        return;
    }
    let out = gpfarm()
        .args(["compile", "--daemons", "2", "--random", "100", "--seed", "1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["compiler"], "farm:2");
    assert_eq!(doc["ok"], 100);
    let units = doc["units"].as_array().unwrap();
    assert_eq!(units.len(), 100);
    for (i, u) in units.iter().enumerate() {
        assert_eq!(u["status"], "ok");
        assert_eq!(u["sm"], 90);
        assert!(u["cubin_bytes"].as_u64().unwrap() > 0);
        assert_eq!(u["kernels"], serde_json::json!([format!("ind_{i}")]));
    }
    assert!(doc["ms_per_individual"].as_f64().unwrap() > 0.0);
}

#[test]
fn interrupting_daemons_start_leaves_no_segment_and_no_daemon() {
    if !nvrtc_or_skip("daemons_start_sigint") {
        return;
    }
    let name: FarmName = format!("t{}", std::process::id()).parse().unwrap();
    let mut child = gpfarm()
        .args(["daemons", "start", "-n", "2", "--name", name.as_str()])
        .env_remove("CUDA_CACHE_DISABLE")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    assert!(ready.contains("2 daemons ready"), "{ready}");
    let status = gpfarm().args(["daemons", "status", "--json"]).output().unwrap();
    let farms: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let ours = farms.as_array().unwrap().iter().find(|f| f["name"] == name.as_str()).expect("farm listed");
    let pids: Vec<u32> =
        ours["daemons"].as_array().unwrap().iter().map(|d| d["pid"].as_u64().unwrap() as u32).collect();
    assert_eq!(pids.len(), 2);
    assert_eq!(segments_of(&name).len(), 2);
    for &pid in &pids {
        assert_eq!(environment_value(pid, "CUDA_CACHE_DISABLE").as_deref(), Some("1"), "daemon {pid}");
    }

    // SAFETY: kill(2) of our own child with SIGINT, as Ctrl-C would.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit}");
    assert_eq!(segments_of(&name), Vec::<String>::new());
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new());
}

/// The value of `var` in the environment process `pid` started with.
fn environment_value(pid: u32, var: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let prefix = format!("{var}=");
    environ
        .split(|&b| b == 0)
        .map(String::from_utf8_lossy)
        .find_map(|entry| entry.strip_prefix(&prefix).map(str::to_owned))
}

#[test]
fn a_users_choice_about_the_driver_cache_reaches_the_daemons() {
    if !nvrtc_or_skip("driver_cache_choice") {
        return;
    }
    let name: FarmName = format!("c{}", std::process::id()).parse().unwrap();
    let out = gpfarm()
        .args(["daemons", "start", "-n", "1", "--detach", "--name", name.as_str()])
        .env("CUDA_CACHE_DISABLE", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = gpfarm().args(["daemons", "status", "--json"]).output().unwrap();
    let farms: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let ours = farms.as_array().unwrap().iter().find(|f| f["name"] == name.as_str()).expect("farm listed");
    let pid = ours["daemons"][0]["pid"].as_u64().unwrap() as u32;
    let value = environment_value(pid, "CUDA_CACHE_DISABLE");
    let stop = gpfarm().args(["daemons", "stop", name.as_str()]).output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    assert_eq!(value.as_deref(), Some("0"));
    assert_eq!(wait_gone(&[pid], Duration::from_secs(5)), Vec::<u32>::new());
    assert_eq!(segments_of(&name), Vec::<String>::new());
}

#[test]
fn compiling_nothing_is_a_clear_error() {
    let out = gpfarm().args(["compile"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to compile"));
}

#[test]
fn the_cli_has_no_gpu_worker_subcommand() {
    // The GPU worker is a binary of its own; no library starts the CLI.
    let out = gpfarm().args(["gpu-worker", "--problem", "keijzer6"]).stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}
