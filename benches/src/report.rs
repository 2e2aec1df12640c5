//! Turning rows into the raw CSV (through `csv` and serde), medians with spread, the paper-shaped tables with the paper's
//! own numbers beside ours, and a fit of each method's cost as fixed per call plus per individual.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use crate::Row;

/// The paper's Tables 1-3 (300 individuals, 8-core-pair Xeon E5-2670, CUDA 8):
/// (method, ms per individual, total seconds).
pub fn paper_table(problem: &str) -> &'static [(&'static str, f64, f64)] {
    match problem {
        "search" => &[
            ("nvcc", 11.20, 3.36),
            ("inprocess", 7.76, 2.33),
            ("2 daemons", 3.81, 1.14),
            ("4 daemons", 2.53, 0.76),
            ("6 daemons", 2.23, 0.67),
            ("8 daemons", 2.13, 0.64),
        ],
        "keijzer6" => &[
            ("nvcc", 7.63, 2.29),
            ("inprocess", 4.14, 1.24),
            ("2 daemons", 2.92, 0.88),
            ("4 daemons", 2.45, 0.73),
            ("6 daemons", 2.20, 0.66),
            ("8 daemons", 2.25, 0.67),
        ],
        "multiplier5" => &[
            ("nvcc", 17.20, 5.16),
            ("inprocess", 13.29, 3.99),
            ("2 daemons", 6.15, 1.85),
            ("4 daemons", 3.23, 0.97),
            ("6 daemons", 2.42, 0.73),
            ("8 daemons", 2.17, 0.65),
        ],
        _ => &[],
    }
}

/// The columns of `bench.csv`, in order: [`Row`]'s fields, as serde names them (a test holds the
/// two together, and the committed results to both).
pub const COLUMNS: [&str; 21] = [
    "problem",
    "size",
    "run",
    "generation",
    "method",
    "flags",
    "route",
    "individuals",
    "units",
    "ok_units",
    "wall_ms",
    "ms_per_individual",
    "compile_ms",
    "jit_ms",
    "busiest_ms",
    "overhead_ms",
    "write_ms",
    "read_ms",
    "link_flags",
    "shape",
    "partition",
];

/// Writes every row as CSV, header first (also when there are no rows).
pub fn write_csv(rows: &[Row], path: &Path) -> Result<()> {
    let write = || -> Result<(), csv::Error> {
        let mut out = csv::WriterBuilder::new().has_headers(false).from_path(path)?;
        out.write_record(COLUMNS)?;
        for r in rows {
            out.serialize(r)?;
        }
        out.flush()?;
        Ok(())
    };
    write().with_context(|| format!("writing {}", path.display()))
}

/// Reads rows written by [`write_csv`]; columns are matched by name.
pub fn read_csv(path: &Path) -> Result<Vec<Row>> {
    let read = || -> Result<Vec<Row>, csv::Error> { csv::Reader::from_path(path)?.deserialize().collect() };
    read().with_context(|| format!("reading {}", path.display()))
}

/// Median and quartiles of some values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// 25th percentile.
    pub p25: f64,
    /// 75th percentile.
    pub p75: f64,
    /// Number of values.
    pub n: usize,
}

/// Median and quartiles (linear interpolation); `None` for no values.
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| {
        let x = p * (v.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
    };
    Some(Spread { median: q(0.5), p25: q(0.25), p75: q(0.75), n: v.len() })
}

/// Least-squares fit `total_ms = fixed + per_individual * n`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Fixed cost per call, ms.
    pub fixed_ms: f64,
    /// Cost per individual, ms.
    pub per_individual_ms: f64,
    /// Coefficient of determination.
    pub r2: f64,
}

/// Population sizes a cost fit needs at least: the individuals of one size vary only by the
/// invalid ones, and a line through that spread is noise (a `--sizes 300` run fitted a negative
/// cost per individual with R² 0.001).
pub const MIN_FIT_SIZES: usize = 3;

/// The population sizes measured for `problem`, ascending.
fn distinct_sizes(rows: &[Row], problem: &str) -> Vec<usize> {
    let sizes: std::collections::BTreeSet<usize> =
        rows.iter().filter(|r| r.problem == problem).map(|r| r.size).collect();
    sizes.into_iter().collect()
}

