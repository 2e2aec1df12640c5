//! Launching the fitting kernels over programs with free parameters (the interpreter's, one per
//! width, and compiled units of straight-line programs), and reading back their least-squares
//! sums, each program's as many as its parameters need ([`sums_of`]: 45 for 8 parameters). The
//! launches are spread over side streams that run side by side. A whole fit runs on the GPU
//! without the host between its iterations: the step kernel
//! ([`super::contract::FIT_STEP_KERNEL`]) judges each start's trial and solves for the next, and
//! the next launches run only the starts it marked.
//!
//! This file knows nothing of bytecode beyond where each program starts ([`WireFit`]). Must never
//! allocate when the buffers of an earlier, larger request will do.

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use gpfarm_gp::Problem;

use std::collections::HashSet;

use super::buffers::{Device, FitBuffers, LoopBuffers, SIDE_STREAMS, grow, grow_copy};
use super::contract::{
    FIT_CODE_KERNEL, FIT_SMALL_WIDTHS, FIT_WIDTHS, fit_rows, fit_tiles, fit_width, program_range, sums_of,
};
use super::{BLOCK, Fitted, GpuError, WireFit, driver, no_kernel};

/// Whether `GPFARM_FIT_PROFILE` is set: each width's launch is then waited for and timed, and the
/// times written to stderr (a diagnostic; it slows the fit).
pub use gpfarm_protocol::worker::profiling;

/// The most blocks a launch may have along y.
const MAX_GRID_Y: usize = 65_535;

impl Device {
    /// Loads the compiled fitting units `cubins` (each with [`FIT_CODE_KERNEL`]) in place of those
    /// loaded before, from the module cache where their CUBIN was loaded before.
    pub(super) fn load_fit_code(&mut self, cubins: &[Vec<u8>]) -> Result<(), GpuError> {
        let mut taken = HashSet::new();
        let mut code = Vec::with_capacity(cubins.len());
        for cubin in cubins {
            let module = self.modules.load(&self.ctx, cubin, &mut taken)?;
            let function = module.load_function(FIT_CODE_KERNEL).map_err(driver)?;
            code.push((module, function));
        }
        self.fit_code = code;
        Ok(())
    }

    /// Launches the fitting kernels over `fit`'s programs (asynchronously) and the sum of their
    /// tiles, leaving each program's sums packed ([`sums_of`] its parameters) in the fitting
    /// buffers; returns how the programs were launched ([`FitLaunch`]: their order, where each
    /// one's sums start there), for [`Device::run_fit`] to launch them again.
    pub(super) fn launch_fit(
        &mut self,
        problem: &Problem,
        fit: &WireFit,
        ncases: usize,
    ) -> Result<FitLaunch, GpuError> {
        let plan = self.upload_fit(fit, ncases)?;
        self.run_fit(problem, fit, &plan, Counts::Request)?;
        Ok(plan)
    }

