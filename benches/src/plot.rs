//! Plots like the paper's figures: time per individual by population size per method, and the
//! speedup of daemons and threads by worker count, as SVG and PNG.

use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::Row;
use crate::report::{group, spread};

fn series(rows: &[Row], problem: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let groups = group(rows);
    let mut methods: Vec<String> = rows.iter().filter(|r| r.problem == problem).map(|r| r.label()).collect();
    methods.sort();
    methods.dedup();
    methods
        .into_iter()
        .map(|m| {
            let pts = groups
                .iter()
                .filter(|((p, _, mm), _)| p == problem && *mm == m)
                .filter_map(|((_, size, _), g)| {
                    spread(&g.iter().map(|r| r.ms_per_individual).collect::<Vec<_>>())
                        .map(|s| (*size as f64, s.median))
                })
                .collect();
            (m, pts)
        })
        .collect()
}

fn per_individual<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[Row],
    problem: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let data = series(rows, problem);
    let max_x = data.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(1.0, f64::max);
    let (min_y, max_y) = data
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold((f64::INFINITY, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let min_y = if min_y.is_finite() { (min_y / 2.0).max(1e-3) } else { 1e-3 };
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{problem}: compile time per individual"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_x * 1.05, (min_y..max_y.max(min_y) * 2.0).log_scale())?;
    chart.configure_mesh().x_desc("population size").y_desc("ms per individual (median)").draw()?;
    for (i, (m, pts)) in data.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(m.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn speedup<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, rows: &[Row], problem: &str) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let Some(size) = rows.iter().filter(|r| r.problem == problem).map(|r| r.size).max() else {
        return Ok(());
    };
    let groups = group(rows);
    let median = |m: &str| {
        groups
            .get(&(problem.to_string(), size, m.to_string()))
            .and_then(|g| spread(&g.iter().map(|r| r.wall_ms).collect::<Vec<_>>()))
            .map(|s| s.median)
    };
    let Some(base) = median("inprocess") else { return Ok(()) };
    let kinds = ["farm", "threads"];
    let lines: Vec<(&str, Vec<(f64, f64)>)> = kinds
        .iter()
        .map(|kind| {
            let pts = [1usize, 2, 4, 8, 16, 32, 64]
                .iter()
                .filter_map(|k| median(&format!("{kind}:{k}")).map(|t| (*k as f64, base / t)))
                .collect();
            (*kind, pts)
        })
        .collect();
    let max_k = lines.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(1.0, f64::max);
    let max_s = lines.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{problem}: speedup over in-process, population {size}"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(45)
        .build_cartesian_2d(0.0..max_k * 1.05, 0.0..max_s.max(max_k) * 1.05)?;
    chart.configure_mesh().x_desc("daemons or threads").y_desc("speedup").draw()?;
    chart
        .draw_series(LineSeries::new(vec![(0.0, 0.0), (max_k, max_k)], BLACK.mix(0.3)))?
        .label("linear")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.3)));
    for (i, (kind, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i + 1).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(*kind)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().position(SeriesLabelPosition::UpperLeft).border_style(BLACK).draw()?;
    Ok(())
}

