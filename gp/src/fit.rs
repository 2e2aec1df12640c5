//! Fitting a program's free parameters (`p[k]`) to its problem's least-squares fitness (rmse) by
//! Levenberg–Marquardt, with Jacobians by automatic differentiation ([`Program::linearize`]:
//! reverse mode for the expressions the block evaluation covers, forward mode for other
//! programs). Must never make an individual worse: the values returned are the best the fit saw,
//! the starting ones included, and never non-finite.
//!
//! One iteration solves `(JᵀJ + λ·diag(JᵀJ)) δ = −Jᵀr` for the residuals `r` (output − target)
//! and Jacobian `J` at the current values, rounds `p + δ` to float, and runs the program there,
//! plainly first and, where that shows the sum of squares lower and another iteration follows,
//! again with its derivatives for it (on the CPU and on the GPU alike; on the CPU the plain run
//! stops once its sum so far is no lower, a sum of squares only growing): a lower sum of squares
//! is taken and λ shrinks tenfold, one not lower is refused and λ grows tenfold. A start ends
//! early once a step gains no more than a millionth of the sum of squares (known from the plain
//! run, so such a step's derivatives are not run either), or leaves the float values as they were,
//! and without running a trial once the linear model predicts it can gain no more than a
//! millionth ([`predicted_gain`]). That is a heuristic: λ only grows until a step is taken, and a
//! larger λ predicts less, so by the linear model such a start has nothing left to gain and would
//! spend its remaining runs being refused; a step can gain more than the model says, and the rule
//! then gives that up (rarely, and in the last digits of the sum of squares on Friedman-1). The
//! sum of squares is computed from the float outputs exactly as the fitness is, so the fitness of
//! the values returned is what the fit saw. The small system is solved by Cholesky's method,
//! written here because the same few lines run for every individual at once and need no matrix
//! library.
//!
//! Restarts run the same iterations from other starting values (each value moved by up to
//! `max(1, |v|)` either way, drawn from the seed) and the best result of all is kept.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fitness::FitnessKind;
use crate::problem::Problem;
use crate::program::Program;

/// A start ends once an iteration gains less than this share of the sum of squares, or its next
/// trial is predicted to gain no more: float outputs cannot improve much further.
pub const CONVERGED: f64 = 1e-6;
/// λ, the damping, where a start begins.
pub const LAMBDA_START: f64 = 1e-3;
/// λ shrinks by this factor at a step taken and grows by it at a step refused.
pub const LAMBDA_FACTOR: f64 = 10.0;
/// λ shrinks no further than this.
pub const LAMBDA_MIN: f64 = 1e-12;
/// A start ends once λ grows past this.
pub const LAMBDA_MAX: f64 = 1e12;
/// The damping adds λ times the diagonal of `JᵀJ`, or λ times this where that is smaller.
pub const DIAGONAL_MIN: f64 = 1e-12;

/// How hard to fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitSettings {
    /// Levenberg–Marquardt iterations per start (0: no fitting).
    pub iterations: usize,
    /// Starts beyond the first.
    pub restarts: usize,
}

/// The outcome of [`fit`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    /// The best values seen.
    pub params: Vec<f32>,
    /// Their sum of squared errors.
    pub sse: f64,
    /// Runs of the program over every case (what the fit cost): a plain run counts 1 (also one
    /// stopped part way), a run with derivatives one per parameter.
    pub runs: usize,
}

/// Whether `program` can be fitted on `problem`: it reads free parameters, the fitness is
/// least squares (rmse), and it has one float output.
pub fn fittable(problem: &Problem, program: &Program) -> bool {
    program.params() > 0 && problem.spec().fitness == FitnessKind::Rmse && program.differentiable()
}