    /// Checks `fit`, orders its programs into groups and uploads them: their words, values,
    /// counts and where each one's sums go, growing the buffers where they are too small.
    fn upload_fit(&mut self, fit: &WireFit, ncases: usize) -> Result<FitLaunch, GpuError> {
        // The fitting cases: evenly spaced ones where asked for, else all.
        let ncases = self.fit_cases.as_ref().map_or(ncases, |(_, n)| *n);
        let modules = self.fit.clone().ok_or_else(|| no_kernel("the fitting kernel"))?;
        let n = fit.offsets.len();
        if fit.param_offsets.len() != n || fit.nparams.len() != n {
            return Err(GpuError::Problem(format!(
                "{n} programs with {} first values and {} parameter counts",
                fit.param_offsets.len(),
                fit.nparams.len()
            )));
        }
        if let Some(k) = (0..n).find(|&k| fit.nparams[k] < 0) {
            return Err(GpuError::Problem(format!("program {k} has {} parameters", fit.nparams[k])));
        }
        // Each program's values lie inside the values, after the last program's (the step
        // kernel writes there).
        let mut free = 0usize;
        for k in 0..n {
            let (at, np) = (fit.param_offsets[k] as usize, fit.nparams[k] as usize);
            if at < free || at + np > fit.params.len() {
                return Err(GpuError::Problem(format!(
                    "program {k}'s {np} values from {at} are not its own among {} values",
                    fit.params.len()
                )));
            }
            free = at + np;
        }
        let width = |k: usize| fit_width(fit.nparams[k] as usize);
        if let Some(k) = (0..n).find(|&k| width(k).is_none()) {
            return Err(GpuError::Problem(format!(
                "program {k} has {} parameters: too many to fit on the GPU",
                fit.nparams[k]
            )));
        }
        if let Some(k) =
            (0..n).find(|&k| fit.code_of(k).is_some_and(|(u, _)| u as usize >= self.fit_code.len()))
        {
            return Err(GpuError::Problem(format!(
                "program {k} names compiled fitting unit {} of {}",
                fit.unit[k],
                self.fit_code.len()
            )));
        }
        // Each program's group: the index of its width among the interpreter's kernels, or after
        // them its width among the small-stack ones, or after those its compiled unit.
        let (nw, ns) = (modules.kernels.len(), modules.small.len());
        let small = |k: usize| fit.small.get(k).copied().unwrap_or(false);
        let group = |k: usize| match fit.code_of(k) {
            Some((u, _)) => nw + ns + u as usize,
            None => match modules.small.iter().position(|(w, _)| small(k) && Some(*w) == width(k)) {
                Some(s) => nw + s,
                None => modules.kernels.iter().position(|(w, _)| Some(*w) == width(k)).unwrap_or(0),
            },
        };
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&k| (stream_of(group(k)), group(k)));
        let groups: Vec<usize> = order.iter().map(|&k| group(k)).collect();
        // Where each program's code is: its first word, or its member of its compiled unit.
        let offsets: Vec<u32> =
            order.iter().map(|&k| fit.code_of(k).map_or(fit.offsets[k], |(_, m)| m)).collect();
        let sorted = |v: &[u32]| order.iter().map(|&k| v[k]).collect::<Vec<u32>>();
        let poffsets = sorted(&fit.param_offsets);
        let nparams: Vec<i32> = order.iter().map(|&k| fit.nparams[k]).collect();
        let mut at: Vec<i64> = Vec::with_capacity(n + 1);
        at.push(0);
        for &np in &nparams {
            at.push(at[at.len() - 1] + sums_of(np as usize) as i64);
        }
        let packed = at[n] as usize;
        if self.fit_buffers.is_none() {
            self.fit_buffers = Some(FitBuffers {
                params: self.stream.alloc_zeros(1).map_err(driver)?,
                poffsets: self.stream.alloc_zeros(1).map_err(driver)?,
                nparams: self.stream.alloc_zeros(1).map_err(driver)?,
                partial: Vec::new(),
                at: self.stream.alloc_zeros(1).map_err(driver)?,
                sums: self.stream.alloc_zeros(1).map_err(driver)?,
                looped: None,
            });
        }
        grow_copy(&self.stream, &fit.words, &mut self.words).map_err(driver)?;
        grow_copy(&self.stream, &offsets, &mut self.offsets).map_err(driver)?;
        let b = self.fit_buffers.as_mut().expect("made above");
        grow_copy(&self.stream, &fit.params, &mut b.params).map_err(driver)?;
        grow_copy(&self.stream, &poffsets, &mut b.poffsets).map_err(driver)?;
        grow_copy(&self.stream, &nparams, &mut b.nparams).map_err(driver)?;
        grow_copy(&self.stream, &at, &mut b.at).map_err(driver)?;
        grow(&self.stream, &mut b.sums, packed).map_err(driver)?;
        // Each stream's tile sums in a buffer of its own, so that the streams run side by side (a
        // kernel writing into a buffer waits for the last kernel that wrote into it).
        while b.partial.len() < SIDE_STREAMS {
            b.partial.push(self.stream.alloc_zeros(1).map_err(driver)?);
        }
        Ok(FitLaunch { order, groups, at, ncases, words: fit.words.len(), values: fit.params.len() })
    }

    /// Launches the fitting kernels over the programs of `plan` (uploaded from `fit` by
    /// [`Device::upload_fit`]) and the sum of their tiles, asynchronously, each program with the
    /// count `counts` names (a start with a negative one is not run and keeps its sums).
    ///
    /// Programs run in groups, one launch per group (or per [`MAX_GRID_Y`] programs of it): the
    /// interpreter's kernel of each width, and each compiled unit ([`Device::load_fit_code`]).
    /// Each group goes to a side stream (group `g` to stream `g` modulo their number), whose
    /// launches write tile sums of their own, so that the streams run side by side.
    pub(super) fn run_fit(
        &mut self,
        problem: &Problem,
        fit: &WireFit,
        plan: &FitLaunch,
        counts: Counts,
    ) -> Result<(), GpuError> {
        let modules = self.fit.clone().ok_or_else(|| no_kernel("the fitting kernel"))?;
        let (nw, ns) = (modules.kernels.len(), modules.small.len());
        let FitLaunch { order, groups, at, ncases, .. } = plan;
        let (n, ncases, nt) = (order.len(), *ncases, fit_tiles(*ncases));
        // The streams that get programs wait for the uploads (or the last step) on the main
        // stream, all before any launch (one joined later would wait for the launches the main
        // stream joined meanwhile).
        let streams = self.make_side_streams().map_err(driver)?.to_vec();
        let mut used: Vec<usize> = groups.iter().map(|&g| stream_of(g)).collect();
        used.dedup();
        for &s in &used {
            streams[s].join(&self.stream).map_err(driver)?;
        }
        let b = self.fit_buffers.as_mut().ok_or_else(|| no_kernel("the fitting buffers"))?;
        let counted = match counts {
            Counts::Request => &b.nparams,
            Counts::Loop => {
                &b.looped.as_ref().ok_or_else(|| no_kernel("the fitting loop's buffers"))?.running
            }
        };
        let (nc, ntiles, rows_per_thread) = (ncases as i32, nt as i32, fit_rows(ncases) as i32);
        let profile = profiling();
        let mut first = 0;
        while first < n {
            let s = stream_of(groups[first]);
            let end = first + groups[first..].iter().take_while(|&&g| stream_of(g) == s).count();
            let stream = &streams[s];
            let need = (at[end] - at[first]) as usize * nt;
            grow(stream, &mut b.partial[s], need).map_err(driver)?;
            let mut g_first = first;
            while g_first < end {
                let g = groups[g_first];
                let g_end = g_first + groups[g_first..end].iter().take_while(|&&h| h == g).count();
                let kernel = match g {
                    g if g < nw => &modules.kernels[g].1,
                    g if g < nw + ns => &modules.small[g - nw].1,
                    g => &self.fit_code[g - nw - ns].1,
                };
                // The width's plain twin, where it has one, runs the starts of a count of 0.
                let twin = if g < nw { modules.plain[g].as_ref() } else { None };
                for start in (g_first..g_end).step_by(MAX_GRID_Y) {
                    let rows = (g_end - start).min(MAX_GRID_Y);
                    let offsets = self.offsets.slice(start..start + rows);
                    let poffsets = b.poffsets.slice(start..start + rows);
                    let nparams = counted.slice(start..start + rows);
                    let at_view = b.at.slice(start..start + rows);
                    let from = (at[start] - at[first]) as usize * nt;
                    let to = (at[start + rows] - at[first]) as usize * nt;
                    let mut partial = b.partial[s].slice_mut(from..to.max(from + 1));
                    let words = self.words.slice(..plan.words.max(1));
                    let params = b.params.slice(..plan.values.max(1));
                    let cfg = LaunchConfig {
                        grid_dim: (nt as u32, rows as u32, 1),
                        block_dim: (BLOCK, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let t = profile.then(std::time::Instant::now);
                    for function in std::iter::once(kernel).chain(twin) {
                        let mut launch = stream.launch_builder(function);
                        self.fit_cases.as_ref().map_or(&self.cases, |(c, _)| c).pass(problem, &mut launch);
                        launch.arg(&nc);
                        launch.arg(&words);
                        launch.arg(&offsets);
                        launch.arg(&params);
                        launch.arg(&poffsets);
                        launch.arg(&nparams);
                        launch.arg(&fit.max_steps);
                        launch.arg(&ntiles);
                        launch.arg(&rows_per_thread);
                        launch.arg(&at_view);
                        launch.arg(&mut partial);
                        // SAFETY: `fit_source` and `fit_code_source` declare the problem's input and
                        // length pointers in kernel-parameter order, the targets, the case count, the
                        // words, one offset per program of the launch (for the interpreter's kernels
                        // the start of a program `assemble_structure` wrote, ending in `End`; for a
                        // compiled unit's, the program's member there, checked above to be loaded),
                        // the parameter values, each program's first value and count (at most this
                        // kernel's width; -1 where the loop does not run it), the step limit, the tile
                        // count, the rows per thread (`nt` tiles of them hold every case), where each
                        // program's sums start (`at`, one per program of the launch) and the tile sums:
                        // `nt` blocks of `sums_of` each program's parameters, from
                        // `(at[p] - at[0]) * nt` (sized above).
                        // (The twin takes the same arguments: the starts of a count of 0, which the
                        // width's kernel then leaves to it.)
                        unsafe { launch.launch(cfg) }.map_err(driver)?;
                    }
                    if let Some(t) = t {
                        stream.synchronize().map_err(driver)?;
                        let len: usize = order[start..start + rows]
                            .iter()
                            .map(|&k| program_range(&fit.offsets, fit.words.len(), k).len())
                            .sum();
                        let what = match g {
                            g if g < nw => format!("width {}", modules.kernels[g].0),
                            g if g < nw + ns => format!("width {}, small stack", modules.small[g - nw].0),
                            g => format!("compiled unit {}", g - nw - ns),
                        };
                        eprintln!(
                            "gpfarm fit profile: {what}: {rows} programs ({} words on average), {ncases} cases, {:.3} ms",
                            len / rows,
                            t.elapsed().as_secs_f64() * 1e3
                        );
                    }
                }
                g_first = g_end;
            }
            let count = (end - first) as i32;
            let mut launch = stream.launch_builder(&modules.tiles);
            let nparams = counted.slice(first..end);
            let at_view = b.at.slice(first..end);
            launch.arg(&b.partial[s]);
            launch.arg(&ntiles);
            launch.arg(&count);
            launch.arg(&nparams);
            launch.arg(&at_view);
            launch.arg(&mut b.sums);
            let cfg = LaunchConfig {
                grid_dim: (count as u32, 1, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the tiles kernel reads `nt` blocks of `sums_of(np)` tile sums per program
            // of this stream from `(at[p] - at[first]) * nt` in its tile sums (written above),
            // the program's parameter count (`nparams`: its own, at most FIT_PARAMS, or -1 for
            // none) and where its sums start (`at`, one per program of this stream), and writes
            // `sums_of(np)` sums there, inside `sums` (sized by `upload_fit` for all of them).
            unsafe { launch.launch(cfg) }.map_err(driver)?;
            self.stream.join(stream).map_err(driver)?;
            first = end;
        }
        Ok(())
    }

    /// The packed sums of the last launch of `plan`'s programs, each program's in the request's
    /// order, one after the other.
    pub(super) fn read_fit(&mut self, plan: &FitLaunch) -> Result<Vec<f64>, GpuError> {
        let (order, at) = (&plan.order, &plan.at);
        let b = self.fit_buffers.as_ref().ok_or_else(|| no_kernel("the fitting kernel"))?;
        let packed = at[order.len()] as usize;
        let mut ran = vec![0.0f64; packed];
        self.stream.memcpy_dtoh(&b.sums.slice(..packed), &mut ran).map_err(driver)?;
        let mut by_request: Vec<&[f64]> = vec![&[]; order.len()];
        for (j, &k) in order.iter().enumerate() {
            by_request[k] = &ran[at[j] as usize..at[j + 1] as usize];
        }
        Ok(by_request.concat())
    }

    /// Launches every fitting kernel of the interpreter (each width's and each small-stack one)
    /// and the tiles kernel once over `ncases` cases with a program of its width that the launch
    /// does not run (the step kernel marks it so: no program code runs), so that what a kernel's
    /// first launch costs, loading it and sizing its local memory, is paid here and not in the
    /// first fit. Queued, not waited for.
    pub(super) fn warm_fit(&mut self, problem: &Problem, ncases: usize) -> Result<(), GpuError> {
        let mut fit = WireFit::new(0);
        for w in FIT_WIDTHS {
            fit.push_with(&[0], &vec![0.0; w], false, None);
        }
        for w in FIT_SMALL_WIDTHS {
            fit.push_with(&[0], &vec![0.0; w], true, None);
        }
        let plan = self.upload_fit(&fit, ncases)?;
        self.fit_step(&plan, 0, 0)?;
        self.run_fit(problem, &fit, &plan, Counts::Loop)
    }

    /// Queues the step kernel ([`super::contract::FIT_STEP_KERNEL`]) over every start of `plan`
    /// in `mode`, each start making at most `iterations` trials, on the main stream (after the
    /// launches it joined), making the loop's buffers first where they are too small.
    pub(super) fn fit_step(
        &mut self,
        plan: &FitLaunch,
        mode: i32,
        iterations: usize,
    ) -> Result<(), GpuError> {
        let modules = self.fit.clone().ok_or_else(|| no_kernel("the fitting kernel"))?;
        let n = plan.order.len();
        let packed = plan.at[n] as usize;
        let b = self.fit_buffers.as_mut().ok_or_else(|| no_kernel("the fitting buffers"))?;
        let stream = &self.stream;
        if b.looped.is_none() {
            b.looped = Some(LoopBuffers {
                best: stream.alloc_zeros(1).map_err(driver)?,
                work: stream.alloc_zeros(1).map_err(driver)?,
                bestp: stream.alloc_zeros(1).map_err(driver)?,
                lambda: stream.alloc_zeros(1).map_err(driver)?,
                active: stream.alloc_zeros(1).map_err(driver)?,
                running: stream.alloc_zeros(1).map_err(driver)?,
                first: stream.alloc_zeros(1).map_err(driver)?,
                sse: stream.alloc_zeros(1).map_err(driver)?,
                launches: stream.alloc_zeros(1).map_err(driver)?,
                trials: stream.alloc_zeros(1).map_err(driver)?,
            });
        }
        let l = b.looped.as_mut().expect("made above");
        for v in [&mut l.best, &mut l.work] {
            grow(stream, v, packed).map_err(driver)?;
        }
        for v in [&mut l.lambda, &mut l.first, &mut l.sse] {
            grow(stream, v, n).map_err(driver)?;
        }
        for v in [&mut l.active, &mut l.running, &mut l.launches, &mut l.trials] {
            grow(stream, v, n).map_err(driver)?;
        }
        grow(stream, &mut l.bestp, plan.values).map_err(driver)?;
        let nprograms = n as i32;
        let mut launch = stream.launch_builder(&modules.step);
        launch.arg(&nprograms);
        launch.arg(&mode);
        launch.arg(&b.nparams);
        launch.arg(&b.poffsets);
        launch.arg(&b.at);
        launch.arg(&b.sums);
        launch.arg(&mut l.best);
        launch.arg(&mut l.work);
        launch.arg(&mut b.params);
        launch.arg(&mut l.bestp);
        launch.arg(&mut l.lambda);
        launch.arg(&mut l.active);
        launch.arg(&mut l.running);
        launch.arg(&mut l.first);
        launch.arg(&mut l.sse);
        launch.arg(&mut l.launches);
        launch.arg(&mut l.trials);
        let iterations = i32::try_from(iterations).unwrap_or(i32::MAX);
        launch.arg(&iterations);
        let cfg =
            LaunchConfig { grid_dim: (n.max(1) as u32, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the step kernel takes, for each of the `n` starts of `plan` (in its order, as
        // `upload_fit` wrote them): its parameter count (`nparams`, at most FIT_PARAMS), its
        // first value (`poffsets`, inside `params` and `bestp`, each sized for `plan.values`),
        // where its sums start (`at`, inside `sums`, `best` and `work`, each sized for `packed`),
        // and one entry each of `lambda`, `active`, `running`, `first`, `sse`, `launches` and
        // `trials` (sized for `n`), then the trials a start may make.
        // A block of 32 threads per start.
        unsafe { launch.launch(cfg) }.map_err(driver)?;
        Ok(())
    }

    /// The fitting loop's outcome once its last step ran: each start's best values (in the
    /// request's layout), their sums of squares, those where it began and the launches that ran
    /// it (in the request's order); the time is left to the caller.
    pub(super) fn read_loop(&mut self, plan: &FitLaunch) -> Result<Fitted, GpuError> {
        let l = self
            .fit_buffers
            .as_ref()
            .and_then(|b| b.looped.as_ref())
            .ok_or_else(|| no_kernel("the fitting loop's buffers"))?;
        let mut params = vec![0.0f32; plan.values];
        if plan.values > 0 {
            self.stream.memcpy_dtoh(&l.bestp.slice(..plan.values), &mut params).map_err(driver)?;
        }
        let launches: Vec<i32> = in_request_order(&self.stream, &l.launches, &plan.order)?;
        Ok(Fitted {
            params,
            sse: in_request_order(&self.stream, &l.sse, &plan.order)?,
            first_sse: in_request_order(&self.stream, &l.first, &plan.order)?,
            launches: launches.into_iter().map(|n| n.max(0) as u32).collect(),
            took_us: 0,
        })
    }
}

/// The first `order.len()` values of `v`, one per start in launch order, copied back and put in
/// the request's order (`order[j]`: the request's index of the start launched `j`-th).
fn in_request_order<T: DeviceRepr + Default + Copy>(
    stream: &std::sync::Arc<CudaStream>,
    v: &CudaSlice<T>,
    order: &[usize],
) -> Result<Vec<T>, GpuError> {
    let n = order.len();
    let mut ran = vec![T::default(); n];
    if n > 0 {
        stream.memcpy_dtoh(&v.slice(..n), &mut ran).map_err(driver)?;
    }
    let mut by_request = vec![T::default(); n];
    for (j, &k) in order.iter().enumerate() {
        by_request[k] = ran[j];
    }
    Ok(by_request)
}

/// A fit's programs as [`Device::upload_fit`] laid them out: the order they run in (by side
/// stream, then group), each one's group in that order, where each one's sums start (and after
/// the last, their total), the cases they run on, and how many words and values were uploaded.
pub(super) struct FitLaunch {
    pub(super) order: Vec<usize>,
    groups: Vec<usize>,
    pub(super) at: Vec<i64>,
    ncases: usize,
    words: usize,
    values: usize,
}

/// The parameter counts a launch of the fitting kernels reads: the request's (every program
/// runs) or the fitting loop's (the starts its last step marked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Counts {
    Request,
    Loop,
}

/// The side stream of group `g`.
fn stream_of(g: usize) -> usize {
    g % SIDE_STREAMS
}
