//! `gpfarm compile`: compile a random population or given files and report where the time went.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use gpfarm_client::{CompilerSpec, Workers, cubin};
use gpfarm_protocol::{CompileMode, CompileOptions, FarmName, Language, SmArch, Unit, UnitOutcome};
use serde_json::json;

use super::compilers::{self, FarmSource};
use super::{PartialFailure, UsageError, random};

/// What NVRTC produces, as `--mode` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// NVRTC straight to CUBIN.
    Cubin,
    /// NVRTC to PTX, then the driver's linker to CUBIN (needs a GPU; the farm's daemons only).
    PtxJit,
}

impl From<Mode> for CompileMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Cubin => CompileMode::Cubin,
            Mode::PtxJit => CompileMode::PtxJit,
        }
    }
}

/// Arguments of `gpfarm compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// Compiler: farm[:K], farm-jit[:K], threads[:K], inprocess or nvcc.
    #[arg(long, default_value = "farm")]
    compiler: CompilerSpec,
    /// Daemons (farm) or threads (threads) when --compiler gives no K; default: one per core.
    #[arg(long, short = 'n', alias = "threads", value_parser = crate::cli::count::<4096>)]
    daemons: Option<usize>,
    /// Attach to daemons started by `gpfarm daemons start` instead of spawning new ones.
    #[arg(long)]
    attach: bool,
    /// With --attach: the farm's name (default: the only running farm).
    #[arg(long, requires = "attach")]
    farm: Option<FarmName>,
    /// Compile a seeded random population of this many expression kernels.
    #[arg(long, conflicts_with = "source", value_parser = crate::cli::count::<10_000_000>)]
    random: Option<usize>,
    /// Random kernels per translation unit.
    #[arg(long, default_value_t = 1, value_parser = crate::cli::count::<1_000_000>)]
    per_unit: usize,
    /// Seed of the random population.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Compile these files, one translation unit each: CUDA C through NVRTC, or, for a file
    /// ending in .ptx, a PTX module linked with the math library by nvJitLink.
    #[arg(long, num_args = 1..)]
    source: Vec<PathBuf>,
    /// Target architecture (CUBIN needs a real sm_XX).
    #[arg(long, default_value = "sm_90")]
    arch: SmArch,
    /// What NVRTC produces (default: ptx-jit for farm-jit, else cubin); ptx-jit with farm means
    /// farm-jit.
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Extra NVRTC option (repeatable), e.g. --flag=--use_fast_math --flag=-default-device.
    #[arg(long = "flag", allow_hyphen_values = true)]
    flags: Vec<String>,
    /// Write each CUBIN into this directory.
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Print one JSON document instead of a summary.
    #[arg(long)]
    json: bool,
    /// Seconds a daemon may spend on one unit before it is killed and replaced, and the unit
    /// retried once (farm only).
    #[arg(long, default_value_t = gpfarm_client::DEFAULT_UNIT_DEADLINE.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    deadline: u64,
}

/// The compiler and mode `--compiler`, `-n` and `--mode` ask for together: ptx-jit on a farm is
/// farm-jit, and a worker count given twice must agree.
fn resolve(
    spec: CompilerSpec,
    daemons: Option<usize>,
    mode: Option<Mode>,
) -> Result<(CompilerSpec, CompileMode)> {
    let spec = match (spec, mode) {
        (CompilerSpec::Farm(w), Some(Mode::PtxJit)) => CompilerSpec::FarmJit(w),
        (CompilerSpec::FarmJit(_), Some(Mode::Cubin)) => {
            return Err(UsageError(
                "--compiler farm-jit compiles through PTX: drop --mode cubin, or use --compiler farm".into(),
            )
            .into());
        }
        (spec, _) => spec,
    };
    if let (Some(n), Some(Workers::Exactly(k))) = (daemons, spec.workers())
        && n != k.get()
    {
        return Err(UsageError(format!(
            "--compiler {spec} and -n {n} ask for different worker counts: give the count once"
        ))
        .into());
    }
    let mode = mode.map_or(spec.mode(), CompileMode::from);
    Ok((spec, mode))
}

/// The language of a `--source` file: PTX for `.ptx`, CUDA C for anything else.
fn language_of(path: &Path) -> Language {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("ptx")) {
        Language::Ptx
    } else {
        Language::CudaC
    }
}

