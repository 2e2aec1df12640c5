//! Generations at scale (`gpfarm bench --scale`): whole `gpfarm evolve` runs of a keijzer6-style
//! problem over `--cases` cases (x = 1, 2, ..., n; the target the harmonic number of x) at
//! populations from 10^3 to 10^6, each a child process, and what each generation cost, stage by
//! stage, from its JSON records: breeding (which parses every child to measure its size),
//! admitting (bytecode, keys, reuse), evaluating, fitting, and the rest (the driver's own
//! bookkeeping, statistics, waiting). Also the largest resident memory of each run, so memory
//! per individual is measured, not guessed.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::shared::median;

/// What to measure.
#[derive(Debug, Clone)]
pub struct ScaleConfig {
    /// The `gpfarm` executable that runs the generations.
    pub exe: PathBuf,
    /// Populations.
    pub populations: Vec<usize>,
    /// Generations after the initial one.
    pub generations: usize,
    /// Test cases of the problem.
    pub cases: usize,
    /// `--eval` of the runs: auto, cpu or gpu.
    pub eval: String,
    /// `--threads` of the runs (`None`: one per core).
    pub threads: Option<usize>,
    /// Where the problem, CSV, table and plot go.
    pub out: PathBuf,
}

/// One generation of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleRow {
    /// Individuals per generation.
    pub population: usize,
    /// The generation (0 is the initial population).
    pub generation: usize,
    /// cpu or gpu.
    pub evaluator: String,
    /// Wall time of the generation.
    pub generation_ms: f64,
    /// Breeding (children parsed for their sizes included).
    pub breed_ms: f64,
    /// Admitting: bytecode, keys, reuse and duplicate lookups.
    pub admit_ms: f64,
    /// Evaluating.
    pub eval_ms: f64,
    /// Fitting free parameters.
    pub fit_ms: f64,
    /// The rest: `generation - breed - admit - eval - fit` (never below 0).
    pub rest_ms: f64,
    /// Distinct phenotypes.
    pub unique: usize,
    /// Individuals evaluated (not reused from an earlier generation).
    pub evaluated: usize,
    /// Best fitness.
    pub best: f64,
    /// The run's largest resident memory, MiB.
    pub max_rss_mib: f64,
}

/// Writes the keijzer6-style problem of `cases` cases into `dir` (the built-in keijzer6's
/// grammar and template).
pub fn write_problem(dir: &Path, cases: usize) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let toml = format!(
        "name = \"keijzer6-{cases}\"\ndescription = \"Keijzer-6, f(x) = sum of 1/i for i = 1..x, on x = 1, 2, ..., {cases}.\"\n\
         start = \"e\"\nkind = \"expression\"\nfitness = \"rmse\"\n\n[[inputs]]\nname = \"x\"\ntype = \"float\"\n\n\
         [[outputs]]\nname = \"y\"\ntype = \"float\"\n\n[target]\ntype = \"float\"\n"
    );
    let sources = gpfarm_gp::problem::builtin::sources("keijzer6").context("the built-in keijzer6")?;
    let mut h = 0.0f64;
    let rows: Vec<String> = (1..=cases)
        .map(|x| {
            h += 1.0 / x as f64;
            format!("{{\"x\": {:?}, \"target\": {:?}}}", x as f32, h as f32)
        })
        .collect();
    std::fs::write(dir.join("problem.toml"), toml)?;
    std::fs::write(dir.join("grammar.bnf"), sources.grammar)?;
    std::fs::write(dir.join("template.cu"), sources.template)?;
    std::fs::write(dir.join("cases.json"), format!("[\n  {}\n]\n", rows.join(",\n  ")))?;
    Ok(())
}

/// The largest resident memory of the children waited for so far, MiB.
fn children_max_rss_mib() -> f64 {
    // SAFETY: getrusage writes the struct it is given and reads nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return f64::NAN;
    }
    usage.ru_maxrss as f64 / 1024.0
}

