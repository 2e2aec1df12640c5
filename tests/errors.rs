//! How `gpfarm` fails, run as a user would: one line on stderr that gives each cause once, plain
//! text when stderr is not a terminal, and the exit status `gpfarm --help` documents.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::nvrtc_or_skip;

fn gpfarm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpfarm"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that `stderr` is one line starting with `gpfarm: ` in which `cause` appears once.
fn assert_one_line_with_cause_once(stderr: &str, cause: &str) {
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("gpfarm: "), "{stderr}");
    assert_eq!(stderr.matches(cause).count(), 1, "{cause:?} in {stderr}");
}

/// A copy of the built-in keijzer6 problem in a fresh directory, with `file` replaced by `text`.
fn problem_with(file: &str, text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let original = Path::new(env!("CARGO_MANIFEST_DIR")).join("gp/problems/keijzer6");
    for name in ["problem.toml", "grammar.bnf", "cases.json", "template.cu"] {
        std::fs::copy(original.join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join(file), text).unwrap();
    dir
}

#[test]
fn a_missing_problem_directory_gives_its_cause_once() {
    let out = gpfarm()
        .args(["evolve", "--problem-dir", "/nonexistent-gpfarm-problem", "--no-compile"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_one_line_with_cause_once(&err, "No such file or directory");
    assert!(err.contains("/nonexistent-gpfarm-problem/problem.toml: cannot read it"), "{err}");
}

#[test]
fn a_grammar_error_is_one_line_that_gives_its_cause_once() {
    let dir = problem_with("grammar.bnf", "<e> ::= <nope>\n");
    let out = gpfarm().args(["evolve", "--no-compile", "--problem-dir"]).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_one_line_with_cause_once(&err, "`<nope>` is used but never defined");
    assert!(err.contains("grammar.bnf: not a valid grammar: line 1: "), "{err}");
}

#[test]
fn a_toml_error_is_one_line_that_says_where() {
    let toml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("gp/problems/keijzer6/problem.toml"),
    )
    .unwrap();
    let dir = problem_with("problem.toml", &format!("bogus = = 1\n{toml}"));
    let out = gpfarm().args(["evolve", "--no-compile", "--problem-dir"]).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("problem.toml: line 1, column "), "{err}");
}

#[test]
fn a_cuda_directory_that_does_not_exist_is_called_that_before_any_daemon_starts() {
    let missing = PathBuf::from("/nonexistent-gpfarm-cuda");
    let out = gpfarm()
        .args(["compile", "--random", "2", "--daemons", "1", "--cuda"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_one_line_with_cause_once(&err, &format!("{} does not exist", missing.display()));
    assert!(!err.contains("libnvrtc.so.13") && !err.contains("daemon"), "{err}");
}

#[test]
fn usage_errors_exit_2_whether_clap_or_the_command_finds_them() {
    let clap = gpfarm().args(["compile", "--no-such-flag"]).output().unwrap();
    assert_eq!(clap.status.code(), Some(2), "{}", stderr(&clap));
    let nothing = gpfarm().args(["compile"]).output().unwrap();
    assert_eq!(nothing.status.code(), Some(2), "{}", stderr(&nothing));
    let contradiction =
        gpfarm().args(["compile", "--random", "1", "--compiler", "farm:2", "-n", "3"]).output().unwrap();
    assert_eq!(contradiction.status.code(), Some(2), "{}", stderr(&contradiction));
}

#[test]
fn help_lists_the_exit_statuses() {
    let out = gpfarm().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit status:"), "{help}");
    for line in ["  0  done", "  1  error", "  2  usage", "  3  partly failed"] {
        assert!(help.contains(line), "{line:?} missing from {help}");
    }
}

#[test]
fn bench_help_promises_no_duration_it_cannot_keep() {
    let out = gpfarm().args(["bench", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--quick"), "{help}");
    assert!(!help.contains("about a minute"), "{help}");
}

#[test]
fn a_source_that_does_not_compile_exits_3_and_one_that_does_exits_0() {
    if !nvrtc_or_skip("compile_source_exit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.cu");
    let good = dir.path().join("good.cu");
    std::fs::write(&bad, "extern \"C\" __global__ void k() { nope; }\n").unwrap();
    std::fs::write(&good, "extern \"C\" __global__ void k(float* y) { y[0] = 1.0f; }\n").unwrap();

    let out = gpfarm()
        .args(["compile", "--compiler", "inprocess", "--source"])
        .arg(&bad)
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAILED"));
    assert_eq!(stderr(&out).trim_end(), "gpfarm: 1 of 2 units did not compile");

    let out = gpfarm().args(["compile", "--compiler", "inprocess", "--source"]).arg(&good).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn logs_written_to_a_pipe_carry_no_colour_codes() {
    if !nvrtc_or_skip("logs_without_colour") {
        return;
    }
    // gpfarm's own log: a unit trace that cannot be written is a warning.
    let out = gpfarm()
        .args(["evolve", "--population", "10", "--generations", "0", "--compiler", "inprocess"])
        .args(["--route", "nvrtc"])
        .args(["--eval", "cpu", "--trace-units", "/dev/full"])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("WARN") && err.contains("/dev/full"), "{err}");
    assert!(!err.contains("\x1b["), "{err:?}");

    // gpfarmd's log, on the stderr it shares with gpfarm.
    let out = gpfarm()
        .args(["compile", "--random", "2", "--daemons", "1"])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("INFO") && err.contains("available"), "{err}");
    assert!(!err.contains("\x1b["), "{err:?}");
}

/// A copy of the built-in search problem (an `int[]` input) with `max_len` set to `max_len`.
fn search_with_max_len(max_len: &str) -> tempfile::TempDir {
    let original = Path::new(env!("CARGO_MANIFEST_DIR")).join("gp/problems/search");
    let dir = tempfile::tempdir().unwrap();
    for name in ["problem.toml", "grammar.bnf", "cases.json", "template.cu"] {
        std::fs::copy(original.join(name), dir.path().join(name)).unwrap();
    }
    let toml = std::fs::read_to_string(original.join("problem.toml")).unwrap();
    assert!(toml.contains("max_len = 20"));
    std::fs::write(
        dir.path().join("problem.toml"),
        toml.replace("max_len = 20", &format!("max_len = {max_len}")),
    )
    .unwrap();
    dir
}

/// Sizes, counts and values out of range are one line each, before anything is allocated: no
/// abort, no panic, no backtrace.
#[test]
fn inputs_out_of_range_are_one_line_errors() {
    let run = |args: &[&str], dir: Option<&Path>| {
        let mut c = gpfarm();
        c.args(["evolve", "--route", "cpu", "--generations", "1"]).args(args).env("RUST_BACKTRACE", "1");
        if let Some(d) = dir {
            c.arg("--problem-dir").arg(d);
        }
        let out = c.output().unwrap();
        (out.status.code(), stderr(&out))
    };
    let huge = search_with_max_len("1000000000000");
    let (code, err) = run(&[], Some(huge.path()));
    assert_eq!(code, Some(1), "{err}");
    assert_one_line_with_cause_once(&err, "more than the 2147483647 elements a kernel can index");
    let wide = search_with_max_len("2147483647");
    let (code, err) = run(&[], Some(wide.path()));
    assert_eq!(code, Some(1), "{err}");
    assert_one_line_with_cause_once(&err, "a kernel can index");
    // A template that reads each case's ints at another stride than max_len.
    let strided = search_with_max_len("20");
    let template = std::fs::read_to_string(strided.path().join("template.cu")).unwrap();
    assert!(template.contains("in_INPUT + c * 20"));
    std::fs::write(
        strided.path().join("template.cu"),
        template.replace("in_INPUT + c * 20", "in_INPUT + c * 40"),
    )
    .unwrap();
    let (code, err) = run(&[], Some(strided.path()));
    assert_eq!(code, Some(1), "{err}");
    assert_one_line_with_cause_once(
        &err,
        "at a stride of 40 ints per case, but problem.toml declares max_len = 20",
    );
    let cases = r#"[{"x": 1e300, "target": 1.0}]"#;
    let far = problem_with("cases.json", cases);
    let (code, err) = run(&[], Some(far.path()));
    assert_eq!(code, Some(1), "{err}");
    assert_one_line_with_cause_once(&err, "beyond the range of a float");
    assert!(err.contains("case 0"), "{err}");
    let (code, err) = run(&["--population", "10000000", "--islands", "1000"], None);
    assert_eq!(code, Some(1), "{err}");
    assert_one_line_with_cause_once(&err, "of memory");
    // Counts beyond any run are usage errors, named by the flag.
    for (args, cause) in [
        (&["--population", "1000000000000"][..], "is more than 100000000, the most it takes"),
        (&["--population", "18446744073709551615"][..], "is more than 100000000, the most it takes"),
        (&["--islands", "1000000"][..], "is more than 1024, the most it takes"),
    ] {
        let (code, err) = run(args, None);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(cause) && err.contains(args[0]) && !err.contains("panicked"), "{args:?}: {err}");
    }
    for args in [&["--deadline", "0"][..], &["--max-steps", "0"][..]] {
        let (code, err) = run(args, None);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked") && err.contains("0 is not in 1.."), "{err}");
    }
    // `bench` takes no count without a limit either.
    for (args, cause) in [
        (&["--runs", "100000000000"][..], "is more than 10000, the most it takes"),
        (&["--sizes", "20,1000000000000"][..], "is more than 100000000, the most it takes"),
        (&["--break-even", "--depths", "200"][..], "200 is not in 0..=64"),
        (&["--throughput", "--max-work", "nan"][..], "is not a positive number"),
    ] {
        let out = gpfarm().arg("bench").args(args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(cause) && !err.contains("panicked"), "{args:?}: {err}");
    }
    let out = gpfarm().args(["daemons", "start", "--max-rss-mib", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("0 is not in 1.."), "{}", stderr(&out));
}

#[test]
fn a_grammar_slip_is_refused_before_a_run_in_one_line() {
    // A dangling `+` and `(`, and a rule head whose name is not closed.
    for (grammar, cause) in [
        ("<e> ::= x + | ( <e>\n", "the grammar writes no program that parses"),
        ("<e> ::= x + <e2> | x\n<e2 ::= x\n", "line 2: not a rule head"),
    ] {
        let dir = problem_with("grammar.bnf", grammar);
        let out = gpfarm()
            .args(["evolve", "--route", "cpu", "--population", "10", "--generations", "1", "--problem-dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert_one_line_with_cause_once(&stderr(&out), cause);
    }
}

#[test]
fn a_cases_file_that_is_a_fifo_is_refused_and_does_not_hang() {
    let dir = problem_with("cases.json", "[]");
    let cases = dir.path().join("cases.json");
    std::fs::remove_file(&cases).unwrap();
    let made = Command::new("mkfifo").arg(&cases).status().unwrap();
    assert!(made.success());
    let mut child = gpfarm()
        .args(["evolve", "--route", "cpu", "--population", "10", "--generations", "1", "--problem-dir"])
        .arg(dir.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("gpfarm waited on the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(1));
    assert_one_line_with_cause_once(&stderr(&out), "not a regular file");
}

#[test]
fn counts_beyond_any_run_are_usage_errors() {
    for args in [
        &["compile", "--random", "100000000000"][..],
        &["compile", "--random", "2000000000"][..],
        &["evolve", "--population", "1000000000000", "--route", "cpu"][..],
        &["evolve", "--max-size", "100000000000000000000000000000", "--route", "cpu"][..],
    ] {
        let out = gpfarm().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("the most it takes"), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).lines().count() <= 4, "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_template_that_does_not_compile_is_refused_before_generation_0() {
    if !nvrtc_or_skip("template_does_not_compile") {
        return;
    }
    let original = Path::new(env!("CARGO_MANIFEST_DIR")).join("gp/problems/keijzer6/template.cu");
    let broken =
        std::fs::read_to_string(original).unwrap().replacen("return;", "return; this_is_not_cuda;", 1);
    let dir = problem_with("template.cu", &broken);
    let out = gpfarm()
        .args([
            "evolve",
            "--route",
            "nvrtc",
            "--eval",
            "cpu",
            "--population",
            "10",
            "--generations",
            "1",
            "-n",
            "1",
        ])
        .arg("--problem-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_one_line_with_cause_once(
        &stderr(&out),
        "template.cu does not compile around a program of its grammar",
    );
}
