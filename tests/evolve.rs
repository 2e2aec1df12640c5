//! `gpfarm evolve` end to end on the CPU evaluator: real daemons, real NVRTC. Caching and
//! overlap change what is compiled and when, never a fitness value.

mod common;

use std::path::Path;
use std::process::Command;

use common::nvrtc_or_skip;
use serde_json::Value;

/// Runs `gpfarm evolve` on keijzer6 with `extra` arguments; returns the generation records and
/// the summary.
fn evolve(extra: &[&str]) -> (Vec<Value>, Value) {
    evolve_with(extra, None)
}

fn evolve_with(extra: &[&str], cache_home: Option<&Path>) -> (Vec<Value>, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpfarm"));
    cmd.args(["evolve", "--problem", "keijzer6", "--eval", "cpu", "--daemons", "2"])
        .args(["--population", "60", "--generations", "6", "--seed", "3", "--json"])
        .args(extra);
    // The PTX route unless asked otherwise: these tests are about compiling (auto interprets
    // keijzer6).
    if !extra.contains(&"--route") {
        cmd.args(["--route", "ptx"]);
    }
    if let Some(home) = cache_home {
        cmd.env("GPFARM_CACHE_DIR", home);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut records: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = records.pop().expect("a summary");
    assert_eq!(summary["summary"], true);
    assert_eq!(records.len(), 7, "{extra:?}: generations 0 to 6");
    (records, summary)
}

fn trajectory(records: &[Value]) -> Vec<(Value, Value)> {
    records.iter().map(|r| (r["best"].clone(), r["mean"].clone())).collect()
}

#[test]
fn caching_and_overlap_give_the_same_fitness_in_every_generation() {
    if !nvrtc_or_skip("evolve_modes") {
        return;
    }
    let (all, all_summary) = evolve(&[]);
    let (plain, plain_summary) = evolve(&["--no-cache", "--no-overlap"]);
    let (cached, _) = evolve(&["--no-overlap"]);
    let (overlapped, _) = evolve(&["--no-cache"]);
    for (name, other) in [("plain", &plain), ("cache only", &cached), ("overlap only", &overlapped)] {
        assert_eq!(trajectory(other), trajectory(&all), "{name} differs from cache and overlap");
    }
    // Without the cache every individual is compiled; with it, fewer, and the rest are hits.
    let t = &plain_summary["totals"];
    assert_eq!(t["compiled"], t["individuals_evaluated"]);
    assert_eq!(t["reused"], 0);
    let t = &all_summary["totals"];
    let (compiled, evaluated) =
        (t["compiled"].as_u64().unwrap(), t["individuals_evaluated"].as_u64().unwrap());
    assert!(compiled < evaluated, "{t}");
    let hits = t["reused"].as_u64().unwrap() + t["duplicates"].as_u64().unwrap();
    assert_eq!(compiled + hits, evaluated, "{t}");
    // Every generation after the first reuses something (elites' copies at least).
    for r in &all[1..] {
        assert!(r["individuals"]["hit_rate"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn each_generation_reports_a_critical_path_that_adds_up_to_its_time() {
    if !nvrtc_or_skip("evolve_critical_path") {
        return;
    }
    for overlap in [false, true] {
        critical_paths_add_up(if overlap { &[] } else { &["--no-overlap"] });
    }
}

fn critical_paths_add_up(flags: &[&str]) {
    let (records, summary) = evolve(flags);
    let (mut total, mut compiling) = (0.0, 0.0);
    for r in &records {
        let c = &r["critical_path"];
        let parts: f64 =
            ["breed_ms", "waiting_to_send_ms", "queued_ms", "compile_ms", "evaluate_ms", "rest_ms"]
                .iter()
                .map(|k| c[k].as_f64().unwrap())
                .sum();
        let gen_ms = r["generation_ms"].as_f64().unwrap();
        assert!((parts - gen_ms).abs() < 0.01, "{r}");
        compiling += c["compile_ms"].as_f64().unwrap();
        assert!(r["compile"]["busy_ms"].as_f64().unwrap() > 0.0, "{r}");
        total += gen_ms;
    }
    assert!(compiling > 0.0, "no generation waited for a compile");
    let wall_ms = summary["totals"]["wall_s"].as_f64().unwrap() * 1000.0;
    assert!(total <= wall_ms + 1.0 && total > wall_ms * 0.9, "generations {total} ms, run {wall_ms} ms");
}

#[test]
fn a_repeated_run_with_the_disk_cache_compiles_nothing_and_gets_the_same_fitness() {
    if !nvrtc_or_skip("evolve_disk_cache") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (first, first_summary) = evolve_with(&["--disk-cache"], Some(dir.path()));
    assert_eq!(first_summary["totals"]["disk_hits"], 0);
    let (second, second_summary) = evolve_with(&["--disk-cache"], Some(dir.path()));
    assert_eq!(trajectory(&second), trajectory(&first));
    let t = &second_summary["totals"];
    assert_eq!(t["compiled"], 0, "{t}");
    assert_eq!(t["disk_hits"], first_summary["totals"]["compiled"], "{t}");
    // A cache given by path works the same, and an empty one starts cold.
    let other = tempfile::tempdir().unwrap();
    let path = other.path().to_str().unwrap();
    let (third, third_summary) = evolve(&["--cache-dir", path]);
    assert_eq!(trajectory(&third), trajectory(&first));
    assert_eq!(third_summary["totals"]["disk_hits"], 0);
}

#[test]
fn no_cache_with_a_disk_cache_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--no-cache", "--disk-cache", "--no-compile"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

#[test]
fn options_the_compiler_refuses_stop_the_run_at_once_naming_them() {
    if !nvrtc_or_skip("evolve_refused_options") {
        return;
    }
    for (extra, says) in [
        (&["--route", "ptx", "--link-flag=-O1"][..], "-Xptxas=-O1"),
        (&["--route", "nvrtc", "--flag=--no-such-option"][..], "--no-such-option"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(["evolve", "--problem", "keijzer6", "--eval", "cpu", "--daemons", "1"])
            .args(["--population", "20", "--generations", "3", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} ran: {stderr}");
        assert!(stderr.contains("refuses the options") && stderr.contains(says), "{extra:?}: {stderr}");
        // Refused before any generation, not individual by individual.
        assert!(!String::from_utf8_lossy(&out.stdout).contains("\"generation\""), "{extra:?}");
        assert!(!stderr.contains("worst fitness"), "{extra:?}: {stderr}");
    }
    // Options it takes run as before.
    let (records, _) = evolve(&["--route", "ptx", "--link-flag=-O3"]);
    assert!(records.iter().all(|r| r["individuals"]["failed"] == 0), "{records:?}");
}

#[test]
fn json_lines_are_the_engines_typed_records_and_match_a_library_run() {
    // `--json` prints the serde serialisation of the library's records: each line reads back
    // into them, and a library run with the same options gives the same fitness.
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--problem", "multiplier5", "--eval", "cpu", "--no-compile", "--json"])
        .args(["--population", "40", "--generations", "4", "--seed", "9"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = stdout.lines().collect();
    let summary: gpfarm_evolve::Summary = serde_json::from_str(lines.pop().unwrap()).unwrap();
    let records: Vec<gpfarm_evolve::GenerationRecord> =
        lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(summary.summary);
    assert_eq!(records.len(), 5);
    assert!(records.iter().all(|r| r.evaluator == gpfarm_evolve::EvaluatorKind::Cpu));
    // Bit errors are small whole numbers: the median is one of them, never an overflow.
    assert!(
        records
            .iter()
            .all(|r| r.median.is_some_and(|m| m >= r.best && m.fract() * 2.0 == (m.fract() * 2.0).round()))
    );
    let options = gpfarm_evolve::Options {
        evolution: gpfarm_gp::EvolutionConfig {
            population: 40,
            generations: 4,
            seed: 9,
            // The command line's default size limit.
            max_size: 50,
            ..Default::default()
        },
        eval: gpfarm_evolve::EvalMode::Cpu,
        ..Default::default()
    };
    let engine =
        gpfarm_evolve::Engine::new(gpfarm_evolve::ProblemRef::Builtin("multiplier5".into()), options)
            .unwrap();
    let mut library = Vec::new();
    let again = engine
        .run_without_compiling(|r| {
            library.push((r.best, r.mean, r.invalid, r.unique));
            Ok(())
        })
        .unwrap();
    let cli: Vec<_> = records.iter().map(|r| (r.best, r.mean, r.invalid, r.unique)).collect();
    assert_eq!(cli, library);
    assert_eq!(summary.best_fitness, again.best_fitness);
    assert_eq!(summary.best_phenotype, again.best_phenotype);
}

/// Both routes in both unit shapes compile every individual of a statement problem and an
/// expression problem (the CPU evaluates, so the trajectories agree whatever the code; the GPU
/// agreement is in tests/gpu.rs).
#[test]
fn every_route_and_unit_shape_compiles_every_individual() {
    if !nvrtc_or_skip("evolve_routes_and_shapes") {
        return;
    }
    for problem in ["search", "keijzer6"] {
        let mut trajectories = Vec::new();
        for (route, shape) in
            [("nvrtc", "kernels"), ("nvrtc", "switch"), ("ptx", "kernels"), ("ptx", "switch")]
        {
            let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
                .args(["evolve", "--problem", problem, "--eval", "cpu", "--daemons", "2"])
                .args(["--population", "40", "--generations", "2", "--seed", "5", "--json"])
                .args(["--route", route, "--shape", shape])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{problem} {route} {shape}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let totals = &records.last().unwrap()["totals"];
            assert_eq!(totals["failed"], 0, "{problem} {route} {shape}: {totals}");
            assert!(totals["compiled"].as_u64().unwrap() > 0, "{problem} {route} {shape}: {totals}");
            trajectories.push(trajectory(&records[..records.len() - 1]));
        }
        assert!(trajectories.windows(2).all(|w| w[0] == w[1]), "{problem}");
    }
}

/// Auto decides from the problem alone: the built-in problems (the standard harness) are
/// interpreted (here, with no GPU evaluating, by the CPU reference evaluator: the cpu route),
/// compiling nothing, and evolve exactly as a compile route evolves them; a problem with a
/// template of its own is compiled by NVRTC. The choice and its reason are in the summary.
#[test]
fn auto_interprets_the_standard_harness_and_evolves_as_the_compile_routes_do() {
    if !nvrtc_or_skip("auto_route") {
        return;
    }
    let (auto, auto_summary) = evolve_with(&["--route", "auto"], None);
    let (ptx, ptx_summary) = evolve(&[]);
    assert_eq!(trajectory(&auto), trajectory(&ptx));
    assert_eq!(auto_summary["route"], "cpu", "{auto_summary}");
    let why = auto_summary["route_reason"].as_str().unwrap();
    assert!(why.starts_with("auto:") && why.contains("ms interpreted"), "{auto_summary}");
    assert!(why.contains("the CPU reference evaluator"), "{auto_summary}");
    assert_eq!(auto_summary["totals"]["compiled"], 0);
    assert_eq!(ptx_summary["route"], "ptx");
    assert_eq!(ptx_summary["route_reason"], "asked for");

    // A template of its own: only NVRTC can compile it.
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("gp/problems/keijzer6");
    for f in ["problem.toml", "grammar.bnf", "cases.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let template = std::fs::read_to_string(src.join("template.cu")).unwrap();
    let changed =
        template.replace("out_y[c] = (float)({{PHENOTYPE}});", "out_y[c] = (float)({{PHENOTYPE}}) * 0.5f;");
    assert_ne!(template, changed);
    std::fs::write(dir.path().join("template.cu"), changed).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args([
            "evolve",
            "--eval",
            "cpu",
            "--daemons",
            "1",
            "--json",
            "--population",
            "10",
            "--generations",
            "0",
            "--problem-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    // Auto would compile it with NVRTC; with nothing on a GPU to run the CUBIN (`--eval cpu`),
    // the CPU evaluates, and nothing needs NVRTC.
    assert_eq!(summary["route"], "cpu", "{summary}");
    let why = summary["route_reason"].as_str().unwrap();
    assert!(
        why.contains("line") && why.contains("only NVRTC") && why.contains("no GPU evaluates"),
        "{summary}"
    );
}

/// `--per-unit K` forms the units `gpfarm bench --per-unit K` forms (both take them from
/// `gpfarm_client::partition::plan`): over 10 individuals, units of 4, 3 and 3.
#[test]
fn a_fixed_unit_size_gives_balanced_units_as_the_bench_forms_them() {
    if !nvrtc_or_skip("per_unit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("units.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--problem", "keijzer6", "--eval", "cpu", "--daemons", "1", "--route", "nvrtc"])
        .args(["--population", "10", "--generations", "0", "--no-cache", "--per-unit", "4", "--json"])
        .arg("--trace-units")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let units: Vec<Value> =
        std::fs::read_to_string(&trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut sizes: Vec<usize> = units.iter().map(|u| u["individuals"].as_u64().unwrap() as usize).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let compiled: usize = sizes.iter().sum();
    let planned: Vec<usize> =
        gpfarm_client::partition::per_unit(compiled, 4).iter().map(|r| r.len()).collect();
    assert_eq!(sizes, planned);
    // Seed 1's first generation maps all ten.
    assert_eq!(sizes, vec![4, 3, 3]);
}

/// The while-loop example runs to the end on the CPU route: loops that never end are stopped by
/// the step limit and their programs get the worst fitness.
/// Breeding, parsing, admitting and the CPU's evaluation run on `--threads` threads; a seeded
/// run is the same, generation by generation and to the last bit, whatever their number.
#[test]
fn a_seeded_run_is_the_same_whatever_the_thread_count() {
    let run = |threads: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(["evolve", "--problem", "keijzer6", "--route", "cpu", "--population", "3000"])
            .args(["--generations", "4", "--seed", "11", "--json", "--threads", threads])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let records: Vec<Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(records.len(), 6, "generations 0 to 4 and the summary");
        records
            .iter()
            .map(|r| {
                let f = |k: &str| r[k].clone();
                (f("best"), f("mean"), f("median"), f("unique"), f("invalid"), f("best_phenotype"))
            })
            .collect::<Vec<_>>()
    };
    let one = run("1");
    assert!(one[..5].iter().all(|r| r.3.as_u64().unwrap() > 1000), "{one:?}");
    assert_eq!(run("2"), one);
    assert_eq!(run("5"), one);
}

#[test]
fn the_while_loop_example_ends_on_the_cpu() {
    let (records, summary) = common::evolve_example(
        "while-search",
        &[
            "--route",
            "cpu",
            "--population",
            "40",
            "--generations",
            "1",
            "--seed",
            "2",
            "--representation",
            "ge",
        ],
    );
    assert_eq!(summary["route"], "cpu", "{summary}");
    assert_eq!(records.len(), 2, "two generations");
    // Some of the first generation's loops never end: invalid, with the worst fitness.
    assert!(records[0]["invalid"].as_u64().unwrap() > 0, "{}", records[0]);
    assert!(summary["best_phenotype"].as_str().is_some());
}

/// Runs the Friedman-1 example on the CPU route with `extra` arguments; the records and summary.
fn friedman1(extra: &[&str]) -> (Vec<Value>, Value) {
    let mut args = vec!["--population", "100", "--generations", "4", "--seed", "5"];
    if !extra.contains(&"--route") {
        args.extend(["--route", "cpu"]);
    }
    args.extend_from_slice(extra);
    common::evolve_example("friedman1", &args)
}

/// Fitting the free parameters finds better models than evolving them alone, the best model is
/// printed with its values written in, exactly (it re-evaluates to the reported fitness bit for
/// bit), and the thread count changes nothing.
#[test]
fn fitted_parameters_beat_evolved_ones_and_print_exactly() {
    let (fitted, summary) = friedman1(&[]);
    let (unfitted_records, unfitted) = friedman1(&["--fit-iterations", "0"]);
    let (best, plain) =
        (summary["best_fitness"].as_f64().unwrap(), unfitted["best_fitness"].as_f64().unwrap());
    assert!(best < 0.8 * plain, "fitted {best} against {plain} unfitted");
    assert!(fitted.iter().map(|r| r["fitted"].as_u64().unwrap()).sum::<u64>() > 0);
    assert_eq!(unfitted_records.iter().map(|r| r["fitted"].as_u64().unwrap()).sum::<u64>(), 0);
    // The printed model, parsed and evaluated, has the reported fitness.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/friedman1");
    let problem = gpfarm_gp::Problem::load(&dir).unwrap();
    let text = summary["best_phenotype"].as_str().unwrap();
    assert!(!text.contains("p["), "{text}");
    let again = gpfarm_gp::evaluate_phenotype(&problem, &gpfarm_gp::Phenotype::new(text)).fitness.value();
    assert_eq!(again.to_bits(), best.to_bits(), "{text}");
    // One fitting thread or many: the same run.
    let (one, _) = friedman1(&["--daemons", "1"]);
    assert_eq!(trajectory(&one), trajectory(&fitted));
    // Baldwinian fitting runs too, and is a different run.
    let (baldwin, _) = friedman1(&["--no-lamarck"]);
    assert_eq!(baldwin.len(), fitted.len());
    // A share outside [0, 1] is a one-line error.
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--route", "cpu", "--fit-share", "1.5"])
        .arg("--problem-dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a share in [0, 1]"));
}

/// On the compiled routes a structure compiles once: its kernel takes the free parameters'
/// values as an argument, so individuals that differ only in their values run one compiled code
/// (structure hits), and the run is the CPU route's, generation by generation.
#[test]
fn compiled_routes_compile_each_structure_once_whatever_its_values() {
    if !common::nvjitlink_or_skip("structures_compiled_once") {
        return;
    }
    let (cpu, _) = friedman1(&[]);
    for route in ["ptx", "nvrtc"] {
        let (records, summary) = friedman1(&["--route", route, "--eval", "cpu", "--daemons", "2"]);
        assert_eq!(trajectory(&records), trajectory(&cpu), "{route}");
        let t = &summary["totals"];
        let n = |k: &str| t[k].as_u64().unwrap();
        assert!(n("structure_hits") > 0, "{route}: {t}");
        assert_eq!(
            n("compiled")
                + n("structure_hits")
                + n("reused")
                + n("duplicates")
                + n("disk_hits")
                + n("failed"),
            n("individuals_evaluated"),
            "{route}: {t}"
        );
        // Without the caches every individual is compiled, values or not.
        let (plain, summary) = friedman1(&["--route", route, "--eval", "cpu", "--no-cache"]);
        assert_eq!(trajectory(&plain), trajectory(&cpu), "{route} without caches");
        assert_eq!(summary["totals"]["structure_hits"], 0);
    }
}

#[test]
fn a_run_started_from_an_earlier_runs_front_begins_where_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let first = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--problem", "keijzer6", "--eval", "cpu", "--no-compile", "--json"])
        .args(["--population", "60", "--generations", "8", "--seed", "4"])
        .output()
        .unwrap();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let path = dir.path().join("first.jsonl");
    std::fs::write(&path, &first.stdout).unwrap();
    let stdout = String::from_utf8_lossy(&first.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let front = summary["front"].as_array().unwrap();
    assert!(front.iter().all(|m| !m["seed"]["genome"].as_array().unwrap().is_empty()), "{summary}");
    let ended = summary["best_fitness"].as_f64().unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(["evolve", "--problem", "keijzer6", "--eval", "cpu", "--no-compile", "--json"])
            .args(["--population", "60", "--generations", "0", "--seed", "5"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let first: Value =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
        first["best"].as_f64().unwrap()
    };
    // A fresh generation 0 is far from where eight generations got; one started from their
    // front holds their best model.
    let cold = run(&[]);
    let warm = run(&["--start", path.to_str().unwrap()]);
    assert_eq!(warm, ended, "generation 0 started from the front");
    assert!(cold > ended, "a fresh start ({cold}) already as good as eight generations ({ended})");
    // Not a summary: a one-line error naming the option.
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--problem", "keijzer6", "--eval", "cpu", "--generations", "0"])
        .args(["--start", "Cargo.toml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--start") && stderr.contains("no run summary"),
        "{stderr}"
    );
}
