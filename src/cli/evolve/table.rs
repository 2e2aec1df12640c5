//! The table `gpfarm evolve` prints without `--json`: a header, a row per generation, a footer.

use gpfarm_evolve::{Engine, GenerationRecord, Summary};

use super::EvolveArgs;

/// A fitness value for a table column: fixed point when readable, scientific otherwise.
fn number(v: f64) -> String {
    if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-4) { format!("{v:.4e}") } else { format!("{v:.6}") }
}

pub(super) fn header(args: &EvolveArgs, engine: &Engine, compiler: &str) {
    let options = engine.options();
    let on_cpu = engine.route() == gpfarm_protocol::Route::Cpu;
    let target = if on_cpu {
        String::new()
    } else if !engine.needs_daemons() {
        ", interpreted: nothing compiled per individual".to_owned()
    } else {
        let compile = engine.compile_options();
        // The PTX route's link options (chosen by its first generation unless given).
        let linked = if engine.route() == gpfarm_protocol::Route::Ptx && !compile.link_flags.is_empty() {
            format!(" linked at {}", compile.link_flags.join(" "))
        } else {
            String::new()
        };
        format!(
            ", compiling for {} by the {} route{linked}, {}",
            compile.arch,
            engine.route(),
            match engine.shape() {
                gpfarm_protocol::Shape::Switch => "one switch kernel per unit",
                gpfarm_protocol::Shape::Kernels => "one kernel per individual",
            }
        )
    };
    // On the CPU nothing is compiled: the line says what runs, not which compiler would.
    let place = if on_cpu {
        "the CPU (the reference evaluator; nothing is compiled)".to_owned()
    } else {
        compiler.to_owned()
    };
    println!(
        "{} on {place}: population {}, {} generations, seed {}, evaluator {}{target}{}{}{}",
        engine.problem().name(),
        args.spec.population,
        args.spec.generations,
        args.spec.seed,
        engine.gpu_name().map_or("cpu".to_string(), |g| format!("gpu ({g})")),
        if args.spec.no_cache { ", no cache" } else { "" },
        if args.spec.no_overlap { ", no overlap" } else { "" },
        options.disk_cache.as_ref().map_or(String::new(), |d| format!(", disk cache {}", d.display())),
    );
    if engine.gpu_name().is_some() || engine.options().route.is_some() {
        println!("route {} ({})", engine.route(), engine.route_reason());
    }
    println!(
        "{:>w$} {:>12} {:>12} {:>7} {:>6} {:>6} {:>6} {:>9} {:>10} {:>9} {:>8}",
        if options.islands > 1 { "isl:gen" } else { "gen" },
        "best",
        "median",
        "invalid",
        "uniq",
        "new",
        "hits",
        "gen ms",
        "compile s",
        "crit ms",
        "eval ms",
        w = if options.islands > 1 { 7 } else { 4 }
    );
}

/// A generation's row; with `islands`, its island before its generation.
pub(crate) fn row(r: &GenerationRecord, islands: bool) {
    let i = &r.individuals;
    let (generation, w) =
        if islands { (format!("{}:{}", r.island, r.generation), 7) } else { (r.generation.to_string(), 4) };
    println!(
        "{generation:>w$} {:>12} {:>12} {:>7} {:>6} {:>6} {:>6} {:>9.1} {:>10.2} {:>9.1} {:>8.1}",
        number(r.best),
        r.median.map_or("-".into(), number),
        r.invalid,
        r.unique,
        i.compiled,
        i.reused + i.duplicates + i.disk_hits,
        r.generation_ms,
        r.compile.busy_ms / 1000.0,
        r.critical_path.compile_ms,
        r.eval_ms
    );
    if i.failed + i.crash_retried > 0 {
        println!(
            "     {} failed to compile (worst fitness); {} crashed NVRTC and were compiled again ({} used)",
            i.failed, i.crash_retried, i.crash_retry_used
        );
    }
}

pub(super) fn footer(s: &Summary) {
    let t = &s.totals;
    let generations = s.stopped_after.unwrap_or(s.generations) + 1;
    println!(
        "best fitness {} after {} generations: {:.1} s, {:.0} ms per generation; {} of {} individuals \
         compiled ({} reused, {} merged, {} from disk), {:.1} s of compile time, {:.2} s evaluating",
        s.best_fitness,
        generations - 1,
        t.wall_s,
        t.wall_s * 1000.0 / generations as f64,
        t.compiled,
        t.individuals_evaluated,
        t.reused,
        t.duplicates,
        t.disk_hits,
        t.compile_busy_s,
        t.eval_s,
    );
    if t.failed + t.crash_retried > 0 {
        println!(
            "{} individuals failed to compile (worst fitness); {} crashed NVRTC and were compiled again \
             ({} used)",
            t.failed, t.crash_retried, t.crash_retry_used
        );
    }
    if let Some(dir) = &t.failed_units_dir {
        println!("units that did not compile are in {}", dir.display());
    }
    if let Some(g) = s.stopped_after {
        println!("--max-time ended the run after generation {g} of {}", s.generations);
    }
    if s.islands > 1 {
        let best: Vec<String> = s.island_best.iter().map(|&b| number(b)).collect();
        println!("{} islands, best of each: {}", s.islands, best.join(", "));
    }
    println!("best individual:\n{}", s.best_phenotype.as_deref().unwrap_or("<invalid>"));
    if !s.front.is_empty() {
        println!(
            "size-{} front ({} models; size is nodes of the syntax tree, simplified where it shrinks):",
            if s.direction == Some(gpfarm_gp::Direction::Higher) { "fitness" } else { "error" },
            s.front.len()
        );
        for m in &s.front {
            let mark = if s.chosen.as_ref() == Some(m) { " <- chosen" } else { "" };
            let size = m.shown_size();
            let text = m.formula.as_deref().unwrap_or(&m.expression);
            println!("{size:>6}  {:<12}  {text}{mark}", number(m.fitness));
        }
        if let Some(c) = &s.chosen {
            println!("chosen model, as it ran:\n{}", c.expression);
            if let Some(simplified) = &c.simplified {
                println!("simplified:\n{simplified}");
            }
        }
    }
}