/// Fits `program`'s parameters on `problem` from `start` (see the module documentation); `None`
/// when it is not [`fittable`] or does not run from `start`.
pub fn fit(
    problem: &Problem,
    program: &Program,
    start: &[f32],
    settings: &FitSettings,
    seed: u64,
) -> Option<Fitted> {
    if !fittable(problem, program) || start.len() != program.params() {
        return None;
    }
    let targets = problem.cases().targets();
    let targets: Vec<f64> = (0..targets.len()).map(|c| targets.as_f64(c)).collect();
    let np = start.len();
    // The tape and its working memory serve every run of the fit.
    let runs = std::cell::RefCell::new(program.runs(problem, problem.max_steps()));
    let run = |p: &[f32]| {
        let mut sums = Sums::new(0.0, vec![0.0; np * np], vec![0.0; np]);
        runs.borrow_mut()
            .linearize(p, |c, ys, rows| sums.add_block(ys, &targets[c..c + ys.len()], rows))
            .ok()?;
        Some(Sums::new(sums.sse, sums.jtj, sums.jtr))
    };
    // Whether a plain run gives a sum of squares below `bound` (the same outputs, added as `run`
    // adds them): a step that does not lower it is refused whatever its Jacobian. Each case adds
    // a square, never less than 0, so a sum that reaches `bound` (or is NaN) part way stays there
    // to the end, and the run stops: the same refusal, sooner.
    let lower_at = |p: &[f32], bound: f64| -> Option<f64> {
        let mut sums = Sums::new(0.0, Vec::new(), Vec::new());
        let all = runs.borrow_mut().outputs_while(p, |c, ys| {
            sums.add_block(ys, &targets[c..c + ys.len()], &[]);
            sums.sse < bound
        });
        let sse = Sums::new(sums.sse, sums.jtj, sums.jtr).sse;
        (matches!(all, Ok(true)) && sse < bound).then_some(sse)
    };
    let first = run(start)?;
    let mut best = Fitted { params: start.to_vec(), sse: first.sse, runs: np };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for restart in 0..=settings.restarts {
        let mut lm = if restart == 0 {
            LmStart::new(start.to_vec(), first.clone())
        } else {
            let p = moved_start(start, &mut rng);
            let Some(at) = run(&p) else { continue };
            best.runs += np;
            LmStart::new(p, at)
        };
        for it in 0..settings.iterations {
            let Some(trial) = lm.trial() else { break };
            // Derivatives only where the step is taken and another trial follows: the same steps
            // as running them always.
            best.runs += 1;
            let sse = lower_at(&trial, lm.sse());
            if lm.judge_plain(&trial, sse, it + 1 == settings.iterations) {
                best.runs += np;
                let at = run(&trial);
                lm.judge(trial, at);
            }
        }
        if lm.sse() < best.sse {
            best.sse = lm.sse();
            best.params = lm.params().to_vec();
        }
    }
    Some(best)
}

/// Another start: each value of `start` moved by up to `max(1, |v|)` either way, drawn from
/// `rng`.
pub fn moved_start(start: &[f32], rng: &mut impl Rng) -> Vec<f32> {
    start.iter().map(|&v| v + f32::max(1.0, v.abs()) * rng.random_range(-1.0f32..=1.0)).collect()
}

/// A program's least-squares sums at some values: the sum of squared residuals (infinite when it
/// is not finite), `JᵀJ` (`np` × `np`, row-major, lower triangle) and `Jᵀr`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sums {
    /// Sum of squared residuals.
    pub sse: f64,
    /// `JᵀJ`, lower triangle, row-major.
    pub jtj: Vec<f64>,
    /// `Jᵀr`.
    pub jtr: Vec<f64>,
}

impl Sums {
    /// Sums from their parts, a sum of squares that is not finite made infinite.
    pub fn new(sse: f64, jtj: Vec<f64>, jtr: Vec<f64>) -> Sums {
        Sums { sse: if sse.is_finite() { sse } else { f64::INFINITY }, jtj, jtr }
    }

    /// Sums packed as the GPU's fitting kernel sends them for `np` parameters: the sum of
    /// squares, `Jᵀr`, then `JᵀJ`'s lower triangle row by row.
    pub fn packed(sums: &[f64], np: usize) -> Sums {
        let mut a = vec![0.0; np * np];
        for k in 0..np {
            for l in 0..=k {
                a[k * np + l] = sums[1 + np + k * (k + 1) / 2 + l];
            }
        }
        Sums::new(sums[0], a, sums[1..1 + np].to_vec())
    }