/// Fonts looked for (after `GPFARM_FONT`) to lay out the plots' text. Loaded at run time so that
/// the binary links no font library.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a system font for bitmap text; false if none is found.
fn register_font() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        let explicit = std::env::var("GPFARM_FONT").ok();
        for path in explicit.iter().map(String::as_str).chain(FONT_PATHS.iter().copied()) {
            if let Ok(bytes) = std::fs::read(path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Draws both figures for every problem into `dir` as `<name>.svg` and `<name>.png`. Without a
/// TrueType font nothing is drawn (a message says so; `gpfarm bench --replot` can draw them later
/// from bench.csv).
pub fn draw_all(rows: &[Row], dir: &Path) -> Result<Vec<String>> {
    if !register_font() {
        eprintln!("no TrueType font found (set GPFARM_FONT or see {FONT_PATHS:?}): plots not drawn");
        return Ok(Vec::new());
    }
    let problems = crate::report::problems(rows);
    let mut written = Vec::new();
    let n = problems.len().max(1) as u32;
    for name in ["per_individual", "speedup"] {
        let draw_one = |area: &DrawingArea<SVGBackend, Shift>, p: &str| {
            if name == "per_individual" { per_individual(area, rows, p) } else { speedup(area, rows, p) }
        };
        let svg = dir.join(format!("{name}.svg"));
        {
            let root = SVGBackend::new(&svg, (640 * n, 480)).into_drawing_area();
            root.fill(&WHITE)?;
            for (area, p) in root.split_evenly((1, n as usize)).iter().zip(&problems) {
                draw_one(area, p)?;
            }
            root.present()?;
        }
        written.push(svg.display().to_string());
        let png = dir.join(format!("{name}.png"));
        {
            let root = BitMapBackend::new(&png, (640 * n, 480)).into_drawing_area();
            root.fill(&WHITE)?;
            for (area, p) in root.split_evenly((1, n as usize)).iter().zip(&problems) {
                if name == "per_individual" {
                    per_individual(area, rows, p)?;
                } else {
                    speedup(area, rows, p)?;
                }
            }
            root.present()?;
        }
        written.push(png.display().to_string());
    }
    Ok(written)
}

/// The distinct `items`, in order.
fn distinct<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort();
    v.dedup();
    v
}

/// The routes the GPU benchmarks compare, in the order their lines are drawn.
const ROUTES: [&str; 4] = ["interpreter", "ptx", "nvrtc", "cpu"];

/// One log-log panel of the GPU benchmarks: a line per route of `points(route)`.
fn route_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    descs: (&str, &str),
    points: impl Fn(&str) -> Vec<(f64, f64)>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let lines: Vec<(String, Vec<(f64, f64)>)> = ROUTES.iter().map(|r| ((*r).to_owned(), points(r))).collect();
    lines_panel(area, caption, descs, lines)
}

/// One log-log panel: a line per `(label, points)`, in order.
fn lines_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    (x_desc, y_desc): (&str, &str),
    mut lines: Vec<(String, Vec<(f64, f64)>)>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    for (_, pts) in &mut lines {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let (mut lo_x, mut hi_x, mut lo_y, mut hi_y) = (f64::INFINITY, 1.0f64, f64::INFINITY, 1e-3f64);
    for &(x, y) in lines.iter().flat_map(|(_, p)| p) {
        (lo_x, hi_x, lo_y, hi_y) = (lo_x.min(x), hi_x.max(x), lo_y.min(y), hi_y.max(y));
    }
    if !lo_x.is_finite() {
        return Ok(());
    }
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(
            (lo_x * 0.8..hi_x * 1.25).log_scale(),
            (lo_y.max(1e-3) * 0.5..hi_y * 2.0).log_scale(),
        )?;
    // Log axes span decades: label them as powers of ten.
    let decade = |v: &f64| format!("{v:.0e}");
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&decade)
        .y_label_formatter(&decade)
        .draw()?;
    for (i, (label, pts)) in lines.iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Draws `stem.svg` and `stem.png` into `dir`, a panel per key side by side, each drawn by