/// Runs every population; `progress` hears one line per generation.
pub fn run(config: &ScaleConfig, mut progress: impl FnMut(&str)) -> Result<Vec<ScaleRow>> {
    let dir = config.out.join(format!("keijzer6-{}", config.cases));
    write_problem(&dir, config.cases)?;
    let mut populations = config.populations.clone();
    // Smallest first: the children's largest memory only grows, so each run's is its own.
    populations.sort();
    let mut rows = Vec::new();
    for &population in &populations {
        let mut cmd = Command::new(&config.exe);
        cmd.arg("evolve")
            .arg("--problem-dir")
            .arg(&dir)
            .args(["--population", &population.to_string()])
            .args(["--generations", &config.generations.to_string()])
            .args(["--seed", "1", "--json", "--eval", &config.eval]);
        if let Some(t) = config.threads {
            cmd.args(["--threads", &t.to_string()]);
        }
        let mut child =
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("starting gpfarm evolve")?;
        let stdout = child.stdout.take().context("the run's output")?;
        let mut run_rows = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line?;
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if v.get("summary").is_some() || v.get("generation").is_none() {
                continue;
            }
            let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
            let (generation_ms, breed_ms, admit_ms, eval_ms, fit_ms) =
                (f("generation_ms"), f("breed_ms"), f("admit_ms"), f("eval_ms"), f("fit_ms"));
            let row = ScaleRow {
                population,
                generation: f("generation") as usize,
                evaluator: v.get("evaluator").and_then(|e| e.as_str()).unwrap_or("").to_owned(),
                generation_ms,
                breed_ms,
                admit_ms,
                eval_ms,
                fit_ms,
                rest_ms: (generation_ms - breed_ms - admit_ms - eval_ms - fit_ms).max(0.0),
                unique: f("unique") as usize,
                evaluated: v
                    .pointer("/individuals/evaluated")
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(0.0) as usize,
                best: f("best"),
                max_rss_mib: f64::NAN,
            };
            progress(&format!(
                "population {population} generation {}: {:.1} ms (breed {:.1}, admit {:.1}, eval {:.1}, fit {:.1}, rest {:.1})",
                row.generation,
                row.generation_ms,
                row.breed_ms,
                row.admit_ms,
                row.eval_ms,
                row.fit_ms,
                row.rest_ms
            ));
            run_rows.push(row);
        }
        let status = child.wait()?;
        if !status.success() {
            bail!("gpfarm evolve at population {population} failed: {status}");
        }
        let rss = children_max_rss_mib();
        for r in &mut run_rows {
            r.max_rss_mib = rss;
        }
        rows.extend(run_rows);
    }
    Ok(rows)
}

/// Writes `rows` as CSV.
pub fn write_csv(rows: &[ScaleRow], path: &Path) -> Result<()> {
    crate::shared::write_rows(rows, path)
}

/// Reads rows written by [`write_csv`].
pub fn read_csv(path: &Path) -> Result<Vec<ScaleRow>> {
    crate::shared::read_rows(path)
}

/// Per population: the initial generation, then the median of the later ones, stage by stage.
pub fn summary(rows: &[ScaleRow]) -> Vec<(usize, ScaleRow)> {
    let mut populations: Vec<usize> = rows.iter().map(|r| r.population).collect();
    populations.sort();
    populations.dedup();
    populations
        .into_iter()
        .filter_map(|p| {
            let later: Vec<&ScaleRow> =
                rows.iter().filter(|r| r.population == p && r.generation > 0).collect();
            let first = later.first()?;
            let m = |f: fn(&ScaleRow) -> f64| median(later.iter().map(|r| f(r)).collect());
            Some((
                p,
                ScaleRow {
                    population: p,
                    generation: later.len(),
                    evaluator: first.evaluator.clone(),
                    generation_ms: m(|r| r.generation_ms),
                    breed_ms: m(|r| r.breed_ms),
                    admit_ms: m(|r| r.admit_ms),
                    eval_ms: m(|r| r.eval_ms),
                    fit_ms: m(|r| r.fit_ms),
                    rest_ms: m(|r| r.rest_ms),
                    unique: m(|r| r.unique as f64) as usize,
                    evaluated: m(|r| r.evaluated as f64) as usize,
                    best: later.iter().map(|r| r.best).fold(f64::INFINITY, f64::min),
                    max_rss_mib: first.max_rss_mib,
                },
            ))
        })
        .collect()
}

/// A markdown table: per population, the initial generation's time and the later generations'
/// median, stage by stage, and memory.
pub fn table(rows: &[ScaleRow], heading: &str) -> String {
    let mut s = format!(
        "{heading}\n\n| population | evaluator | generation 0 ms | ms per generation (median) | breed | admit | eval | fit | rest | distinct | evaluated | max RSS MiB | KiB per individual |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    for (p, m) in summary(rows) {
        let first = rows
            .iter()
            .find(|r| r.population == p && r.generation == 0)
            .map_or(f64::NAN, |r| r.generation_ms);
        s.push_str(&format!(
            "| {p} | {} | {first:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {:.0} | {:.2} |\n",
            m.evaluator,
            m.generation_ms,
            m.breed_ms,
            m.admit_ms,
            m.eval_ms,
            m.fit_ms,
            m.rest_ms,
            m.unique,
            m.evaluated,
            m.max_rss_mib,
            m.max_rss_mib * 1024.0 / p as f64,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_problem_loads_with_its_cases_and_the_summary_takes_medians() {
        let dir = tempfile::tempdir().unwrap();
        write_problem(dir.path(), 100).unwrap();
        let problem = gpfarm_gp::Problem::load(dir.path()).unwrap();
        assert_eq!(problem.cases().len(), 100);
        let row = |generation, ms| ScaleRow {
            population: 10,
            generation,
            evaluator: "cpu".into(),
            generation_ms: ms,
            breed_ms: 1.0,
            admit_ms: 1.0,
            eval_ms: 1.0,
            fit_ms: 0.0,
            rest_ms: ms - 3.0,
            unique: 5,
            evaluated: 5,
            best: ms,
            max_rss_mib: 64.0,
        };
        let rows = vec![row(0, 100.0), row(1, 10.0), row(2, 30.0), row(3, 20.0)];
        let s = summary(&rows);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1.generation_ms, 20.0);
        assert_eq!(s[0].1.best, 10.0);
        let md = table(&rows, "# t");
        assert!(md.contains("| 10 | cpu | 100.0 | 20.0 |"), "{md}");
    }
}
