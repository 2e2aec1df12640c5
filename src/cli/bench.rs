//! `gpfarm bench`: the paper's experiment with every compiler on the same populations.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use gpfarm_bench::{BenchConfig, Method, plot, report};
use gpfarm_protocol::SmArch;

/// Arguments of `gpfarm bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A small run for CI (two sizes, one sample each, up to 2 workers): under a minute on 2 cores,
    /// about 15 s with a release build on idle ones.
    #[arg(long)]
    quick: bool,
    /// Problems, comma separated.
    #[arg(long, value_delimiter = ',')]
    problems: Option<Vec<String>>,
    /// Population sizes, comma separated (the paper: 20 to 300 in steps of 20).
    #[arg(long, value_delimiter = ',', value_parser = crate::cli::count::<{ gpfarm_gp::limits::MAX_POPULATION }>)]
    sizes: Option<Vec<usize>>,
    /// Independently seeded runs per size.
    #[arg(long, value_parser = crate::cli::count::<10_000>)]
    runs: Option<usize>,
    /// First generations sampled from each run; with --scale, generations after the initial
    /// one (default 5).
    #[arg(long, value_parser = crate::cli::count::<100_000>)]
    generations: Option<usize>,
    /// Methods, comma separated: nvcc, inprocess, threads:K, farm:K, farm-jit:K (default: all,
    /// K in 1, 2, 4, 8, 16 up to the cores present).
    #[arg(long, value_delimiter = ',', value_parser = gpfarm_bench::method::parse)]
    methods: Option<Vec<Method>>,
    /// Individuals per translation unit, the same for every method.
    #[arg(long, value_parser = crate::cli::count::<1_000_000>)]
    per_unit: Option<usize>,
    /// Form the units as `gpfarm evolve` does for W workers instead (heaviest individuals first,
    /// guided chunks by each route's cost estimate), each unit taken by the next free worker.
    #[arg(long, value_name = "W", conflicts_with = "per_unit", value_parser = crate::cli::count::<65_535>)]
    guided: Option<usize>,
    /// Extra NVRTC option (repeatable), e.g. --flag=--use_fast_math.
    #[arg(long = "flag", allow_hyphen_values = true)]
    flags: Vec<String>,
    /// Routes to compare on the same populations: nvrtc, ptx (comma separated; default nvrtc);
    /// with --throughput also interpreter and cpu (default all four).
    #[arg(long, value_delimiter = ',')]
    routes: Option<Vec<gpfarm_protocol::Route>>,
    /// nvJitLink option for the PTX route (repeatable), e.g. --link-flag=-O0.
    #[arg(long = "link-flag", allow_hyphen_values = true, conflicts_with = "link_flag_sets")]
    link_flags: Vec<String>,
    /// nvJitLink option sets for the PTX route, each measured in turn: sets separated by `;`,
    /// options within a set by spaces, e.g. --link-flag-sets='-O0;-O1;-O3'.
    #[arg(long, allow_hyphen_values = true, value_name = "SETS")]
    link_flag_sets: Option<String>,
    /// Unit shapes to compare on the same populations: kernels (one per individual), switch (one
    /// per unit), comma separated (default kernels).
    #[arg(long, value_delimiter = ',')]
    shapes: Option<Vec<gpfarm_protocol::Shape>>,
    /// Target architecture.
    #[arg(long, default_value = "sm_90")]
    arch: SmArch,
    /// The break-even between compiling and interpreting instead: every route (interpreter,
    /// ptx, nvrtc, cpu) on the same populations of the built-in problems and of regressions with
    /// --cases test cases and program sizes --depths, on this machine's GPU; writes
    /// breakeven.csv, breakeven.md and crossover.svg/png to --out.
    #[arg(long)]
    break_even: bool,
    /// With --break-even: the regressions' case counts; with --throughput: the workloads'.
    #[arg(long, value_delimiter = ',', value_parser = crate::cli::count::<100_000_000>)]
    cases: Option<Vec<usize>>,
    /// With --break-even: the initial population's largest derivation depths, one program size
    /// each.
    #[arg(long, value_delimiter = ',', requires = "break_even", value_parser = clap::value_parser!(u32).range(0..=64))]
    depths: Option<Vec<u32>>,
    /// With --break-even: loop counts of loop workloads (programs that add an expression to an
    /// accumulator in a while loop, that many times per case), for each case count up to
    /// --loop-max-steps cases times count; none by default.
    #[arg(long, value_delimiter = ',', requires = "break_even", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000))]
    loops: Option<Vec<u64>>,
    /// With --break-even --loops: the largest cases times loop count measured.
    #[arg(long, default_value_t = 100_000_000, requires = "break_even", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000_000))]
    loop_max_steps: u64,
    /// With --break-even: only the regressions, not the built-in problems.
    #[arg(long, requires = "break_even")]
    no_builtins: bool,
    /// With --break-even: the interpreter kernel's tunings, each `K[bN][sN]`: K cases per
    /// thread at once (programs without jumps), N blocks per multiprocessor asked of the
    /// compiler, N variable slots kept in registers (e.g. 4, 2b6, 4s0). The first is the
    /// `interpreter` route, the others extra rows `interpreter-xTUNING` of the CSV.
    #[arg(long, value_delimiter = ',', requires = "break_even")]
    tunings: Option<Vec<gpfarm_kernels::interpreter::Tuning>>,
    /// With --break-even or --throughput: timed evaluations per route and workload (the median
    /// is kept).
    #[arg(long, default_value_t = 5, value_parser = crate::cli::count::<10_000>)]
    repeats: usize,
    /// Parameter optimisation's workload instead (the related thesis's comparison): --expressions
    /// expressions with free parameters over --points points, each evaluated for --steps steps
    /// with new values at every step, by every route (each structure compiled once, the values
    /// its kernels' argument) and the CPU; writes steps.csv, steps.md and steps.svg/png to --out.
    #[arg(long, conflicts_with = "break_even")]
    param_steps: bool,
    /// With --param-steps: expressions per workload.
    #[arg(long, value_delimiter = ',', requires = "param_steps", value_parser = crate::cli::count::<{ gpfarm_gp::limits::MAX_POPULATION }>)]
    expressions: Option<Vec<usize>>,
    /// With --param-steps: points per workload.
    #[arg(long, value_delimiter = ',', requires = "param_steps", value_parser = crate::cli::count::<100_000_000>)]
    points: Option<Vec<usize>>,
    /// With --param-steps: parameter steps.
    #[arg(long, default_value_t = 100, requires = "param_steps", value_parser = crate::cli::count::<1_000_000>)]
    steps: usize,
    /// With --param-steps: fitting's steps instead of evaluation's. Each step is one
    /// Levenberg–Marquardt linearization (residuals and Jacobian sums) of every expression that
    /// compiled fitting kernels take, by the interpreter's fitting kernels and by kernels
    /// compiled for each structure; writes fit.csv, fit.md and fit.svg/png to --out.
    #[arg(long, requires = "param_steps")]
    fit: bool,
    /// With --param-steps: the compiled routes only up to this many expressions; with
    /// --throughput, programs.
    #[arg(long, default_value_t = 10_000, value_parser = crate::cli::count::<{ gpfarm_gp::limits::MAX_POPULATION }>)]
    compiled_max: usize,
    /// GPU tree-GP's throughput workload instead: populations (--sizes) of random full trees of
    /// --nodes nodes over `+ - * pdivf`, Pagie-1 cases (--cases), the fitness included, by
    /// every route of --routes (default interpreter, ptx, nvrtc, cpu); writes throughput.csv,
    /// throughput.md, throughput.svg/png and prepare.svg/png to --out.
    #[arg(long, conflicts_with_all = ["break_even", "param_steps"])]
    throughput: bool,
    /// Generations at scale instead: `gpfarm evolve` runs of a keijzer6-style problem over
    /// --cases cases (first value; default 1024) at populations --sizes (default 10^3 to 10^6)
    /// for --generations generations, each stage of each generation from the runs' records;
    /// writes scale.csv, scale.md and scale.svg/png to --out.
    #[arg(long, conflicts_with_all = ["break_even", "param_steps", "throughput"])]
    scale: bool,
    /// With --scale: the runs' evaluator (auto, cpu, gpu).
    #[arg(long, default_value = "auto", requires = "scale")]
    eval: String,
    /// With --scale: the runs' CPU threads (default one per core).
    #[arg(long, requires = "scale", value_parser = crate::cli::count::<4_096>)]
    threads: Option<usize>,
    /// With --throughput: nodes per tree (each 2^d - 1).
    #[arg(long, value_delimiter = ',', requires = "throughput", value_parser = crate::cli::count::<16_777_215>)]
    nodes: Option<Vec<usize>>,
    /// With --throughput: only workloads of at most this many node-evaluations (nodes x programs
    /// x cases).
    #[arg(long, default_value_t = 2e12, requires = "throughput", value_parser = positive_work)]
    max_work: f64,
    /// Compile daemons for --break-even and --param-steps (default: one per core).
    #[arg(long, short = 'n', value_parser = crate::cli::count::<65_535>)]
    daemons: Option<usize>,
    /// Samples nvcc compiles per problem and size (it is slow).
    #[arg(long, value_parser = crate::cli::count::<10_000>)]
    nvcc_samples: Option<usize>,
    /// Output directory for bench.csv, tables.md, machine.txt and the plots.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Measure nothing: redraw tables.md and the plots from DIR/bench.csv (and DIR/machine.txt).
    #[arg(long, value_name = "DIR")]
    replot: Option<PathBuf>,
}