/// `panel`; nothing without a TrueType font (as [`draw_all`]).
fn draw_panels<K>(
    dir: &Path,
    stem: &str,
    keys: &[K],
    panel: impl Fn(&DrawingArea<SVGBackend<'_>, Shift>, &K) -> Result<()>,
    panel_png: impl Fn(&DrawingArea<BitMapBackend<'_>, Shift>, &K) -> Result<()>,
) -> Result<Vec<String>> {
    if !register_font() {
        eprintln!("no TrueType font found (set GPFARM_FONT or see {FONT_PATHS:?}): plots not drawn");
        return Ok(Vec::new());
    }
    let n = keys.len().max(1);
    let svg = dir.join(format!("{stem}.svg"));
    {
        let root = SVGBackend::new(&svg, (640 * n as u32, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        for (area, k) in root.split_evenly((1, n)).iter().zip(keys) {
            panel(area, k)?;
        }
        root.present()?;
    }
    let png = dir.join(format!("{stem}.png"));
    {
        let root = BitMapBackend::new(&png, (640 * n as u32, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        for (area, k) in root.split_evenly((1, n)).iter().zip(keys) {
            panel_png(area, k)?;
        }
        root.present()?;
    }
    Ok(vec![svg.display().to_string(), png.display().to_string()])
}

/// The crossover: time from phenotypes to fitness for one population against the case count,
/// one line per route, one panel per program size (regression workloads only).
fn crossover<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[crate::breakeven::BreakEvenRow],
    depth: u32,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let rows: Vec<_> =
        rows.iter().filter(|r| r.depth == depth && r.problem.starts_with("regression")).collect();
    let ops = rows.iter().find(|r| r.route == "interpreter").map_or(0.0, |r| r.mean_ops);
    route_panel(
        area,
        &format!("population of {ops:.0} ops per program (depth {depth})"),
        ("test cases", "ms from phenotypes to fitness"),
        |route| rows.iter().filter(|r| r.route == route).map(|r| (r.cases as f64, r.generation_ms)).collect(),
    )
}

/// Draws the crossover figure (`crossover.svg`, `crossover.png`) into `dir`, a panel per program
/// size; nothing without a TrueType font (as [`draw_all`]).
pub fn draw_crossover(rows: &[crate::breakeven::BreakEvenRow], dir: &Path) -> Result<Vec<String>> {
    let depths = distinct(rows.iter().filter(|r| r.problem.starts_with("regression")).map(|r| r.depth));
    draw_panels(dir, "crossover", &depths, |a, d| crossover(a, rows, *d), |a, d| crossover(a, rows, *d))
}

/// One panel of the parameter-steps figure: total time for the steps against the expressions,
/// one line per route, at `points` points.
fn steps_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[crate::steps::StepsRow],
    points: usize,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let rows: Vec<_> = rows.iter().filter(|r| r.points == points).collect();
    let steps = rows.first().map_or(0, |r| r.steps);
    // Every route of the rows (the PTX route once per link option set), in the order met.
    let routes = crate::steps::routes(rows.iter().copied());
    let lines = routes
        .into_iter()
        .map(|route| {
            let pts = rows
                .iter()
                .filter(|r| r.route == route)
                .map(|r| (r.expressions as f64, r.total_ms))
                .collect();
            (route, pts)
        })
        .collect();
    lines_panel(
        area,
        &format!("{points} points, {steps} parameter steps"),
        ("expressions", "ms, preparing + all steps"),
        lines,
    )
}

/// A line per row of `rows` (named by `name`): preparing plus k steps, for k = 1 to 1,000.
fn by_k(
    rows: &[&crate::steps::StepsRow],
    name: impl Fn(&crate::steps::StepsRow) -> String,
) -> Vec<(String, Vec<(f64, f64)>)> {
    const KS: [f64; 10] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
    rows.iter().map(|r| (name(r), KS.iter().map(|&k| (k, r.compile_ms + k * r.step_ms)).collect())).collect()
}

/// One panel of the steps-by-k figure: preparing plus k steps against k, a line per GPU route
/// (the PTX route once per link option set) on the largest expression count the compiled routes
/// ran over `points` points.
fn steps_by_k_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[crate::steps::StepsRow],
    points: usize,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    // The most expressions the compiled routes ran (they stop at --compiled-max).
    let most = rows
        .iter()
        .filter(|r| r.points == points && r.route != "interpreter" && r.route != "cpu")
        .map(|r| r.expressions)
        .max()
        .unwrap_or(0);
    let rows: Vec<_> =
        rows.iter().filter(|r| r.points == points && r.expressions == most && r.route != "cpu").collect();
    let lines = by_k(&rows, |r| r.route.clone());
    lines_panel(
        area,
        &format!("{most} expressions, {points} points"),
        ("evaluations k of each expression", "ms, preparing + k steps"),
        lines,
    )
}

/// Draws the steps-by-k figure (`steps-k.svg`, `steps-k.png`) into `dir`, a panel per point
/// count; nothing without a TrueType font (as [`draw_all`]).
pub fn draw_steps_by_k(rows: &[crate::steps::StepsRow], dir: &Path) -> Result<Vec<String>> {
    let points = distinct(rows.iter().map(|r| r.points));
    draw_panels(
        dir,
        "steps-k",
        &points,
        |a, p| steps_by_k_panel(a, rows, *p),
        |a, p| steps_by_k_panel(a, rows, *p),
    )
}

/// Draws the parameter-steps figure (`steps.svg`, `steps.png`) into `dir`, a panel per point
/// count; nothing without a TrueType font (as [`draw_all`]).
pub fn draw_steps(rows: &[crate::steps::StepsRow], dir: &Path) -> Result<Vec<String>> {
    let points = distinct(rows.iter().map(|r| r.points));
    draw_panels(dir, "steps", &points, |a, p| steps_panel(a, rows, *p), |a, p| steps_panel(a, rows, *p))
}

/// One panel of the fitting-steps figure: preparing plus k steps against k, a line per kind of
/// fitting kernel and expression count, over `points` points.
fn fit_steps_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[crate::steps::StepsRow],
    points: usize,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let rows: Vec<_> = rows.iter().filter(|r| r.points == points).collect();
    let lines =
        by_k(&rows, |r| format!("{}, {} expressions", r.route.trim_start_matches("fit-"), r.programs));
    lines_panel(
        area,
        &format!("{points} points"),
        ("Levenberg–Marquardt steps k", "ms, preparing + k steps"),
        lines,
    )
}

/// Draws the fitting-steps figure (`fit.svg`, `fit.png`) into `dir`, a panel per point count;
/// nothing without a TrueType font (as [`draw_all`]).
pub fn draw_fit_steps(rows: &[crate::steps::StepsRow], dir: &Path) -> Result<Vec<String>> {
    let points = distinct(rows.iter().map(|r| r.points));
    draw_panels(dir, "fit", &points, |a, p| fit_steps_panel(a, rows, *p), |a, p| fit_steps_panel(a, rows, *p))
}

/// One panel of the throughput figure: node-evaluations per second against the cases, a line
/// per route and population, for trees of `nodes` nodes.
fn throughput_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[crate::throughput::ThroughputRow],
    nodes: usize,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let rows: Vec<_> = rows.iter().filter(|r| r.nodes == nodes).collect();
    let keys = distinct(
        rows.iter()
            .map(|r| (ROUTES.iter().position(|x| *x == r.route).unwrap_or(ROUTES.len()), r.population)),
    );
    let lines = keys
        .into_iter()
        .filter_map(|(k, p)| {
            let route = ROUTES.get(k)?;
            let pts = rows
                .iter()
                .filter(|r| r.route == *route && r.population == p)
                .map(|r| (r.cases as f64, r.node_evals_per_s))
                .collect();
            Some((format!("{route}, {p} programs"), pts))
        })
        .collect();
    lines_panel(
        area,
        &format!("full trees of {nodes} nodes"),
        ("test cases", "node-evaluations per second"),
        lines,
    )
}

/// One panel of the preparation figure: code to executable form against the programs, a line
/// per route, for trees of `nodes` nodes.
fn prepare_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[crate::throughput::ThroughputRow],
    nodes: usize,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    route_panel(
        area,
        &format!("preparing full trees of {nodes} nodes"),
        ("programs", "ms: assembly, or compile and load"),
        |route| {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.nodes == nodes && r.route == route && route != "cpu")
                .map(|r| (r.population as f64, r.prepare_ms))
                .collect();
            pts.dedup_by(|a, b| a.0 == b.0);
            pts
        },
    )
}