    /// Adds a block of cases to sums being gathered (from zero, over the cases in order, as the
    /// rmse fitness adds them): their outputs `ys`, targets `ts` and Jacobian rows (`rows`, one
    /// row of `jtr.len()` values per case after the other). Each sum is its own, added over the
    /// cases in order, whatever order the sums are visited in: the same sums, bit for bit, as
    /// adding one case at a time.
    fn add_block(&mut self, ys: &[f32], ts: &[f64], rows: &[f64]) {
        let np = self.jtr.len();
        let rs: Vec<f64> = ys.iter().zip(ts).map(|(&y, &t)| f64::from(y) - t).collect();
        for &r in &rs {
            self.sse += r * r;
        }
        if np == 0 {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        // `Jᵀr` four sums at a time, each held in a register over the block (with AVX2, up to
        // sixteen in four registers).
        let mut k0 = 0;
        #[cfg(target_arch = "x86_64")]
        while avx2 && np - k0 >= TILE {
            let jtr = &mut self.jtr;
            // SAFETY (each): the CPU has AVX2, checked above.
            k0 = match (np - k0) / TILE {
                1 => unsafe { add_jtr_avx2::<1>(jtr, k0, k0, rows, &rs) },
                2 => unsafe { add_jtr_avx2::<2>(jtr, k0, k0, rows, &rs) },
                3 => unsafe { add_jtr_avx2::<3>(jtr, k0, k0, rows, &rs) },
                _ => unsafe { add_jtr_avx2::<4>(jtr, k0, k0, rows, &rs) },
            };
        }
        // The last sums (fewer than four) as a group of four ending at the last, the others' lanes
        // left as they are.
        #[cfg(target_arch = "x86_64")]
        if avx2 && k0 < np && np >= TILE {
            // SAFETY: the CPU has AVX2, checked above.
            unsafe { add_jtr_avx2::<1>(&mut self.jtr, np - TILE, k0, rows, &rs) };
            k0 = np;
        }
        for k0 in (k0..np).step_by(TILE) {
            match np - k0 {
                1 => add_jtr::<1>(&mut self.jtr, k0, rows, &rs),
                2 => add_jtr::<2>(&mut self.jtr, k0, rows, &rs),
                3 => add_jtr::<3>(&mut self.jtr, k0, rows, &rs),
                _ => add_jtr::<TILE>(&mut self.jtr, k0, rows, &rs),
            }
        }
        // `JᵀJ`'s lower triangle in tiles of up to 4 × 4 sums held in registers over the block
        // (the last rows' tiles as many rows high as are left); with AVX2, two tiles side by
        // side at a time where both lie left of the diagonal or the right one on it.
        for i0 in (0..np).step_by(TILE) {
            let mut from = 0;
            #[cfg(target_arch = "x86_64")]
            {
                let high = (np - i0).min(TILE);
                // The columns the pairs may cover: up to the diagonal tile where it is a full one.
                let end = if high == TILE { i0 + TILE } else { i0 };
                while avx2 && from + 2 * TILE <= end {
                    let a = &mut self.jtj;
                    // SAFETY (each): the CPU has AVX2, checked above.
                    match high {
                        1 => unsafe { add_tile_avx2::<1, 2>(a, np, i0, from, from, rows) },
                        2 => unsafe { add_tile_avx2::<2, 2>(a, np, i0, from, from, rows) },
                        3 => unsafe { add_tile_avx2::<3, 2>(a, np, i0, from, from, rows) },
                        _ => unsafe { add_tile_avx2::<TILE, 2>(a, np, i0, from, from, rows) },
                    }
                    from += 2 * TILE;
                }
            }
            for j0 in (from..=i0).step_by(TILE) {
                let a = &mut self.jtj;
                // The last rows' tile on the diagonal (fewer than four) with AVX2: the four columns
                // ending at the last, of which only the diagonal tile's sums are kept.
                #[cfg(target_arch = "x86_64")]
                if avx2 && j0 == i0 && np - i0 < TILE && np >= TILE {
                    // SAFETY (each): the CPU has AVX2, checked above.
                    match np - i0 {
                        1 => unsafe { add_tile_avx2::<1, 1>(a, np, i0, j0, np - TILE, rows) },
                        2 => unsafe { add_tile_avx2::<2, 1>(a, np, i0, j0, np - TILE, rows) },
                        _ => unsafe { add_tile_avx2::<3, 1>(a, np, i0, j0, np - TILE, rows) },
                    }
                    continue;
                }
                match (np - i0, j0 == i0) {
                    (1, true) => add_tile::<1, 1>(a, np, i0, j0, rows),
                    (2, true) => add_tile::<2, 2>(a, np, i0, j0, rows),
                    (3, true) => add_tile::<3, 3>(a, np, i0, j0, rows),
                    // SAFETY (each AVX2 tile): the CPU has AVX2, checked above.
                    #[cfg(target_arch = "x86_64")]
                    (1, false) if avx2 => unsafe { add_tile_avx2::<1, 1>(a, np, i0, j0, j0, rows) },
                    #[cfg(target_arch = "x86_64")]
                    (2, false) if avx2 => unsafe { add_tile_avx2::<2, 1>(a, np, i0, j0, j0, rows) },
                    #[cfg(target_arch = "x86_64")]
                    (3, false) if avx2 => unsafe { add_tile_avx2::<3, 1>(a, np, i0, j0, j0, rows) },
                    (1, false) => add_tile::<1, TILE>(a, np, i0, j0, rows),
                    (2, false) => add_tile::<2, TILE>(a, np, i0, j0, rows),
                    (3, false) => add_tile::<3, TILE>(a, np, i0, j0, rows),
                    #[cfg(target_arch = "x86_64")]
                    _ if avx2 => unsafe { add_tile_avx2::<TILE, 1>(a, np, i0, j0, j0, rows) },
                    _ => add_tile::<TILE, TILE>(a, np, i0, j0, rows),
                }
            }
        }
    }
}

/// Adds `rows` (one of `jtr.len()` values per case) times the residuals `rs` to `Jᵀr`'s sums
/// `k0..k0 + K`, each held in a register over the block and added over the cases in order.
fn add_jtr<const K: usize>(jtr: &mut [f64], k0: usize, rows: &[f64], rs: &[f64]) {
    let np = jtr.len();
    let mut acc: [f64; K] = jtr[k0..k0 + K].try_into().expect("K sums");
    for (row, &r) in rows.chunks_exact(np).zip(rs) {
        for (s, &x) in acc.iter_mut().zip(&row[k0..k0 + K]) {
            *s += x * r;
        }
    }
    jtr[k0..k0 + K].copy_from_slice(&acc);
}

/// Sums added at once by [`add_tile`]: a `TILE` × `TILE` block of `JᵀJ`.
const TILE: usize = 4;

/// Adds `rows` (one of `np` values per case) to the tile of `JᵀJ` (`a`, `np` × `np`, row-major)
/// at rows `i0..i0 + R` and columns `j0..j0 + C` (`j0 <= i0`, `i0 + R <= np`, `j0 + C <= np`):
/// of a tile on the diagonal only the lower triangle is kept. Each sum is held in a register over the block and added over the cases in
/// order.
fn add_tile<const R: usize, const C: usize>(a: &mut [f64], np: usize, i0: usize, j0: usize, rows: &[f64]) {
    let mut acc = [[0.0f64; C]; R];
    let keep = |ii: usize, jj: usize| j0 + jj <= i0 + ii;
    for (ii, acc) in acc.iter_mut().enumerate() {
        for (jj, x) in acc.iter_mut().enumerate() {
            if keep(ii, jj) {
                *x = a[(i0 + ii) * np + j0 + jj];
            }
        }
    }
    for row in rows.chunks_exact(np) {
        let ri: [f64; R] = row[i0..i0 + R].try_into().expect("a tile's rows");
        let rj: [f64; C] = row[j0..j0 + C].try_into().expect("a tile's columns");
        for (acc, &x) in acc.iter_mut().zip(&ri) {
            for (s, &y) in acc.iter_mut().zip(&rj) {
                *s += x * y;
            }
        }
    }
    for (ii, acc) in acc.iter().enumerate() {
        for (jj, &x) in acc.iter().enumerate() {
            if keep(ii, jj) {
                a[(i0 + ii) * np + j0 + jj] = x;
            }
        }
    }
}

/// [`add_jtr`] of `G` groups of four sums with AVX2, the sums `c0..c0 + 4G`, of which those from
/// `from` are stored (`c0` itself, or for the last sums, fewer than four, `np - 4`): each group in
/// one register, each sum still `s += x * r` over the cases in order (no fused multiply-add), so
/// the same bits; the groups' additions overlap. The end of the sums added (`c0 + 4G`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn add_jtr_avx2<const G: usize>(jtr: &mut [f64], c0: usize, from: usize, rows: &[f64], rs: &[f64]) -> usize {
    use std::arch::x86_64::{
        __m256d, _mm256_add_pd, _mm256_loadu_pd, _mm256_mul_pd, _mm256_set1_pd, _mm256_storeu_pd,
    };
    let np = jtr.len();
    let end = c0 + G * TILE;
    assert!(end <= np && c0 <= from && from < end, "the sums inside Jᵀr");
    let at = &mut jtr[c0..end];
    // SAFETY: `at` holds 4G f64.
    let mut acc: [__m256d; G] =
        std::array::from_fn(|g| unsafe { _mm256_loadu_pd(at.as_ptr().add(g * TILE)) });
    for (row, &r) in rows.chunks_exact(np).zip(rs) {
        let x = &row[c0..end];
        let r = _mm256_set1_pd(r);
        for (g, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `x` holds 4G f64.
            let x = unsafe { _mm256_loadu_pd(x.as_ptr().add(g * TILE)) };
            *acc = _mm256_add_pd(*acc, _mm256_mul_pd(x, r));
        }
    }
    let mut sums = [[0.0f64; TILE]; G];
    for (sums, acc) in sums.iter_mut().zip(&acc) {
        // SAFETY: `sums` holds four f64.
        unsafe { _mm256_storeu_pd(sums.as_mut_ptr(), *acc) };
    }
    at[from - c0..].copy_from_slice(&sums.as_flattened()[from - c0..]);
    end
}