/// Fits a line through (x, y); `None` with fewer than two distinct x.
pub fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    if points.len() < 2 || sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ss_tot: f64 = points.iter().map(|(_, y)| (y - my).powi(2)).sum();
    let ss_res: f64 = points.iter().map(|(x, y)| (y - intercept - slope * x).powi(2)).sum();
    let r2 = if ss_tot > 0.0 { 1.0 - ss_res / ss_tot } else { 1.0 };
    Some(Fit { fixed_ms: intercept, per_individual_ms: slope, r2 })
}

type Key = (String, usize, String);

/// The problems in `rows`, each once, in order of first appearance.
pub fn problems(rows: &[Row]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        if !out.contains(&r.problem) {
            out.push(r.problem.clone());
        }
    }
    out
}

/// Rows grouped by (problem, size, method).
pub fn group(rows: &[Row]) -> BTreeMap<Key, Vec<&Row>> {
    let mut g: BTreeMap<Key, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        g.entry((r.problem.clone(), r.size, r.label())).or_default().push(r);
    }
    g
}

fn method_order(m: &str) -> (usize, usize, &str) {
    // A route, options or shape after the compiler (`farm:16 ptx -O0 switch`) sorts after the
    // same compiler's plain NVRTC row.
    let (m, route) = m.split_once(' ').unwrap_or((m, ""));
    let (name, k) = m.split_once(':').map_or((m, 0), |(n, k)| (n, k.parse().unwrap_or(0)));
    let rank = match name {
        "nvcc" => 0,
        "inprocess" => 1,
        "threads" => 2,
        "farm" => 3,
        _ => 4,
    };
    (rank, k, route)
}