/// Runs `gpfarm compile`.
pub fn run(args: CompileArgs, cuda: Option<&Path>) -> Result<()> {
    let (units, expected): (Vec<Unit>, Vec<Option<Vec<String>>>) = if let Some(count) = args.random {
        random::population(count, args.per_unit, args.seed)
            .into_iter()
            .map(|(name, src, kernels)| (Unit::new(name, src), Some(kernels)))
            .unzip()
    } else if !args.source.is_empty() {
        let mut units = Vec::new();
        for path in &args.source {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            units.push(Unit {
                name: path.display().to_string(),
                source: bytes,
                language: language_of(path),
                libraries: Vec::new(),
            });
        }
        let n = units.len();
        (units, vec![None; n])
    } else {
        return Err(UsageError("nothing to compile: give --random N or --source FILE...".into()).into());
    };
    let (spec, mode) = resolve(args.compiler, args.daemons, args.mode)?;
    let options = CompileOptions { arch: args.arch, mode, flags: args.flags.clone(), link_flags: Vec::new() };
    let source =
        FarmSource { attach: args.attach.then(|| args.farm.clone()), deadline_s: Some(args.deadline) };
    let mut compiler = compilers::build(spec, args.daemons, cuda, &options, &source)?;
    let batch = compiler.compile(&units, &options)?;

    if let Some(dir) = &args.out_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (unit, r) in units.iter().zip(&batch.results) {
            if let Some(c) = r.cubin() {
                let file = Path::new(&unit.name)
                    .file_stem()
                    .map_or_else(|| "unit".into(), |s| s.to_string_lossy().into_owned());
                let path = dir.join(format!("{file}.cubin"));
                std::fs::write(&path, c).with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }

    let ok = batch.results.iter().filter(|r| r.cubin().is_some()).count();
    let wall_ms = batch.stats.wall_us as f64 / 1000.0;
    let kernels_total: usize = expected.iter().map(|k| k.as_ref().map_or(1, Vec::len)).sum();
    let per_individual = wall_ms / kernels_total.max(1) as f64;
    let sum = |f: fn(&gpfarm_protocol::UnitTimings) -> u64| {
        batch.results.iter().map(|r| f(&r.timings)).sum::<u64>() as f64 / 1000.0
    };
    let (compile_ms, extract_ms, jit_ms) = (sum(|t| t.compile_us), sum(|t| t.extract_us), sum(|t| t.jit_us));

    if args.json {
        let per_unit: Vec<_> = units
            .iter()
            .zip(&batch.results)
            .zip(&expected)
            .map(|((unit, r), expected)| {
                let info = r.cubin().and_then(cubin::inspect);
                let (status, error) = match &r.outcome {
                    UnitOutcome::Cubin(_) => ("ok", None),
                    UnitOutcome::Failed(f) => ("failed", Some(f.to_string())),
                };
                json!({
                    "name": unit.name,
                    "status": status,
                    "error": error,
                    "cubin_bytes": r.cubin().map_or(0, <[u8]>::len),
                    "sm": info.as_ref().map(|i| i.sm),
                    "kernels": info.map(|i| i.kernels).unwrap_or_default(),
                    "expected_kernels": expected,
                    "log": r.log,
                    "timings_us": r.timings,
                })
            })
            .collect();
        let doc = json!({
            "compiler": compiler.name(),
            "arch": args.arch.to_string(),
            "mode": mode.to_string(),
            "flags": args.flags,
            "units": per_unit,
            "individuals": kernels_total,
            "ok": ok,
            "failed": units.len() - ok,
            "wall_ms": wall_ms,
            "ms_per_individual": per_individual,
            "stage_ms": { "compile": compile_ms, "extract": extract_ms, "jit": jit_ms },
            "stats": batch.stats,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "{}: {} units ({} individuals) for {} [{}], {} ok, {} failed",
            compiler.name(),
            units.len(),
            kernels_total,
            args.arch,
            mode,
            ok,
            units.len() - ok
        );
        println!("  wall {wall_ms:.1} ms = {per_individual:.3} ms per individual");
        println!(
            "  stages summed over units: compile {compile_ms:.1} ms, extract {extract_ms:.1} ms, jit {jit_ms:.1} ms"
        );
        let s = &batch.stats;
        println!(
            "  farm side: write {:.2} ms, wait {:.1} ms, read {:.2} ms; busiest worker {:.1} ms",
            s.write_us as f64 / 1000.0,
            s.wait_us as f64 / 1000.0,
            s.read_us as f64 / 1000.0,
            s.critical_busy_us() as f64 / 1000.0
        );
        for (unit, r) in units.iter().zip(&batch.results) {
            if let UnitOutcome::Failed(f) = &r.outcome {
                println!("  FAILED {}: {f}", unit.name);
                for line in r.log.lines().take(5) {
                    println!("    {line}");
                }
            }
        }
    }
    if ok < units.len() {
        return Err(
            PartialFailure(format!("{} of {} units did not compile", units.len() - ok, units.len())).into()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> CompilerSpec {
        s.parse().expect("a valid spec")
    }

    #[test]
    fn ptx_jit_on_a_farm_is_farm_jit_and_farm_jit_defaults_to_ptx_jit() {
        let (s, mode) = resolve(spec("farm:2"), None, Some(Mode::PtxJit)).unwrap();
        assert_eq!((s, mode), (spec("farm-jit:2"), CompileMode::PtxJit));
        let (s, mode) = resolve(spec("farm-jit"), None, None).unwrap();
        assert_eq!((s, mode), (spec("farm-jit"), CompileMode::PtxJit));
        let (s, mode) = resolve(spec("threads"), Some(3), None).unwrap();
        assert_eq!((s, mode), (spec("threads"), CompileMode::Cubin));
    }

    #[test]
    fn a_ptx_file_is_a_ptx_unit_and_anything_else_cuda_c() {
        assert_eq!(language_of(Path::new("dir/k.ptx")), Language::Ptx);
        assert_eq!(language_of(Path::new("K.PTX")), Language::Ptx);
        assert_eq!(language_of(Path::new("k.cu")), Language::CudaC);
        assert_eq!(language_of(Path::new("ptx")), Language::CudaC);
    }

    #[test]
    fn contradictions_are_usage_errors() {
        for err in [
            resolve(spec("farm-jit:2"), None, Some(Mode::Cubin)).unwrap_err(),
            resolve(spec("farm:4"), Some(8), None).unwrap_err(),
        ] {
            assert_eq!(crate::cli::Exit::of(&err), crate::cli::Exit::Usage, "{err}");
        }
        assert!(resolve(spec("farm:4"), Some(4), None).is_ok());
    }

    #[test]
    fn mode_flags_read_as_the_protocol_names_them() {
        for mode in Mode::value_variants() {
            let name = mode.to_possible_value().expect("no variant is skipped");
            assert_eq!(CompileMode::from(*mode).to_string(), name.get_name());
        }
    }
}