/// [`add_tile`] with AVX2 of `H` tiles side by side (`H` = 1 or 2), each `R` rows high and 4 wide:
/// the tiles' `4H` columns from `c0` (`j0`, or for the last rows' tile on the diagonal the four
/// ending at the last column), a row of four sums in each register; two tiles give eight
/// registers, whose additions overlap where four wait on each other. Each sum is still `s += x *
/// y` over the cases in order (no fused multiply-add), so the same bits. Only the sums of the
/// columns from `j0` in the lower triangle are kept; the other lanes are left as they are.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn add_tile_avx2<const R: usize, const H: usize>(
    a: &mut [f64],
    np: usize,
    i0: usize,
    j0: usize,
    c0: usize,
    rows: &[f64],
) {
    use std::arch::x86_64::{
        __m256d, _mm256_add_pd, _mm256_loadu_pd, _mm256_mul_pd, _mm256_set1_pd, _mm256_storeu_pd,
    };
    let width = H * TILE;
    assert!(i0 + R <= np && c0 + width <= np && a.len() >= np * np, "tiles inside JᵀJ");
    assert!(c0 <= j0 && (c0 == j0 || i0 + R <= c0 + width), "the tiles' columns among those added");
    assert!(c0 + width <= i0 + R, "no column right of the diagonal tile");
    let mut acc: [[__m256d; H]; R] = std::array::from_fn(|ii| {
        std::array::from_fn(|h| {
            let at = &a[(i0 + ii) * np + c0 + h * TILE..][..TILE];
            // SAFETY: `at` holds four f64.
            unsafe { _mm256_loadu_pd(at.as_ptr()) }
        })
    });
    for row in rows.chunks_exact(np) {
        let rj = &row[c0..c0 + width];
        // SAFETY: `rj` holds 4H f64.
        let rj: [__m256d; H] = std::array::from_fn(|h| unsafe { _mm256_loadu_pd(rj.as_ptr().add(h * TILE)) });
        for (ii, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_set1_pd(row[i0 + ii]);
            for (acc, &y) in acc.iter_mut().zip(&rj) {
                *acc = _mm256_add_pd(*acc, _mm256_mul_pd(x, y));
            }
        }
    }
    for (ii, acc) in acc.iter().enumerate() {
        for (h, acc) in acc.iter().enumerate() {
            let mut sums = [0.0f64; TILE];
            // SAFETY: `sums` holds four f64.
            unsafe { _mm256_storeu_pd(sums.as_mut_ptr(), *acc) };
            // The tiles' columns, up to the diagonal.
            for (jj, &v) in sums.iter().enumerate() {
                let c = c0 + h * TILE + jj;
                if j0 <= c && c <= i0 + ii {
                    a[(i0 + ii) * np + c] = v;
                }
            }
        }
    }
}

