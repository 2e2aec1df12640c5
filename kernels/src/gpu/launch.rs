//! Launches over compiled individuals: each run of one kernel over every case into its output
//! slabs, then the fitness kernel over the slabs and the tiles kernel over its tile sums, which
//! the interpreter ends with too; and reading the fitness values back.
//!
//! Every launch is asynchronous on the context's one stream; only [`Device::read_fitness`]
//! waits. The argument lists follow the kernels' declarations in the problem's convention and in
//! [`super::fitness`], which each launch's `SAFETY` note names. Must never allocate device memory:
//! the buffers were grown for the generation before ([`super::buffers`]).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, CudaStream, DriverError, LaunchConfig, PushKernelArg};
use gpfarm_gp::program::FAILED_FLAGS;
use gpfarm_gp::{ParamRole, Problem};

use super::buffers::{DevView, Device, tiles};
use super::modules::Run;
use super::{BLOCK, CompiledUnit, GpuError, driver, no_kernel};

impl Device {
    /// Launches [`super::TILES_KERNEL`] over `n` programs' tile sums and reads their fitness back.
    pub(super) fn sum_tiles(
        &mut self,
        tiles_kernel: &CudaFunction,
        n: usize,
        ncases: usize,
    ) -> Result<Vec<f64>, GpuError> {
        self.launch_tiles(tiles_kernel, n, ncases)?;
        self.read_fitness(n)
    }

    /// The fitness of the first `n` programs (waits for the stream).
    pub(super) fn read_fitness(&self, n: usize) -> Result<Vec<f64>, GpuError> {
        self.stream.clone_dtoh(&self.fitness.slice(..n)).map_err(driver)
    }

    /// Launches [`super::TILES_KERNEL`] over `n` programs' tile sums (asynchronously).
    pub(super) fn launch_tiles(
        &mut self,
        tiles_kernel: &CudaFunction,
        n: usize,
        ncases: usize,
    ) -> Result<(), GpuError> {
        let (nc, nt) = (ncases as i32, tiles(ncases) as i32);
        let mut b = self.stream.launch_builder(tiles_kernel);
        b.arg(&self.partial);
        b.arg(&nt);
        b.arg(&nc);
        b.arg(&mut self.fitness);
        let cfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `tiles_source` declares the tile sums, the tile count, the case count and the
        // fitness array; `ensure_fitness` made room for `ntiles` sums and one fitness per program.
        unsafe { b.launch(cfg) }.map_err(driver)?;
        Ok(())
    }

    /// Launches `run` over all cases (asynchronously, on `stream`): its kernel for one
    /// individual, or rows `0..len` of a switch kernel from branch `first`, filling the output
    /// slabs of `slot..slot + len`.
    pub(super) fn launch(
        &self,
        problem: &Problem,
        run: &Run,
        ncases: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<(), DriverError> {
        let (slot, len) = (run.slot, run.len);
        let params = problem.kernel_params();
        let mut views: Vec<DevView<'_>> = Vec::with_capacity(params.len());
        for (k, p) in params.iter().enumerate() {
            match p.role {
                ParamRole::Input(_) | ParamRole::Lengths(_) => {
                    if let Some(buf) = &self.cases.params[k] {
                        views.push(buf.whole());
                    }
                }
                ParamRole::Output(o) => {
                    views.push(self.outputs[o].view(slot * ncases..(slot + len) * ncases))
                }
                ParamRole::NumCases => {}
            }
        }
        let n = ncases as i32;
        let first = run.first.map(|b| b as i32);
        let mut b = stream.launch_builder(&run.function);
        for v in &views {
            match v {
                DevView::Int(v) => b.arg(v),
                DevView::Float(v) => b.arg(v),
            };
        }
        b.arg(&n);
        if let Some(first) = &first {
            b.arg(first);
        }
        // Free parameters: the rows' values, and for a switch kernel their stride; a null
        // pointer when none were given (individuals with their values written in read none).
        let stride = self.value_stride as i32;
        let values = (self.value_stride > 0).then(|| self.values.slice(slot * self.value_stride..));
        let null = 0u64;
        if problem.grammar().has_params() {
            match &values {
                Some(v) => b.arg(v),
                None => b.arg(&null),
            };
            if first.is_some() {
                b.arg(&stride);
            }
        }
        let cfg = LaunchConfig {
            grid_dim: ((ncases as u32).div_ceil(BLOCK), len as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument list follows the problem's kernel-parameter convention, which
        // `gp` checks every template against, followed by `int first` for a switch kernel
        // (`Shape::Switch`), then for a problem with free parameters the values' pointer (and a
        // switch kernel's stride), as `render` and `ptx::emit` declare them; every buffer holds
        // the sizes that convention promises (inputs for all cases, `len` output slabs of
        // `ncases` values, one per row of the launch, `value_stride` values per row, which
        // `evaluate_watched` checked).
        unsafe { b.launch(cfg) }.map(|_| ())
    }

    /// Which of the generation's `n` individuals ran past the step limit, by slot: each unit's
    /// failure flags ([`FAILED_FLAGS`], absent from a module none of whose members counts
    /// steps), read after the launches. `modules[u]` is `units[u]`'s.
    pub(super) fn read_failures(
        &self,
        units: &[CompiledUnit<'_>],
        modules: &[Arc<CudaModule>],
        n: usize,
    ) -> Result<Vec<bool>, GpuError> {
        let mut failed = vec![false; n];
        for (u, m) in units.iter().zip(modules) {
            let Ok(flags) = m.get_global(FAILED_FLAGS, &self.stream) else { continue };
            let bytes: Vec<u8> = self.stream.clone_dtoh(&flags).map_err(driver)?;
            for (word, &slot) in bytes.chunks_exact(4).zip(u.members) {
                if word != [0; 4] && slot < n {
                    failed[slot] = true;
                }
            }
        }
        Ok(failed)
    }

    pub(super) fn reduce(&mut self, n: usize, ncases: usize) -> Result<Vec<f64>, GpuError> {
        let (nc, nt) = (ncases as i32, tiles(ncases) as i32);
        let (reduce, sum) = self.reduce.clone().ok_or_else(|| no_kernel("the fitness kernel"))?;
        let mut b = self.stream.launch_builder(&reduce);
        for o in &self.outputs {
            o.pass(&mut b);
        }
        self.cases.targets.pass(&mut b);
        b.arg(&nc);
        b.arg(&nt);
        b.arg(&mut self.partial);
        let cfg = LaunchConfig {
            grid_dim: (n as u32, nt as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `fitness_source` declares one pointer per output slab, the targets, the case
        // count, the tile count and the tile sums, in this order; slabs hold `capacity >= n`
        // individuals, the tile sums `ntiles` per individual (`ensure_capacity`).
        unsafe { b.launch(cfg) }.map_err(driver)?;
        self.sum_tiles(&sum, n, ncases)
    }
}