/// `--max-work`: a positive, finite count of node-evaluations.
fn positive_work(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(w) if w.is_finite() && w > 0.0 => Ok(w),
        _ => Err(format!("`{s}` is not a positive number of node-evaluations")),
    }
}

fn write_reports(rows: &[gpfarm_bench::Row], dir: &Path, heading: &str) -> Result<()> {
    let md = report::tables(rows, heading);
    std::fs::write(dir.join("tables.md"), &md)?;
    let plots = plot::draw_all(rows, dir)?;
    println!("{md}");
    eprintln!("{} rows; plots: {}", rows.len(), plots.join(", "));
    Ok(())
}

fn heading(machine: &str, description: &str) -> String {
    format!(
        "# gpfarm bench\n\n{}\n{description}",
        machine.lines().map(|l| format!("- {l}\n")).collect::<String>()
    )
}

fn machine_description(cuda: Option<&Path>) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let gpu = match gpfarm_kernels::gpu::probe() {
        Ok((name, (ma, mi))) => format!("{name} (sm_{ma}{mi})"),
        Err(e) => format!("none ({e})"),
    };
    let driver = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "no NVIDIA driver".into());
    let nvrtc = gpfarm_toolchain::Toolchain::discover(cuda)
        .ok()
        .and_then(|tc| gpfarm_toolchain::Nvrtc::load(&tc).ok())
        .map_or("not found".into(), |n| {
            format!("{}.{} ({})", n.version().0, n.version().1, n.path().display())
        });
    format!("CPU: {cpu}\ncores: {cores}\nGPU: {gpu}\ndriver: {driver}\nNVRTC: {nvrtc}\n")
}