/// One start of Levenberg–Marquardt, as the module documentation states it, driven by whoever
/// runs the program: [`fit`] on the CPU, one start at a time. [`LmStart::trial`] gives the
/// values to run next; [`LmStart::judge_plain`] takes what a plain run of them gave, and says
/// whether to run them again with derivatives for [`LmStart::judge`]. The GPU's fitting loop runs a
/// copy of it in CUDA C (the step kernel of `gpfarm_kernels::interpreter::fit_source`), with the
/// same constants and operations, bit for bit: any change here must be made there too.
#[derive(Clone, Debug)]
pub struct LmStart {
    params: Vec<f32>,
    at: Sums,
    lambda: f64,
    active: bool,
}

impl LmStart {
    /// A start at `params`, where the program's sums are `at`.
    pub fn new(params: Vec<f32>, at: Sums) -> LmStart {
        let active = at.sse.is_finite();
        LmStart { params, at, lambda: LAMBDA_START, active }
    }

    /// The best values so far.
    pub fn params(&self) -> &[f32] {
        &self.params
    }

    /// Their sum of squares.
    pub fn sse(&self) -> f64 {
        self.at.sse
    }

    /// Whether the start goes on.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The next values to run, rounded to float; `None` once the start has ended (the step
    /// cannot be solved, is not finite, leaves the float values as they are, or is predicted to
    /// gain no more than `CONVERGED` of the sum of squares).
    pub fn trial(&mut self) -> Option<Vec<f32>> {
        if !self.active {
            return None;
        }
        let np = self.params.len();
        let trial = damped_step(self.at.jtj.clone(), &self.at.jtr, np, self.lambda).map(|step| {
            self.params.iter().zip(&step).map(|(&v, &d)| (f64::from(v) + d) as f32).collect::<Vec<f32>>()
        });
        match trial {
            Some(t)
                if t != self.params
                    && t.iter().all(|v| v.is_finite())
                    && predicted_gain(&self.at, &self.params, &t) > CONVERGED * self.at.sse =>
            {
                Some(t)
            }
            _ => {
                self.active = false;
                None
            }
        }
    }