/// The markdown report: per problem, the paper-shaped table at the largest size with the paper's
/// numbers, then the cost fits.
pub fn tables(rows: &[Row], heading: &str) -> String {
    let groups = group(rows);
    let mut md = format!("{heading}\n\n");
    let problems = problems(rows);
    for problem in &problems {
        let Some(size) = rows.iter().filter(|r| &r.problem == problem).map(|r| r.size).max() else {
            continue;
        };
        let mut methods: Vec<String> =
            groups.keys().filter(|(p, s, _)| p == problem && *s == size).map(|(_, _, m)| m.clone()).collect();
        methods.sort_by(|a, b| method_order(a).cmp(&method_order(b)));
        let median_total = |m: &str| {
            groups
                .get(&(problem.clone(), size, m.to_string()))
                .and_then(|g| spread(&g.iter().map(|r| r.wall_ms).collect::<Vec<_>>()))
                .map(|s| s.median)
        };
        let inproc = median_total("inprocess");
        let nvcc = median_total("nvcc");
        let _ = writeln!(md, "### {problem}, population {size}\n");
        let _ = writeln!(
            md,
            "| method | ms per individual, median (IQR) | total s, median | vs in-process | vs nvcc | farm overhead ms | samples |"
        );
        let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        for m in &methods {
            let g = &groups[&(problem.clone(), size, m.clone())];
            let per = spread(&g.iter().map(|r| r.ms_per_individual).collect::<Vec<_>>());
            let total = spread(&g.iter().map(|r| r.wall_ms).collect::<Vec<_>>());
            let over = spread(&g.iter().map(|r| r.overhead_ms).collect::<Vec<_>>());
            let (Some(per), Some(total)) = (per, total) else { continue };
            let ratio = |base: Option<f64>| base.map_or("-".into(), |b| format!("{:.2}x", b / total.median));
            let overhead = if m.starts_with("farm") {
                over.map_or("-".into(), |o| format!("{:.2}", o.median))
            } else {
                "-".into()
            };
            let _ = writeln!(
                md,
                "| {m} | {:.3} ({:.3}-{:.3}) | {:.3} | {} | {} | {overhead} | {} |",
                per.median,
                per.p25,
                per.p75,
                total.median / 1000.0,
                ratio(inproc),
                ratio(nvcc),
                per.n
            );
        }
        let paper = paper_table(problem);
        if !paper.is_empty() {
            let _ = writeln!(md, "\nThe paper (300 individuals, CUDA 8, 2x Xeon E5-2670):\n");
            let _ = writeln!(md, "| method | ms per individual | total s | vs in-process | vs nvcc |");
            let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: |");
            let (pin, pnv) = (paper[1].2, paper[0].2);
            for (m, per, total) in paper {
                let _ = writeln!(
                    md,
                    "| {m} | {per:.2} | {total:.2} | {:.2}x | {:.2}x |",
                    pin / total,
                    pnv / total
                );
            }
        }
        let sizes = distinct_sizes(rows, problem);
        if sizes.len() < MIN_FIT_SIZES {
            let _ = writeln!(
                md,
                "\nNo cost fit: a line fixed + per individual x n needs at least {MIN_FIT_SIZES} population \
                 sizes, and this run has {} ({}).",
                sizes.len(),
                sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
            );
            md.push('\n');
            continue;
        }
        let _ = writeln!(md, "\nCost fit over all sizes, wall ms = fixed + per individual x n:\n");
        let _ = writeln!(md, "| method | fixed ms per call | ms per individual | R² | samples |");
        let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: |");
        for m in &methods {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| &r.problem == problem && &r.label() == m)
                .map(|r| (r.individuals as f64, r.wall_ms))
                .collect();
            if let Some(f) = fit(&pts) {
                let _ = writeln!(
                    md,
                    "| {m} | {:.1} | {:.3} | {:.3} | {} |",
                    f.fixed_ms,
                    f.per_individual_ms,
                    f.r2,
                    pts.len()
                );
            }
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use gpfarm_protocol::{Route, Shape};

    use super::*;

    #[test]
    fn a_fit_recovers_a_known_line() {
        let pts: Vec<(f64, f64)> = (1..10).map(|x| (x as f64, 40.0 + 0.5 * x as f64)).collect();
        let f = fit(&pts).unwrap();
        assert!((f.fixed_ms - 40.0).abs() < 1e-9 && (f.per_individual_ms - 0.5).abs() < 1e-9);
        assert!((f.r2 - 1.0).abs() < 1e-12);
    }

    fn row(size: usize, individuals: usize, wall_ms: f64) -> Row {
        Row {
            problem: "keijzer6".into(),
            size,
            run: 1,
            generation: 0,
            method: "farm:2".into(),
            flags: String::new(),
            route: Route::Nvrtc,
            shape: Shape::Kernels,
            partition: "fixed".into(),
            link_flags: String::new(),
            individuals,
            units: 1,
            ok_units: 1,
            wall_ms,
            ms_per_individual: wall_ms / individuals as f64,
            compile_ms: wall_ms,
            jit_ms: 0.0,
            busiest_ms: wall_ms,
            overhead_ms: 0.0,
            write_ms: 0.0,
            read_ms: 0.0,
        }
    }

    #[test]
    fn one_population_size_gets_no_cost_fit_and_says_why() {
        // Individuals of one size differ only by the invalid ones: a line through them is noise.
        let rows = vec![row(300, 291, 640.0), row(300, 296, 610.0), row(300, 288, 655.0)];
        let md = tables(&rows, "quick");
        assert!(!md.contains("Cost fit over all sizes"), "{md}");
        assert!(md.contains("No cost fit") && md.contains("this run has 1 (300)"), "{md}");
        // Three sizes are enough.
        let rows = vec![row(20, 20, 60.0), row(100, 98, 100.0), row(300, 291, 200.0)];
        let md = tables(&rows, "sizes");
        assert!(md.contains("Cost fit over all sizes") && md.contains("| farm:2 |"), "{md}");
    }

    #[test]
    fn rows_survive_a_round_trip_through_csv() {
        let row = Row {
            problem: "keijzer6".into(),
            size: 300,
            run: 2,
            generation: 1,
            method: "farm:16".into(),
            flags: "--use_fast_math -default-device".into(),
            route: Route::Nvrtc,
            shape: Shape::Kernels,
            partition: "fixed".into(),
            link_flags: String::new(),
            individuals: 291,
            units: 30,
            ok_units: 30,
            wall_ms: 64.5,
            ms_per_individual: 0.2216,
            compile_ms: 700.25,
            jit_ms: 0.0,
            busiest_ms: 63.125,
            overhead_ms: 1.375,
            write_ms: 0.25,
            read_ms: 0.5,
        };
        let path = std::env::temp_dir().join(format!("gpfarm-bench-{}.csv", std::process::id()));
        write_csv(std::slice::from_ref(&row), &path).unwrap();
        let back = read_csv(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(back, vec![row]);
    }

    #[test]
    fn the_columns_are_the_rows_fields_in_order() {
        let mut out = csv::Writer::from_writer(Vec::new());
        out.serialize(Row {
            problem: String::new(),
            size: 0,
            run: 0,
            generation: 0,
            method: String::new(),
            flags: String::new(),
            route: Route::Nvrtc,
            shape: Shape::Kernels,
            partition: "fixed".into(),
            link_flags: String::new(),
            individuals: 0,
            units: 0,
            ok_units: 0,
            wall_ms: 0.0,
            ms_per_individual: 0.0,
            compile_ms: 0.0,
            jit_ms: 0.0,
            busiest_ms: 0.0,
            overhead_ms: 0.0,
            write_ms: 0.0,
            read_ms: 0.0,
        })
        .unwrap();
        let text = String::from_utf8(out.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next(), Some(COLUMNS.join(",").as_str()));
    }

    #[test]
    fn committed_results_read_back() {
        // The measured results live at the workspace root, beside the crates.
        let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/2026-11-22-h100");
        let rows = read_csv(&results.join("exact/bench.csv")).unwrap();
        assert_eq!(rows.len(), 588);
        assert_eq!(
            rows[0],
            Row {
                problem: "search".into(),
                size: 20,
                run: 1,
                generation: 0,
                method: "nvcc".into(),
                flags: String::new(),
                route: Route::Nvrtc,
                shape: Shape::Kernels,
                partition: "fixed".into(),
                link_flags: String::new(),
                individuals: 19,
                units: 2,
                ok_units: 2,
                wall_ms: 1372.584,
                ms_per_individual: 72.2413,
                compile_ms: 1372.282,
                jit_ms: 0.0,
                busiest_ms: 1372.584,
                overhead_ms: 0.0,
                write_ms: 0.0,
                read_ms: 0.0,
            }
        );
        let fast = read_csv(&results.join("fast/bench.csv")).unwrap();
        assert_eq!(fast.len(), 72);
        assert_eq!(fast[0].flags, "--use_fast_math", "quoted flags lose their quotes");
        for dir in ["ofast", "exact/inprocess-after-nvcc.csv", "driver-cache/bench/exact"] {
            let path = results.join(dir);
            let path = if path.is_dir() { path.join("bench.csv") } else { path };
            assert!(!read_csv(&path).unwrap().is_empty(), "{}", path.display());
        }
    }

    #[test]
    fn timings_are_written_to_the_microsecond() {
        let row = Row {
            problem: "search".into(),
            size: 20,
            run: 1,
            generation: 0,
            method: "threads:2".into(),
            flags: "--flag=\"a,b\"".into(),
            route: Route::Nvrtc,
            shape: Shape::Kernels,
            partition: "fixed".into(),
            link_flags: String::new(),
            individuals: 3,
            units: 1,
            ok_units: 1,
            wall_ms: 10.0 / 3.0,
            ms_per_individual: 10.0 / 9.0,
            compile_ms: 1.0005,
            jit_ms: 0.0,
            busiest_ms: 2.0 / 3.0,
            overhead_ms: 0.0,
            write_ms: 0.0,
            read_ms: 0.0,
        };
        let path = std::env::temp_dir().join(format!("gpfarm-bench-round-{}.csv", std::process::id()));
        write_csv(std::slice::from_ref(&row), &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let back = read_csv(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let line = text.lines().nth(1).unwrap();
        assert!(line.contains(",3.333,1.1111,1.001,0.0,0.667,"), "{line}");
        assert_eq!(back[0].flags, row.flags, "a flag with a quote and a comma survives");
        assert_eq!(back[0].wall_ms, 3.333);
    }

    #[test]
    fn an_empty_result_still_has_its_header() {
        let path = std::env::temp_dir().join(format!("gpfarm-bench-empty-{}.csv", std::process::id()));
        write_csv(&[], &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let back = read_csv(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(text, format!("{}\n", COLUMNS.join(",")));
        assert_eq!(back, Vec::<Row>::new());
    }

    #[test]
    fn quartiles_interpolate() {
        let s = spread(&[4.0, 1.0, 3.0, 2.0, 5.0]).unwrap();
        assert_eq!((s.median, s.p25, s.p75, s.n), (3.0, 2.0, 4.0, 5));
        assert!(spread(&[]).is_none());
    }
}
