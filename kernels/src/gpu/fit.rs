//! Launching the interpreter's fitting kernel over programs with free parameters, and reading
//! back their least-squares sums ([`FIT_SUMS`] per program).
//!
//! This file knows nothing of bytecode beyond where each program starts ([`WireFit`]). Must never
//! allocate when the buffers of an earlier, larger request will do.

use cudarc::driver::{LaunchConfig, PushKernelArg};
use gpfarm_gp::Problem;

use super::buffers::{Device, FitBuffers, grow_copy};
use super::contract::{FIT_SUMS, fit_tiles, fit_width};
use super::{BLOCK, GpuError, WireFit, driver, no_kernel};

/// The most blocks a launch may have along y.
const MAX_GRID_Y: usize = 65_535;

impl Device {
    /// Launches the fitting kernel over `fit`'s programs (asynchronously) and the sum of their
    /// tiles, leaving [`FIT_SUMS`] sums per program in the fitting buffers.
    pub(super) fn launch_fit(
        &mut self,
        problem: &Problem,
        fit: &WireFit,
        ncases: usize,
    ) -> Result<Vec<usize>, GpuError> {
        // The fitting cases: evenly spaced ones where asked for, else all.
        let ncases = self.fit_cases.as_ref().map_or(ncases, |(_, n)| *n);
        let modules = self.fit.clone().ok_or_else(|| no_kernel("the fitting kernel"))?;
        let n = fit.offsets.len();
        let nt = fit_tiles(ncases);
        // Programs by width (narrowest first), each width one launch.
        let width = |k: usize| fit_width(fit.nparams[k].max(0) as usize);
        if let Some(k) = (0..n).find(|&k| width(k).is_none()) {
            return Err(GpuError::Problem(format!(
                "program {k} has {} parameters: too many to fit on the GPU",
                fit.nparams[k]
            )));
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&k| width(k));
        let sorted = |v: &[u32]| order.iter().map(|&k| v[k]).collect::<Vec<u32>>();
        let (offsets, poffsets) = (sorted(&fit.offsets), sorted(&fit.param_offsets));
        let nparams: Vec<i32> = order.iter().map(|&k| fit.nparams[k]).collect();
        if self.fit_buffers.is_none() {
            self.fit_buffers = Some(FitBuffers {
                params: self.stream.alloc_zeros(1).map_err(driver)?,
                poffsets: self.stream.alloc_zeros(1).map_err(driver)?,
                nparams: self.stream.alloc_zeros(1).map_err(driver)?,
                partial: self.stream.alloc_zeros(1).map_err(driver)?,
                sums: self.stream.alloc_zeros(1).map_err(driver)?,
            });
        }
        grow_copy(&self.stream, &fit.words, &mut self.words).map_err(driver)?;
        grow_copy(&self.stream, &offsets, &mut self.offsets).map_err(driver)?;
        let b = self.fit_buffers.as_mut().expect("made above");
        grow_copy(&self.stream, &fit.params, &mut b.params).map_err(driver)?;
        grow_copy(&self.stream, &poffsets, &mut b.poffsets).map_err(driver)?;
        grow_copy(&self.stream, &nparams, &mut b.nparams).map_err(driver)?;
        let need = n * nt * FIT_SUMS;
        if b.partial.len() < need {
            b.partial = self.stream.alloc_zeros(need.next_power_of_two()).map_err(driver)?;
        }
        if b.sums.len() < n * FIT_SUMS {
            b.sums = self.stream.alloc_zeros((n * FIT_SUMS).next_power_of_two()).map_err(driver)?;
        }
        let (nc, ntiles) = (ncases as i32, nt as i32);
        let mut first = 0;
        for (w, kernel) in &modules.kernels {
            let w = *w;
            let end = first + order[first..].iter().take_while(|&&k| width(k) == Some(w)).count();
            for start in (first..end).step_by(MAX_GRID_Y) {
                let rows = (end - start).min(MAX_GRID_Y);
                let offsets = self.offsets.slice(start..start + rows);
                let poffsets = b.poffsets.slice(start..start + rows);
                let nparams = b.nparams.slice(start..start + rows);
                let mut partial = b.partial.slice_mut(start * nt * FIT_SUMS..(start + rows) * nt * FIT_SUMS);
                let words = self.words.slice(..fit.words.len().max(1));
                let params = b.params.slice(..fit.params.len().max(1));
                let mut launch = self.stream.launch_builder(kernel);
                self.fit_cases.as_ref().map_or(&self.cases, |(c, _)| c).pass(problem, &mut launch);
                launch.arg(&nc);
                launch.arg(&words);
                launch.arg(&offsets);
                launch.arg(&params);
                launch.arg(&poffsets);
                launch.arg(&nparams);
                launch.arg(&fit.max_steps);
                launch.arg(&ntiles);
                launch.arg(&mut partial);
                let cfg = LaunchConfig {
                    grid_dim: (nt as u32, rows as u32, 1),
                    block_dim: (BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: `fit_source` declares the problem's input and length pointers in kernel-parameter
                // order, the targets, the case count, the words, one offset per program of the
                // launch (each the start of a program `assemble_structure` wrote, ending in
                // `End`), the parameter values, each program's first value and count (at most
                // this kernel's width), the step limit, the tile count and `FIT_SUMS` sums per
                // program and tile (`partial`, sized above).
                unsafe { launch.launch(cfg) }.map_err(driver)?;
            }
            first = end;
        }
        let n32 = n as i32;
        let mut launch = self.stream.launch_builder(&modules.tiles);
        launch.arg(&b.partial);
        launch.arg(&ntiles);
        launch.arg(&n32);
        launch.arg(&mut b.sums);
        let cfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the tiles kernel reads `ntiles * FIT_SUMS` sums per program of `partial` and
        // writes `FIT_SUMS` per program into `sums`, both sized above for `n` programs.
        unsafe { launch.launch(cfg) }.map_err(driver)?;
        Ok(order)
    }

    /// The sums of the last [`Device::launch_fit`], whose programs ran in `order`, in the
    /// request's order.
    pub(super) fn read_fit(&mut self, order: &[usize]) -> Result<Vec<f64>, GpuError> {
        let b = self.fit_buffers.as_ref().ok_or_else(|| no_kernel("the fitting kernel"))?;
        let n = order.len();
        let mut ran = vec![0.0f64; n * FIT_SUMS];
        self.stream.memcpy_dtoh(&b.sums.slice(..n * FIT_SUMS), &mut ran).map_err(driver)?;
        let mut out = vec![0.0f64; n * FIT_SUMS];
        for (j, &k) in order.iter().enumerate() {
            out[k * FIT_SUMS..(k + 1) * FIT_SUMS].copy_from_slice(&ran[j * FIT_SUMS..(j + 1) * FIT_SUMS]);
        }
        Ok(out)
    }
}