    /// What `trial`'s plain run gave: its sum of squares where it is lower than the start's, else
    /// `None`; `last` where no trial follows it. True where its run with derivatives is wanted,
    /// to be handed to [`LmStart::judge`]: it is lower and the start goes on after it. Otherwise
    /// it is judged here as `judge` would judge it, without derivatives: refused where it is not
    /// lower; taken, ending the start, where it is lower and gains no more than `CONVERGED` or
    /// is the last (its derivatives would serve no next trial).
    pub fn judge_plain(&mut self, trial: &[f32], sse: Option<f64>, last: bool) -> bool {
        let lower = sse.filter(|&sse| sse < self.at.sse);
        if lower.is_some_and(|sse| !last && !self.gains_too_little(sse)) {
            return true;
        }
        // Taken (with no `JᵀJ` or `Jᵀr`, which nothing reads once the start ends) or refused.
        self.judge(trial.to_vec(), lower.map(|sse| Sums::new(sse, Vec::new(), Vec::new())));
        if lower.is_some() {
            self.active = false;
        }
        false
    }

    /// Whether taking a sum of squares of `sse` (lower than the start's) gains no more than
    /// `CONVERGED` of it, which ends the start.
    fn gains_too_little(&self, sse: f64) -> bool {
        self.at.sse - sse <= CONVERGED * sse
    }

    /// What running `trial` gave (`None`: the program did not run there): a lower sum of squares
    /// is taken and λ shrinks tenfold, ending the start when it gained less than `CONVERGED` (a millionth);
    /// anything else is refused and λ grows tenfold, ending the start past 1e12.
    pub fn judge(&mut self, trial: Vec<f32>, at: Option<Sums>) {
        match at {
            Some(at) if at.sse < self.at.sse => {
                let ends = self.gains_too_little(at.sse);
                (self.params, self.at) = (trial, at);
                self.lambda = (self.lambda / LAMBDA_FACTOR).max(LAMBDA_MIN);
                if ends {
                    self.active = false;
                }
            }
            _ => {
                self.lambda *= LAMBDA_FACTOR;
                if self.lambda > LAMBDA_MAX {
                    self.active = false;
                }
            }
        }
    }
}

/// The gain in the sum of squares the linear model at `at` predicts for moving from `params` to
/// `trial` (the step as rounded to float, `d`): `−(2 dᵀJᵀr + dᵀJᵀJd)`, with `JᵀJ`'s lower
/// triangle (`a`) read row by row as `Σᵢ dᵢ (2 Σ_{k<i} aᵢₖ dₖ + aᵢᵢ dᵢ + 2 gᵢ)` and `g = Jᵀr`,
/// each operation rounded on its own in that order (the GPU's step kernel computes it so too).
pub fn predicted_gain(at: &Sums, params: &[f32], trial: &[f32]) -> f64 {
    let np = params.len();
    let d: Vec<f64> = trial.iter().zip(params).map(|(&t, &p)| f64::from(t) - f64::from(p)).collect();
    let mut q = 0.0;
    for i in 0..np {
        let mut s = 0.0;
        for (a, dk) in at.jtj[i * np..i * np + i].iter().zip(&d) {
            s += a * dk;
        }
        q += d[i] * (2.0 * s + at.jtj[i * np + i] * d[i] + 2.0 * at.jtr[i]);
    }
    -q
}

/// The Levenberg–Marquardt step from the normal equations: `JᵀJ` in `a` (`np` × `np`, row-major;
/// only the lower triangle is read) and `Jᵀr` in `g`, damped by `lambda`: the solution of
/// `(JᵀJ + λ·diag(JᵀJ)) δ = −Jᵀr`. `None` when a sum is not finite or the system cannot be solved.
fn damped_step(mut a: Vec<f64>, g: &[f64], np: usize, lambda: f64) -> Option<Vec<f64>> {
    if a.len() != np * np || g.len() != np || a.iter().chain(g).any(|v| !v.is_finite()) {
        return None;
    }
    for i in 0..np {
        let d = a[i * np + i];
        a[i * np + i] = d + lambda * d.max(DIAGONAL_MIN);
    }
    let mut x: Vec<f64> = g.iter().map(|v| -v).collect();
    cholesky_solve(&mut a, &mut x, np).then_some(x)
}