/// Draws the throughput figures (`throughput.svg/png`: node-evaluations per second;
/// `prepare.svg/png`: what preparing the code costs) into `dir`, a panel per tree size; nothing
/// without a TrueType font (as [`draw_all`]).
pub fn draw_throughput(rows: &[crate::throughput::ThroughputRow], dir: &Path) -> Result<Vec<String>> {
    let nodes = distinct(rows.iter().map(|r| r.nodes));
    let mut written = draw_panels(
        dir,
        "throughput",
        &nodes,
        |a, n| throughput_panel(a, rows, *n),
        |a, n| throughput_panel(a, rows, *n),
    )?;
    written.extend(draw_panels(
        dir,
        "prepare",
        &nodes,
        |a, n| prepare_panel(a, rows, *n),
        |a, n| prepare_panel(a, rows, *n),
    )?);
    Ok(written)
}

/// Draws the scale figure (`scale.svg`, `scale.png`) into `dir`: ms per generation (the median
/// of the generations after the initial one) against the population, the whole generation and
/// each stage; nothing without a TrueType font (as [`draw_all`]).
pub fn draw_scale(rows: &[crate::scale::ScaleRow], dir: &Path) -> Result<Vec<String>> {
    let summary = crate::scale::summary(rows);
    draw_panels(dir, "scale", &[()], |a, _| scale_panel(a, &summary), |a, _| scale_panel(a, &summary))
}

/// The scale figure's one panel, from [`crate::scale::summary`].
fn scale_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    summary: &[(usize, crate::scale::ScaleRow)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    type Stage = (&'static str, fn(&crate::scale::ScaleRow) -> f64);
    let stages: [Stage; 6] = [
        ("generation", |r| r.generation_ms),
        ("breed", |r| r.breed_ms),
        ("admit", |r| r.admit_ms),
        ("eval", |r| r.eval_ms),
        ("fit", |r| r.fit_ms),
        ("rest", |r| r.rest_ms),
    ];
    let lines = stages
        .iter()
        .map(|(name, f)| {
            let pts = summary.iter().map(|(p, r)| (*p as f64, f(r))).filter(|&(_, y)| y > 0.0).collect();
            ((*name).to_owned(), pts)
        })
        .collect();
    lines_panel(area, "a generation, stage by stage", ("population", "ms (median generation)"), lines)
}
