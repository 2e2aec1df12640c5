//! Times CPU fits of programs of 4 to 128 free parameters (sums of `p[a] * xi * sinf(p[b] *
//! xj)`) with 10 Levenberg–Marquardt iterations over a problem directory's cases: the best of
//! five fits each, as CSV on stdout (parameters, cases, ms, runs, sum of squares).
//!
//! `cargo run --release -p gpfarm-gp --example fit_sizes -- DIR` (a Friedman-1 directory, such
//! as `examples/friedman1` or one written by its `make_cases.py`).

use std::time::Instant;

use gpfarm_gp::{FitSettings, Phenotype, Problem, Program, fit};

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: fit_sizes PROBLEM_DIR");
        std::process::exit(2);
    };
    let problem = match Problem::load(std::path::Path::new(&dir)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fit_sizes: {e}");
            std::process::exit(1);
        }
    };
    println!("params,cases,ms,runs,sse");
    for terms in [2usize, 8, 32, 64] {
        let text = (0..terms)
            .map(|t| {
                format!("p[{}] * x{} * sinf(p[{}] * x{})", 2 * t, t % 5 + 1, 2 * t + 1, (t * 3 + 1) % 5 + 1)
            })
            .collect::<Vec<_>>()
            .join(" + ");
        let program = Program::parse(&problem, &Phenotype::new(&text)).expect("a Friedman-1 program");
        let np = program.params();
        let start: Vec<f32> = (0..np).map(|k| 0.5 + 0.1 * (k % 7) as f32).collect();
        let settings = FitSettings { iterations: 10, restarts: 0 };
        let (mut best, mut fitted) = (f64::INFINITY, None);
        for _ in 0..5 {
            let t = Instant::now();
            fitted = fit(&problem, &program, &start, &settings, 1);
            best = best.min(t.elapsed().as_secs_f64());
        }
        let f = fitted.expect("fittable");
        println!("{np},{},{:.3},{},{:e}", problem.cases().len(), best * 1e3, f.runs, f.sse);
    }
}