/// Solves `A x = b` for symmetric positive definite `A` (lower triangle used; overwritten by its
/// factor), `b` in `x`. False when `A` is not positive definite.
fn cholesky_solve(a: &mut [f64], x: &mut [f64], n: usize) -> bool {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if d <= 0.0 || !d.is_finite() {
            return false;
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    for i in 0..n {
        let mut s = x[i];
        for k in 0..i {
            s -= a[i * n + k] * x[k];
        }
        x[i] = s / a[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = x[i];
        for k in i + 1..n {
            s -= a[k * n + i] * x[k];
        }
        x[i] = s / a[i * n + i];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of cases add the sums one case at a time would, bit for bit, whatever the number
    /// of parameters (tiles whole and cut short) and the length of the blocks.
    #[test]
    fn blocks_add_the_sums_of_one_case_at_a_time_bit_for_bit() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for np in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 19, 22, 25, 26, 33] {
            let n = 150;
            let ys: Vec<f32> = (0..n).map(|_| rng.random_range(-10.0f32..10.0)).collect();
            let ts: Vec<f64> = (0..n).map(|_| rng.random_range(-10.0..10.0)).collect();
            let rows: Vec<f64> = (0..n * np)
                .map(|i| {
                    if i % 17 == 3 { 0.0 } else { rng.random_range(-1e3..1e3) * rng.random::<f64>().powi(8) }
                })
                .collect();
            let mut one = Sums::new(0.0, vec![0.0; np * np], vec![0.0; np]);
            for c in 0..n {
                let r = f64::from(ys[c]) - ts[c];
                one.sse += r * r;
                for i in 0..np {
                    one.jtr[i] += rows[c * np + i] * r;
                    for j in 0..=i {
                        one.jtj[i * np + j] += rows[c * np + i] * rows[c * np + j];
                    }
                }
            }
            for block in [1, 7, 64] {
                let mut blocks = Sums::new(0.0, vec![0.0; np * np], vec![0.0; np]);
                for start in (0..n).step_by(block) {
                    let end = (start + block).min(n);
                    blocks.add_block(&ys[start..end], &ts[start..end], &rows[start * np..end * np]);
                }
                let bits = |s: &Sums| {
                    let mut v = vec![s.sse.to_bits()];
                    v.extend(s.jtr.iter().chain(&s.jtj).map(|x| x.to_bits()));
                    v
                };
                assert_eq!(bits(&blocks), bits(&one), "{np} parameters, blocks of {block}");
            }
        }
    }

    /// For a model linear in its parameters the predicted gain is the gain: the sum of squares is
    /// then exactly quadratic in the step.
    #[test]
    fn the_predicted_gain_of_a_linear_model_is_its_gain() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for np in [1, 2, 5, 9] {
            let n = 40;
            let x: Vec<f64> = (0..n * np).map(|_| rng.random_range(-2.0..2.0)).collect();
            let t: Vec<f64> = (0..n).map(|_| rng.random_range(-5.0..5.0)).collect();
            let sse_at = |p: &[f32]| -> (Sums, f64) {
                let mut sums = Sums::new(0.0, vec![0.0; np * np], vec![0.0; np]);
                for c in 0..n {
                    let row = &x[c * np..(c + 1) * np];
                    let y: f64 = row.iter().zip(p).map(|(&a, &v)| a * f64::from(v)).sum();
                    let r = y - t[c];
                    sums.sse += r * r;
                    for i in 0..np {
                        sums.jtr[i] += row[i] * r;
                        for j in 0..=i {
                            sums.jtj[i * np + j] += row[i] * row[j];
                        }
                    }
                }
                let sse = sums.sse;
                (sums, sse)
            };
            let p: Vec<f32> = (0..np).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let q: Vec<f32> = p.iter().map(|&v| v + rng.random_range(-0.5f32..0.5)).collect();
            let (at, before) = sse_at(&p);
            let (_, after) = sse_at(&q);
            let predicted = predicted_gain(&at, &p, &q);
            assert!(
                (predicted - (before - after)).abs() <= 1e-9 * before,
                "{np} parameters: predicted {predicted:e}, gained {:e}",
                before - after
            );
        }
    }

    /// A start whose next step is predicted to gain no more than a millionth of its sum of
    /// squares ends without that trial; the same step from a sum of squares a thousandth as large
    /// is tried.
    #[test]
    fn a_start_ends_when_its_step_is_predicted_to_gain_too_little() {
        // One parameter at 1: JᵀJ = 1, Jᵀr = 1e-4, so the step is about -1e-4 (the float value
        // moves) and the predicted gain about 1e-8.
        let sums = |sse: f64| Sums::new(sse, vec![1.0], vec![1e-4]);
        let mut large = LmStart::new(vec![1.0], sums(1.0));
        assert_eq!(large.trial(), None);
        assert!(!large.is_active());
        let mut small = LmStart::new(vec![1.0], sums(1e-3));
        let trial = small.trial().expect("a trial");
        assert!(trial[0] < 1.0 && small.is_active(), "{trial:?}");
        let gain = predicted_gain(&sums(1e-3), &[1.0], &trial);
        assert!(gain > 1e-9 && gain < 1e-6, "{gain:e}");
    }

    #[test]
    fn cholesky_solves_a_small_system_and_refuses_an_indefinite_one() {
        // A = [[4, 2], [2, 3]], b = [2, 1] -> x = [0.5, 0].
        let mut a = vec![4.0, 0.0, 2.0, 3.0];
        let mut x = vec![2.0, 1.0];
        assert!(cholesky_solve(&mut a, &mut x, 2));
        assert!((x[0] - 0.5).abs() < 1e-12 && x[1].abs() < 1e-12, "{x:?}");
        let mut a = vec![1.0, 0.0, 2.0, 1.0];
        assert!(!cholesky_solve(&mut a, &mut [1.0, 1.0], 2));
    }

    /// A fit runs no derivatives that no trial reads (a lower trial that is the last or ends its
    /// start is taken from its plain run), and takes the values and sum of squares of the loop
    /// that runs them for every lower trial, bit for bit.
    #[test]
    fn a_trial_that_ends_its_start_is_taken_without_its_derivatives() {
        use crate::mapping::Phenotype;
        let problem = Problem::builtin("keijzer6").unwrap();
        let ts = problem.cases().targets();
        let ts: Vec<f64> = (0..ts.len()).map(|c| ts.as_f64(c)).collect();
        let sums_at = |program: &Program, p: &[f32]| -> Option<Sums> {
            let at = program.linearize(&problem, p, problem.max_steps()).ok()?;
            let mut sums = Sums::new(0.0, vec![0.0; p.len() * p.len()], vec![0.0; p.len()]);
            sums.add_block(&at.outputs, &ts, &at.jacobian);
            Some(Sums::new(sums.sse, sums.jtj, sums.jtr))
        };
        let (mut fewer, mut converged) = (0, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for (text, start) in [
            ("p[0] * x + p[1]", vec![0.5f32, 0.1]),
            ("expf(p[0] * x) * p[1] + p[2]", vec![0.5, 3.0, -1.0]),
            ("sinf(p[0] * x + p[1]) * p[2] + p[3] * x", vec![1.0, 0.2, 0.3, 0.1]),
            ("p[0] * x * x + p[1] * x + p[2]", vec![0.3, -0.2, 0.1]),
        ] {
            let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
            let np = start.len();
            // The given start and others drawn around it.
            let mut starts = vec![start.clone()];
            starts.extend((0..8).map(|_| moved_start(&start, &mut rng)));
            for start in &starts {
                for iterations in [1, 2, 3, 10, 30] {
                    let settings = FitSettings { iterations, restarts: 0 };
                    let Some(got) = fit(&problem, &program, start, &settings, 1) else { continue };
                    // The loop that runs every lower trial with its derivatives.
                    let Some(at) = sums_at(&program, start) else { continue };
                    let mut lm = LmStart::new(start.clone(), at);
                    let (mut runs, mut ended) = (np, false);
                    for it in 0..iterations {
                        let Some(trial) = lm.trial() else { break };
                        let at = sums_at(&program, &trial);
                        let lower = at.as_ref().is_some_and(|a| a.sse < lm.sse());
                        runs += 1 + if lower { np } else { 0 };
                        lm.judge(trial, at);
                        // A step taken that ended the start before its last trial: it gained
                        // no more than a millionth.
                        ended |= lower && !lm.is_active() && it + 1 < iterations;
                    }
                    let bits = |p: &[f32]| p.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    let what = format!("{text} from {start:?}, {iterations} iterations");
                    assert_eq!(got.sse.to_bits(), lm.sse().to_bits(), "{what}");
                    assert_eq!(bits(&got.params), bits(lm.params()), "{what}");
                    assert!(got.runs <= runs, "{what}: {} runs against {runs}", got.runs);
                    fewer += usize::from(got.runs < runs);
                    if ended {
                        // That step's derivatives were not run.
                        assert!(got.runs < runs, "{what}: ended on a small step, yet {runs} runs");
                        converged += 1;
                    }
                }
            }
        }
        // At one iteration a lower first trial is the last; and some starts end on a step that
        // gains no more than a millionth: both taken without derivatives.
        assert!(fewer >= 3, "only {fewer} fits ran fewer runs");
        assert!(converged > 0, "no start ended on a step gaining no more than a millionth");
    }
}
