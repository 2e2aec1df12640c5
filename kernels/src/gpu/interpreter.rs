//! Launching the interpreter over a population.
//!
//! This file knows nothing of bytecode beyond where each program starts and ends
//! ([`super::contract`]). Programs are launched deep ones first and longest first within each
//! kind, and the fitness comes back in the population's order through the returned launch order.
//! Must never allocate when the buffers of an earlier, larger population will do
//! ([`super::buffers`]).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use gpfarm_gp::Problem;

use super::buffers::{Device, grow_copy, tiles};
use super::contract::{DEEP, program_range};
use super::{BLOCK, GpuError, WirePopulation, driver, no_kernel};

/// The most blocks a launch may have along y.
const MAX_GRID_Y: usize = 65_535;

impl Device {
    /// Launches the interpreter over `population` (asynchronously), one block per program and
    /// tile of cases, writing the tile sums into `partial`.
    pub(super) fn launch_interpreter(
        &mut self,
        problem: &Problem,
        population: &WirePopulation,
        ncases: usize,
    ) -> Result<Vec<usize>, GpuError> {
        let n = population.offsets.len();
        let (small, large, _) = self.interpret.clone().ok_or_else(|| no_kernel("the interpreter"))?;
        self.ensure_fitness(n, ncases).map_err(driver)?;
        // Programs deeper than the small kernel's stack first (they run in the large one), then
        // the rest; longest first within each, as the GPU starts blocks in order and the slowest
        // programs' tiles then do not trail at the end of the launch.
        let len = |k: usize| program_range(&population.offsets, population.words.len(), k).len();
        let deep = |k: usize| population.offsets[k] & DEEP != 0;
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&k| std::cmp::Reverse((deep(k), len(k))));
        let ndeep = order.iter().filter(|&&k| deep(k)).count();
        let sorted: Vec<u32> = order.iter().map(|&k| population.offsets[k]).collect();
        grow_copy(&self.stream, &population.words, &mut self.words).map_err(driver)?;
        grow_copy(&self.stream, &sorted, &mut self.offsets).map_err(driver)?;
        let words = self.words.slice(..population.words.len().max(1));
        let offsets = &self.offsets;
        let (nc, nt) = (ncases as i32, tiles(ncases) as i32);
        let groups = [(&large, 0..ndeep), (&small, ndeep..n)];
        for (function, rows) in groups {
            for first in rows.clone().step_by(MAX_GRID_Y) {
                let rows = (rows.end - first).min(MAX_GRID_Y);
                let offsets = offsets.slice(first..first + rows);
                let mut partial = self.partial.slice_mut(first * nt as usize..(first + rows) * nt as usize);
                let mut b = self.stream.launch_builder(function);
                self.cases.pass(problem, &mut b);
                b.arg(&nc);
                b.arg(&words);
                b.arg(&offsets);
                b.arg(&population.max_steps);
                b.arg(&nt);
                b.arg(&mut partial);
                let cfg = LaunchConfig {
                    grid_dim: (nt as u32, rows as u32, 1),
                    block_dim: (BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: `interpreter_source` declares the problem's input and length pointers in
                // kernel-parameter order, the targets, the case count, the words, the offsets (one
                // per program of the launch, each the start of a program the bytecode assembler
                // wrote, ending in `End`, flagged when it has no jump, and given to the large
                // kernel when flagged deep), the step limit, the tile count and the tile sums,
                // which hold `ntiles` values per program of the launch (`ensure_fitness`).
                unsafe { b.launch(cfg) }.map_err(driver)?;
            }
        }
        Ok(order)
    }
}