/// Runs `gpfarm bench`.
pub fn run(args: BenchArgs, cuda: Option<&Path>) -> Result<()> {
    if let (Some(dir), true) = (&args.replot, args.break_even) {
        let rows = gpfarm_bench::breakeven::read_csv(&dir.join("breakeven.csv"))?;
        for p in plot::draw_crossover(&rows, dir)? {
            eprintln!("wrote {p}");
        }
        return Ok(());
    }
    if let (Some(dir), true, true) = (&args.replot, args.param_steps, args.fit) {
        let rows = gpfarm_bench::steps::read_csv(&dir.join("fit.csv"))?;
        let machine = std::fs::read_to_string(dir.join("machine.txt")).unwrap_or_default();
        return write_fit_steps(&rows, dir, &machine);
    }
    if let (Some(dir), true) = (&args.replot, args.param_steps) {
        let rows = gpfarm_bench::steps::read_csv(&dir.join("steps.csv"))?;
        let machine = std::fs::read_to_string(dir.join("machine.txt")).unwrap_or_default();
        std::fs::write(
            dir.join("steps.md"),
            gpfarm_bench::steps::table(&rows, &steps_heading(&machine, &rows)),
        )?;
        for p in plot::draw_steps(&rows, dir)?.into_iter().chain(plot::draw_steps_by_k(&rows, dir)?) {
            eprintln!("wrote {p}");
        }
        return Ok(());
    }
    if let (Some(dir), true) = (&args.replot, args.scale) {
        let rows = gpfarm_bench::scale::read_csv(&dir.join("scale.csv"))?;
        let machine = std::fs::read_to_string(dir.join("machine.txt")).unwrap_or_default();
        return write_scale(&rows, dir, &machine);
    }
    if let (Some(dir), true) = (&args.replot, args.throughput) {
        let rows = gpfarm_bench::throughput::read_csv(&dir.join("throughput.csv"))?;
        let machine = std::fs::read_to_string(dir.join("machine.txt")).unwrap_or_default();
        write_throughput(&rows, dir, &machine)?;
        return Ok(());
    }
    if let Some(dir) = &args.replot {
        let rows = report::read_csv(&dir.join("bench.csv"))?;
        let machine = std::fs::read_to_string(dir.join("machine.txt")).unwrap_or_default();
        let description = std::fs::read_to_string(dir.join("description.txt")).unwrap_or_default();
        return write_reports(&rows, dir, &heading(&machine, &description));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.break_even {
        return break_even(&args, cuda, cores);
    }
    if args.param_steps {
        return param_steps(&args, cuda, cores);
    }
    if args.throughput {
        return throughput(&args, cuda, cores);
    }
    if args.scale {
        return scale(&args);
    }
    let mut config = if args.quick {
        BenchConfig::quick(args.out.clone())
    } else {
        BenchConfig::full(args.out.clone(), cores)
    };
    if args.quick {
        config.methods.retain(|m| m.worker_count().get() <= cores);
    }
    if let Some(p) = args.problems {
        config.problems = p;
    }
    if let Some(s) = args.sizes {
        config.sizes = s;
    }
    config.runs = args.runs.unwrap_or(config.runs);
    config.generations = args.generations.unwrap_or(config.generations);
    if let Some(m) = args.methods {
        config.methods = m;
    }
    config.per_unit = args.per_unit.unwrap_or(config.per_unit);
    config.guided = args.guided;
    config.flags = args.flags;
    config.link_flag_sets = match &args.link_flag_sets {
        Some(sets) => link_sets(sets),
        None => vec![args.link_flags],
    };
    if let Some(shapes) = args.shapes {
        config.shapes = shapes;
    }
    if let Some(routes) = args.routes {
        config.routes = routes;
    }
    config.arch = args.arch;
    config.cuda = cuda.map(Path::to_path_buf);
    config.nvcc_samples = args.nvcc_samples.unwrap_or(config.nvcc_samples);
    std::fs::create_dir_all(&config.out).with_context(|| format!("creating {}", config.out.display()))?;
    let machine = machine_description(cuda);
    std::fs::write(config.out.join("machine.txt"), &machine)?;
    eprint!("{machine}");
    let flags = if config.flags.is_empty() { "none".to_string() } else { config.flags.join(" ") };
    let link: Vec<String> = config
        .link_flag_sets
        .iter()
        .map(|set| if set.is_empty() { "none".to_string() } else { set.join(" ") })
        .collect();
    let link = link.join("; ");
    let routes: Vec<&str> = config.routes.iter().map(|r| r.as_str()).collect();
    let shapes: Vec<&str> = config.shapes.iter().map(|r| r.as_str()).collect();
    let units = match config.guided {
        None => format!("{} individuals per unit", config.per_unit),
        Some(w) => {
            format!("units formed as the engine does for {w} workers, each taken by the next free one")
        }
    };
    let description = format!(
        "Problems {:?}, sizes {:?}, {} runs x {} generations each, {units}, routes {routes:?}, \
         shapes {shapes:?}, extra NVRTC options: {flags}, nvJitLink options: {link}.\n",
        config.problems, config.sizes, config.runs, config.generations
    );
    std::fs::write(config.out.join("description.txt"), &description)?;
    let rows = gpfarm_bench::run(&config, |line| eprintln!("{line}"))?;
    write_reports(&rows, &config.out, &heading(&machine, &description))?;
    Ok(())
}

/// `gpfarm bench --break-even`.
fn break_even(args: &BenchArgs, cuda: Option<&Path>, cores: usize) -> Result<()> {
    use gpfarm_bench::breakeven;
    let config = breakeven::BreakEvenConfig {
        cases: args.cases.clone().unwrap_or_else(|| vec![64, 1_000, 10_000, 100_000, 1_000_000, 10_000_000]),
        depths: args.depths.clone().unwrap_or_else(|| vec![6, 12]),
        population: args.sizes.as_ref().and_then(|s| s.first().copied()).unwrap_or(300),
        builtins: !args.no_builtins,
        repeats: args.repeats.max(1),
        cpu_max_cases: 100_000,
        loops: args.loops.clone().unwrap_or_default(),
        loop_max_steps: args.loop_max_steps,
        arch: args.arch,
        tunings: args.tunings.clone().unwrap_or_default(),
        out: args.out.clone(),
    };
    let GpuBench { machine, workers, mut farm } = gpu_bench(args, cuda, cores, &config.out)?;
    let rows = breakeven::run(&config, farm.as_mut(), |line| eprintln!("{line}"))?;
    breakeven::write_csv(&rows, &config.out.join("breakeven.csv"))?;
    let heading = format!(
        "# Break-even: compiling against interpreting\n\n{machine}\nPopulation {} (generation 0 of seed 1, distinct programs that parse), {workers} compile daemons, \
         evaluation the median of {} repeats; generation ms = compile + load + one evaluation.",
        config.population, config.repeats
    );
    std::fs::write(config.out.join("breakeven.md"), breakeven::table(&rows, &heading))?;
    for p in plot::draw_crossover(&rows, &config.out)? {
        eprintln!("wrote {p}");
    }
    Ok(())
}

/// nvJitLink option sets as `--link-flag-sets` writes them: sets separated by `;`, options
/// within a set by spaces.
fn link_sets(sets: &str) -> Vec<Vec<String>> {
    sets.split(';').map(|set| set.split_whitespace().map(str::to_owned).collect()).collect()
}

/// `gpfarm bench --param-steps`.
fn param_steps(args: &BenchArgs, cuda: Option<&Path>, cores: usize) -> Result<()> {
    use gpfarm_bench::steps;
    let config = steps::StepsConfig {
        expressions: args.expressions.clone().unwrap_or_else(|| vec![10, 100, 1_000, 10_000, 100_000]),
        points: args.points.clone().unwrap_or_else(|| vec![362, 1_000, 10_000]),
        steps: args.steps.max(1),
        depth: 6,
        compiled_max_expressions: args.compiled_max,
        cpu_max_work: 200_000_000,
        arch: args.arch,
        fit: args.fit,
        ptx_links: match (&args.link_flag_sets, args.link_flags.is_empty()) {
            // An empty set (a stray `;`) would be nvJitLink's default under the name `ptx`.
            (Some(sets), _) => link_sets(sets).into_iter().filter(|set| !set.is_empty()).collect(),
            (None, false) => vec![args.link_flags.clone()],
            // Both of nvJitLink's own levels, so that the table shows where each pays.
            (None, true) => vec![vec!["-O0".into()], vec!["-O3".into()]],
        },
        out: args.out.clone(),
    };
    let GpuBench { machine, workers, mut farm } = gpu_bench(args, cuda, cores, &config.out)?;
    let rows = steps::run(&config, farm.as_mut(), |line| eprintln!("{line}"))?;
    if config.fit {
        steps::write_csv(&rows, &config.out.join("fit.csv"))?;
        return write_fit_steps(&rows, &config.out, &format!("{machine}compile daemons: {workers}\n"));
    }
    steps::write_csv(&rows, &config.out.join("steps.csv"))?;
    let md = steps::table(&rows, &steps_heading(&format!("{machine}compile daemons: {workers}\n"), &rows));
    std::fs::write(config.out.join("steps.md"), &md)?;
    println!("{md}");
    for p in
        plot::draw_steps(&rows, &config.out)?.into_iter().chain(plot::draw_steps_by_k(&rows, &config.out)?)
    {
        eprintln!("wrote {p}");
    }
    Ok(())
}

/// `gpfarm bench --throughput`.
fn throughput(args: &BenchArgs, cuda: Option<&Path>, cores: usize) -> Result<()> {
    use gpfarm_bench::throughput;
    use gpfarm_protocol::Route;
    let config = throughput::ThroughputConfig {
        nodes: args.nodes.clone().unwrap_or_else(|| vec![127]),
        populations: args.sizes.clone().unwrap_or_else(|| vec![1_000, 10_000, 100_000, 500_000]),
        cases: args.cases.clone().unwrap_or_else(|| vec![1_024, 4_096, 65_536, 1_000_000]),
        max_work: args.max_work,
        compiled_max: args.compiled_max,
        cpu_max_work: 2e10,
        routes: args
            .routes
            .clone()
            .unwrap_or_else(|| vec![Route::Interpreter, Route::Ptx, Route::Nvrtc, Route::Cpu]),
        repeats: args.repeats.max(1),
        seed: 1,
        arch: args.arch,
        out: args.out.clone(),
    };
    let GpuBench { machine, workers, mut farm } = gpu_bench(args, cuda, cores, &config.out)?;
    let rows = throughput::run(&config, farm.as_mut(), |line| eprintln!("{line}"))?;
    throughput::write_csv(&rows, &config.out.join("throughput.csv"))?;
    let machine = format!("{machine}compile daemons: {workers}\n");
    std::fs::write(config.out.join("machine.txt"), &machine)?;
    write_throughput(&rows, &config.out, &machine)
}

/// `gpfarm bench --scale`.
fn scale(args: &BenchArgs) -> Result<()> {
    use gpfarm_bench::scale;
    let config = scale::ScaleConfig {
        exe: std::env::current_exe().context("finding the gpfarm executable")?,
        populations: args.sizes.clone().unwrap_or_else(|| vec![1_000, 10_000, 100_000, 500_000, 1_000_000]),
        generations: args.generations.unwrap_or(5),
        cases: args.cases.as_ref().and_then(|c| c.first().copied()).unwrap_or(1_024),
        eval: args.eval.clone(),
        threads: args.threads,
        out: args.out.clone(),
    };
    std::fs::create_dir_all(&config.out).with_context(|| format!("creating {}", config.out.display()))?;
    let machine = machine_description(None);
    let machine =
        format!("{machine}threads: {}\n", config.threads.map_or("one per core".into(), |t| t.to_string()));
    std::fs::write(config.out.join("machine.txt"), &machine)?;
    eprint!("{machine}");
    let rows = scale::run(&config, |line| eprintln!("{line}"))?;
    scale::write_csv(&rows, &config.out.join("scale.csv"))?;
    write_scale(&rows, &config.out, &machine)
}

/// `scale.md` and the scale figure, from `rows` measured on `machine`.
fn write_scale(rows: &[gpfarm_bench::scale::ScaleRow], dir: &Path, machine: &str) -> Result<()> {
    let generations = rows.iter().map(|r| r.generation).max().unwrap_or(0);
    let heading = format!(
        "# Generations at scale: keijzer6-style runs, stage by stage\n\n{}\n\
         `gpfarm evolve --seed 1 --json` runs of {generations} generations after the initial one; a row is the \
         initial generation's time and the median of the later ones, stage by stage (breed includes parsing every \
         child for its size; admit is bytecode, keys and reuse lookups; rest is the driver's own work and waiting). \
         KiB per individual is the run's largest resident memory over the population.",
        machine.lines().map(|l| format!("- {l}\n")).collect::<String>()
    );
    let md = gpfarm_bench::scale::table(rows, &heading);
    std::fs::write(dir.join("scale.md"), &md)?;
    println!("{md}");
    for p in plot::draw_scale(rows, dir)? {
        eprintln!("wrote {p}");
    }
    Ok(())
}

/// `throughput.md` and the throughput figures, from `rows` measured on `machine`.
fn write_throughput(
    rows: &[gpfarm_bench::throughput::ThroughputRow],
    dir: &Path,
    machine: &str,
) -> Result<()> {
    let repeats = "the median of the timed evaluations (the first, which loads the code, untimed)";
    let heading = format!(
        "# Throughput: random full trees over + - * pdivf, Pagie-1 cases, fitness included\n\n{}\n\
         Node-evaluations per second = nodes x programs x cases / one evaluation ({repeats}), from the programs' \
         code on the host to their fitness on the host; the interpreter uploads the code every time. Preparation \
         (bytecode assembly on every core, or compiling on the farm and loading) is apart, in its own columns.",
        machine.lines().map(|l| format!("- {l}\n")).collect::<String>()
    );
    // FP32 operations per second of the GPU, where known, for the share of peak.
    let peak = if machine.contains("H100") || machine.contains("H200") { 6.7e13 } else { 0.0 };
    let md = gpfarm_bench::throughput::table(rows, &heading, peak);
    std::fs::write(dir.join("throughput.md"), &md)?;
    println!("{md}");
    for p in plot::draw_throughput(rows, dir)? {
        eprintln!("wrote {p}");
    }
    Ok(())
}

/// The heading of `steps.md`: the machine, then how the rows were measured.
/// The fitting steps' table (`fit.md`) and figure (`fit.svg`, `fit.png`).
fn write_fit_steps(rows: &[gpfarm_bench::steps::StepsRow], out: &Path, machine: &str) -> Result<()> {
    std::fs::write(out.join("machine.txt"), machine)?;
    let steps = rows.first().map_or(0, |r| r.steps);
    let heading = format!(
        "# Fitting steps: the interpreter's fitting kernels against kernels compiled for each structure\n\n{machine}\n\
         Expressions of sensible initialisation up to depth 6 that compiled fitting kernels take (straight-line, 5 or \
         more parameters); a step is one Levenberg–Marquardt linearization of every one of them (residuals, Jᵀr, JᵀJ \
         over all points, new values at every step), the median of {steps}; preparing is assembling bytecode, or \
         compiling the units on the farm and loading them."
    );
    let md = gpfarm_bench::steps::fit_table(rows, &heading);
    std::fs::write(out.join("fit.md"), &md)?;
    println!("{md}");
    for p in plot::draw_fit_steps(rows, out)? {
        eprintln!("wrote {p}");
    }
    Ok(())
}

fn steps_heading(machine: &str, rows: &[gpfarm_bench::steps::StepsRow]) -> String {
    let steps = rows.first().map_or(0, |r| r.steps);
    format!(
        "# Parameter steps: each structure prepared once, evaluated with new values at every step\n\n{machine}\n\
         Expressions of sensible initialisation up to depth 6 (distinct, with at least one free parameter), {steps} steps; \
         a route's ms = preparing (compile and load, or assemble) + {steps} x the median step; the CPU's step is the \
         median of at most 10; every step includes the fitness (RMSE) of every expression."
    )
}

/// What a GPU benchmark (--break-even, --param-steps) starts with: the machine described (and
/// written to `out/machine.txt`), and a farm of --daemons workers (default one per core).
struct GpuBench {
    machine: String,
    workers: usize,
    farm: Box<dyn gpfarm_client::Compiler>,
}

fn gpu_bench(args: &BenchArgs, cuda: Option<&Path>, cores: usize, out: &Path) -> Result<GpuBench> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let machine = machine_description(cuda);
    std::fs::write(out.join("machine.txt"), &machine)?;
    eprint!("{machine}");
    let workers = args.daemons.unwrap_or(cores);
    let options = gpfarm_client::CompileOptions::cubin(args.arch);
    let farm = crate::cli::compilers::build(
        "farm".parse::<gpfarm_client::CompilerSpec>()?,
        Some(workers),
        cuda,
        &options,
        &crate::cli::compilers::FarmSource::default(),
    )?;
    Ok(GpuBench { machine, workers, farm })
}
