//! Evaluating compiled individuals on the GPU.
//!
//! The context is created once and the problem's test cases are uploaded once; each generation
//! loads its CUBINs, launches every individual over all cases (one thread per case, outputs in a
//! slab per individual), reduces fitness on the GPU (one block per tile of cases and individual,
//! then one per individual, [`TILE`]) so that only one `double` per individual is read back, and
//! unloads its modules again.
//!
//! Faults: a launch the driver refuses (too many resources, ...) fails only that individual, with
//! the reason. A kernel that faults while running (illegal address, trap) leaves a sticky error,
//! and on the GPU host that poisons every CUDA context of the process: a fresh context created
//! afterwards fails with the same error (measured on an H100, driver 580). The evaluator then
//! returns [`GpuError::Fault`] and refuses further work; recovering on the GPU needs a new
//! process. `gpfarm evolve` continues on the CPU evaluator.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DriverError, LaunchArgs,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use gpfarm_gp::problem::{Column, InputColumn, ScalarType};
use gpfarm_gp::{FitnessKind, ParamRole, Problem};
use thiserror::Error;

// Defined with the worker's wire, so that the GPU worker's parent (in `gpfarm-client`) speaks the
// same types as this evaluator.
pub use gpfarm_protocol::worker::{CompiledUnit, GpuGeneration, KernelRef, WirePopulation};

use crate::interp::{DEEP, INTERP_KERNEL_LARGE, INTERP_KERNEL_SMALL};

/// Threads per block for individuals' kernels and for the fitness reduction.
pub const BLOCK: u32 = 256;
/// Cases each lane of a tile sums ([`TILE`]).
pub const ROWS: u32 = 4;
/// Cases per tile. How every GPU route sums a program's per-case fitness terms, so that all
/// give the same bits: the cases are cut into tiles of [`BLOCK`] × [`ROWS`]. In a tile, lane `l`
/// of the block adds the terms of cases `l`, `l + BLOCK`, … (`ROWS` of them, in this order, from
/// 0.0) to its own `double`; the `BLOCK` lane sums are then added pairwise (lane `l` takes lane
/// `l + w` for `w` = 128, 64, …, 1). The tile sums are summed the same way: lane `l` adds tiles
/// `l`, `l + BLOCK`, … in order, then pairwise. Tiles let a program's cases spread over as many
/// blocks as the GPU holds, whatever the population's size.
pub const TILE: u32 = BLOCK * ROWS;
/// Name of the fitness kernel in [`fitness_source`]: the sum of each tile of cases.
pub const FITNESS_KERNEL: &str = "gpfarm_fitness";
/// Name of the kernel that sums each program's tiles into its fitness, in [`fitness_source`] and
/// in the interpreter's source.
pub const TILES_KERNEL: &str = "gpfarm_tiles";

/// The GPU could not be used at all.
#[derive(Debug, Error)]
pub enum GpuError {
    /// No driver or no device.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// A driver call failed outside any individual's kernel.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// The problem cannot be evaluated on the GPU as declared.
    #[error("{0}")]
    Problem(String),
    /// The pipe to the parent failed (worker side).
    #[error("GPU worker pipe")]
    Pipe(#[from] gpfarm_protocol::worker::FrameError),
    /// A kernel faulted while running; this process can no longer use the GPU.
    #[error("a kernel faulted on the GPU ({0}); the CUDA context of this process is unusable")]
    Fault(String),
    /// In careful mode: individual `individual`'s kernel faulted; the context is unusable.
    #[error("individual {individual}'s kernel faulted on the GPU ({why})")]
    FaultAt {
        /// Index of the individual among the generation's.
        individual: usize,
        /// The driver's error.
        why: String,
    },
}

fn driver(e: DriverError) -> GpuError {
    GpuError::Driver(format!("{e:?}"))
}

/// How many GPUs this process sees (0 without a driver). Never panics.
pub fn device_count() -> usize {
    // SAFETY: only dlopens the driver library to see whether it exists.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// The first GPU's name and compute capability, or why there is none. Never panics.
pub fn probe() -> Result<(String, (i32, i32)), GpuError> {
    // SAFETY: only dlopens the driver library to see whether it exists.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoGpu("the CUDA driver (libcuda.so) is not installed".into()));
    }
    let count = CudaContext::device_count().map_err(|e| GpuError::NoGpu(format!("{e:?}")))?;
    if count < 1 {
        return Err(GpuError::NoGpu("the CUDA driver sees no device".into()));
    }
    let ctx = CudaContext::new(0).map_err(|e| GpuError::NoGpu(format!("{e:?}")))?;
    Ok((ctx.name().map_err(driver)?, ctx.compute_capability().map_err(driver)?))
}

/// CUDA C of the fitness reduction for `problem`, in two kernels. [`FITNESS_KERNEL`] runs one
/// block per individual and tile of [`TILE`] cases (grid: individuals × tiles), reading the
/// output slabs (`ncases` values per individual) and writing the tile's sum of per-case terms;
/// [`TILES_KERNEL`] sums each individual's tiles and writes one `double` per individual. It
/// computes what the CPU scorer computes: RMSE accumulated in double, count of exact matches,
/// or summed popcount of packed output bits against the target.
///
/// The order of summation is the one every GPU route keeps ([`TILE`]), so the
/// interpreter, which computes its terms itself, gets the same bits.
pub fn fitness_source(problem: &Problem) -> Result<String, GpuError> {
    let spec = problem.spec();
    let ty = |t: ScalarType| t.c_name();
    let mut params: Vec<String> = spec
        .outputs
        .iter()
        .enumerate()
        .map(|(k, o)| format!("const {}* __restrict__ o{k}", ty(o.ty)))
        .collect();
    params.push(format!("const {}* __restrict__ target", ty(spec.target.ty)));
    params.push("int ncases".into());
    params.push("int ntiles".into());
    params.push("double* __restrict__ partial".into());
    let (term, finish) = fitness_term(problem, &|k| format!("o{k}[base + c]"))?;
    Ok(format!(
        "extern \"C\" __global__ void __launch_bounds__({BLOCK}) {FITNESS_KERNEL}({params})\n{{\n    __shared__ double part[{BLOCK}];\n    const size_t base = (size_t)blockIdx.x * (size_t)ncases;\n    const int first = blockIdx.y * {TILE} + threadIdx.x;\n    double s = 0.0;\n    for (int j = 0; j < {ROWS}; ++j) {{\n        const int c = first + j * {BLOCK};\n        if (c >= ncases) break;\n        {term}\n    }}\n{tail}}}\n\n{tiles}",
        params = params.join(", "),
        tail = block_sum("partial[(size_t)blockIdx.x * ntiles + blockIdx.y] = part[0];"),
        tiles = tiles_source(finish),
    ))
}

/// The end of a block's sum: every lane's `s` into shared `part`, the pairwise sum into
/// `part[0]`, then `store` by lane 0.
pub(crate) fn block_sum(store: &str) -> String {
    format!(
        "    part[threadIdx.x] = s;\n    __syncthreads();\n    for (int w = {BLOCK} / 2; w > 0; w >>= 1) {{\n        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];\n        __syncthreads();\n    }}\n    if (threadIdx.x == 0) {store}\n"
    )
}

/// CUDA C of [`TILES_KERNEL`]: one block per program sums its `ntiles` tile sums into its
/// fitness, ending with `finish` (the fitness of the sum `part[0]` over `ncases` cases). A NaN
/// tile (a failed program) gives a NaN fitness.
pub(crate) fn tiles_source(finish: &str) -> String {
    format!(
        "extern \"C\" __global__ void __launch_bounds__({BLOCK}) {TILES_KERNEL}(const double* __restrict__ partial, int ntiles, int ncases, double* __restrict__ fitness)\n{{\n    __shared__ double part[{BLOCK}];\n    const double* __restrict__ p = partial + (size_t)blockIdx.x * ntiles;\n    double s = 0.0;\n    for (int k = threadIdx.x; k < ntiles; k += {BLOCK}) s += p[k];\n{tail}}}\n",
        tail = block_sum(&format!("fitness[blockIdx.x] = {finish};"))
    )
}

/// The per-case term and the final expression of `problem`'s fitness, in CUDA C: the term adds
/// case `c`'s share to the `double s` (the output `k` of case `c` is `output(k)`, the target
/// `target[c]`), the final expression turns the block's sum `part[0]` into the fitness. Shared
/// by the fitness kernel and the interpreter, so both compute the same bits.
pub(crate) fn fitness_term(
    problem: &Problem,
    output: &dyn Fn(usize) -> String,
) -> Result<(String, &'static str), GpuError> {
    let spec = problem.spec();
    let term = match spec.fitness {
        FitnessKind::Rmse | FitnessKind::Correct if spec.outputs.len() != 1 => {
            return Err(GpuError::Problem(format!("{:?} needs exactly one output", spec.fitness)));
        }
        FitnessKind::Rmse => {
            format!("double d = (double){} - (double)target[c];\n        s += d * d;", output(0))
        }
        FitnessKind::Correct => format!("s += ((double){} == (double)target[c]) ? 1.0 : 0.0;", output(0)),
        FitnessKind::BitErrors => {
            let mut t = String::from("unsigned packed = 0u;\n");
            for k in 0..spec.outputs.len().min(32) {
                t.push_str(&format!("        packed |= ((unsigned)({} & 1)) << {k};\n", output(k)));
            }
            t.push_str(&format!(
                "        s += (double)__popc((packed ^ (unsigned)(long long)target[c]) & {}u);",
                spec.bit_mask()
            ));
            t
        }
    };
    let finish = match spec.fitness {
        FitnessKind::Rmse => "ncases > 0 ? sqrt(part[0] / (double)ncases) : 0.0",
        _ => "part[0]",
    };
    Ok((term, finish))
}

enum DevCol {
    Int(CudaSlice<i32>),
    Float(CudaSlice<f32>),
}

enum DevView<'a> {
    Int(CudaView<'a, i32>),
    Float(CudaView<'a, f32>),
}

impl DevCol {
    fn upload(stream: &Arc<CudaStream>, col: &Column) -> Result<DevCol, DriverError> {
        Ok(match col {
            Column::Int(v) => DevCol::Int(stream.clone_htod(v)?),
            Column::Float(v) => DevCol::Float(stream.clone_htod(v)?),
        })
    }

    fn zeros(stream: &Arc<CudaStream>, float: bool, n: usize) -> Result<DevCol, DriverError> {
        Ok(if float {
            DevCol::Float(stream.alloc_zeros(n.max(1))?)
        } else {
            DevCol::Int(stream.alloc_zeros(n.max(1))?)
        })
    }

    fn view(&self, range: std::ops::Range<usize>) -> DevView<'_> {
        match self {
            DevCol::Int(s) => DevView::Int(s.slice(range)),
            DevCol::Float(s) => DevView::Float(s.slice(range)),
        }
    }

    /// Passes the whole buffer as the next kernel argument.
    fn pass<'a>(&'a self, b: &mut LaunchArgs<'a>) {
        match self {
            DevCol::Int(s) => b.arg(s),
            DevCol::Float(s) => b.arg(s),
        };
    }

    fn whole(&self) -> DevView<'_> {
        match self {
            DevCol::Int(s) => DevView::Int(s.slice(..)),
            DevCol::Float(s) => DevView::Float(s.slice(..)),
        }
    }
}

/// Everything that lives in one CUDA context; rebuilt after a fault.
struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// One buffer per kernel parameter that reads case data (by parameter position).
    params: Vec<Option<DevCol>>,
    targets: DevCol,
    /// One slab per output, `capacity * ncases` values.
    outputs: Vec<DevCol>,
    capacity: usize,
    /// One fitness per individual or program.
    fitness: CudaSlice<f64>,
    /// The sum of each tile of cases, `ntiles` per individual or program.
    partial: CudaSlice<f64>,
    /// The fitness kernels (tile sums, fitness), when compiled individuals are evaluated.
    reduce: Option<(CudaFunction, CudaFunction)>,
    /// The interpreter's kernels (small stack, large stack) and its [`TILES_KERNEL`], when
    /// programs are interpreted.
    interpret: Option<(CudaFunction, CudaFunction, CudaFunction)>,
    /// The interpreted programs' words and their offsets in launch order, kept from one
    /// population to the next (grown when too small) so that a launch allocates nothing.
    words: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
}

/// The most blocks a launch may have along y.
const MAX_GRID_Y: usize = 65_535;

/// Tiles of [`TILE`] cases that `ncases` cases fill (at least one).
fn tiles(ncases: usize) -> usize {
    ncases.div_ceil(TILE as usize).max(1)
}

/// Evaluates compiled individuals of one problem on GPU 0.
pub struct GpuEvaluator {
    problem: Problem,
    device: Device,
    ncases: usize,
    poisoned: Option<String>,
    /// GPU name.
    pub name: String,
}

fn out_is_float(problem: &Problem) -> Vec<bool> {
    problem.spec().outputs.iter().map(|o| o.ty.c_name() == "float").collect()
}

impl Device {
    fn new(problem: &Problem, kernels: &Kernels) -> Result<Device, GpuError> {
        // A context of our own (not the primary one), so that after a sticky fault dropping it
        // really destroys it and a fresh one starts clean.
        let ctx = CudaContext::new_non_primary(0, 0).map_err(driver)?;
        let stream = ctx.default_stream();
        let cases = problem.cases();
        let mut params = Vec::new();
        for p in problem.kernel_params() {
            params.push(match p.role {
                ParamRole::Input(i) => Some(match &cases.inputs()[i] {
                    InputColumn::Scalar(col) => DevCol::upload(&stream, col).map_err(driver)?,
                    InputColumn::IntArray { data, .. } => {
                        DevCol::upload(&stream, &Column::Int(data.clone())).map_err(driver)?
                    }
                }),
                ParamRole::Lengths(i) => match &cases.inputs()[i] {
                    InputColumn::IntArray { lens, .. } => {
                        Some(DevCol::upload(&stream, &Column::Int(lens.clone())).map_err(driver)?)
                    }
                    InputColumn::Scalar(_) => {
                        return Err(GpuError::Problem(format!("parameter {} has no lengths", p.name)));
                    }
                },
                ParamRole::Output(_) | ParamRole::NumCases => None,
            });
        }
        let targets = DevCol::upload(&stream, cases.targets()).map_err(driver)?;
        let reduce = match &kernels.fitness {
            Some(cubin) => {
                let module = ctx.load_module(Ptx::from_binary(cubin.clone())).map_err(driver)?;
                Some((
                    module.load_function(FITNESS_KERNEL).map_err(driver)?,
                    module.load_function(TILES_KERNEL).map_err(driver)?,
                ))
            }
            None => None,
        };
        let interpret = match &kernels.interpreter {
            Some(cubin) => {
                let module = ctx.load_module(Ptx::from_binary(cubin.clone())).map_err(driver)?;
                Some((
                    module.load_function(INTERP_KERNEL_SMALL).map_err(driver)?,
                    module.load_function(INTERP_KERNEL_LARGE).map_err(driver)?,
                    module.load_function(TILES_KERNEL).map_err(driver)?,
                ))
            }
            None => None,
        };
        let fitness = stream.alloc_zeros::<f64>(1).map_err(driver)?;
        let partial = stream.alloc_zeros::<f64>(1).map_err(driver)?;
        let words = stream.alloc_zeros::<u32>(1).map_err(driver)?;
        let offsets = stream.alloc_zeros::<u32>(1).map_err(driver)?;
        Ok(Device {
            ctx,
            stream,
            params,
            targets,
            outputs: Vec::new(),
            capacity: 0,
            fitness,
            partial,
            reduce,
            interpret,
            words,
            offsets,
        })
    }

    fn ensure_capacity(&mut self, problem: &Problem, n: usize, ncases: usize) -> Result<(), DriverError> {
        if n <= self.capacity {
            return Ok(());
        }
        let cap = n.next_power_of_two();
        self.outputs = out_is_float(problem)
            .into_iter()
            .map(|f| DevCol::zeros(&self.stream, f, cap * ncases))
            .collect::<Result<_, _>>()?;
        self.capacity = cap;
        self.ensure_fitness(cap, ncases)
    }

    /// Room for the tile sums and the fitness of `n` programs.
    fn ensure_fitness(&mut self, n: usize, ncases: usize) -> Result<(), DriverError> {
        if self.fitness.len() < n {
            self.fitness = self.stream.alloc_zeros::<f64>(n.next_power_of_two())?;
        }
        let need = self.fitness.len() * tiles(ncases);
        if self.partial.len() < need {
            self.partial = self.stream.alloc_zeros::<f64>(need)?;
        }
        Ok(())
    }

    /// Launches [`TILES_KERNEL`] over `n` programs' tile sums and reads their fitness back.
    fn sum_tiles(
        &mut self,
        tiles_kernel: &CudaFunction,
        n: usize,
        ncases: usize,
    ) -> Result<Vec<f64>, GpuError> {
        self.launch_tiles(tiles_kernel, n, ncases)?;
        self.read_fitness(n)
    }

    /// The fitness of the first `n` programs (waits for the stream).
    fn read_fitness(&self, n: usize) -> Result<Vec<f64>, GpuError> {
        self.stream.clone_dtoh(&self.fitness.slice(..n)).map_err(driver)
    }

    /// Launches [`TILES_KERNEL`] over `n` programs' tile sums (asynchronously).
    fn launch_tiles(&mut self, tiles_kernel: &CudaFunction, n: usize, ncases: usize) -> Result<(), GpuError> {
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

    /// Launches `run` over all cases (asynchronously): its kernel for one individual, or rows
    /// `0..len` of a switch kernel from branch `first`, filling the output slabs of `slot..slot + len`.
    fn launch(&self, problem: &Problem, run: &Run, ncases: usize) -> Result<(), DriverError> {
        let (slot, len) = (run.slot, run.len);
        let params = problem.kernel_params();
        let mut views: Vec<DevView<'_>> = Vec::with_capacity(params.len());
        for (k, p) in params.iter().enumerate() {
            match p.role {
                ParamRole::Input(_) | ParamRole::Lengths(_) => {
                    if let Some(buf) = &self.params[k] {
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
        let mut b = self.stream.launch_builder(&run.function);
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
        let cfg = LaunchConfig {
            grid_dim: ((ncases as u32).div_ceil(BLOCK), len as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument list follows the problem's kernel-parameter convention, which
        // `gp` checks every template against, followed by `int first` for a switch kernel
        // (`Shape::Switch`); every buffer holds the sizes that convention promises (inputs for
        // all cases, `len` output slabs of `ncases` values, one per row of the launch).
        unsafe { b.launch(cfg) }.map(|_| ())
    }

    fn reduce(&mut self, n: usize, ncases: usize) -> Result<Vec<f64>, GpuError> {
        let (nc, nt) = (ncases as i32, tiles(ncases) as i32);
        let (reduce, sum) = self.reduce.clone().ok_or_else(|| no_kernel("the fitness kernel"))?;
        let mut b = self.stream.launch_builder(&reduce);
        for o in &self.outputs {
            o.pass(&mut b);
        }
        self.targets.pass(&mut b);
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

    /// Launches the interpreter over `population` (asynchronously), one block per program and
    /// tile of cases, writing the tile sums into `partial`.
    fn launch_interpreter(
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
        let len =
            |k: usize| crate::interp::program_range(&population.offsets, population.words.len(), k).len();
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
                for (k, p) in problem.kernel_params().iter().enumerate() {
                    if matches!(p.role, ParamRole::Input(_) | ParamRole::Lengths(_))
                        && let Some(buf) = &self.params[k]
                    {
                        buf.pass(&mut b);
                    }
                }
                self.targets.pass(&mut b);
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
                // per program of the launch, each the start of a program the bytecode compiler
                // wrote, ending in `End`, flagged when it has no jump, and given to the large
                // kernel when flagged deep), the step limit, the tile count and the tile sums,
                // which hold `ntiles` values per program of the launch (`ensure_fitness`).
                unsafe { b.launch(cfg) }.map_err(driver)?;
            }
        }
        Ok(order)
    }
}

/// Copies `host` to the start of `dev`, first replacing `dev` by a buffer of the next power of
/// two when it is too small.
fn grow_copy(stream: &Arc<CudaStream>, host: &[u32], dev: &mut CudaSlice<u32>) -> Result<(), DriverError> {
    if dev.len() < host.len() {
        *dev = stream.alloc_zeros::<u32>(host.len().next_power_of_two())?;
    }
    if !host.is_empty() {
        stream.memcpy_htod(host, &mut dev.slice_mut(..host.len()))?;
    }
    Ok(())
}

fn no_kernel(what: &str) -> GpuError {
    GpuError::Problem(format!("{what} was not loaded into the GPU evaluator"))
}

/// The kernels a [`GpuEvaluator`] loads: CUBIN of the fitness kernel ([`fitness_source`]) to
/// evaluate compiled individuals, of the interpreter ([`crate::interp::interpreter_source`]) to
/// interpret programs; at least one.
#[derive(Debug, Clone, Default)]
pub struct Kernels {
    /// The fitness kernel's CUBIN.
    pub fitness: Option<Vec<u8>>,
    /// The interpreter's CUBIN.
    pub interpreter: Option<Vec<u8>>,
}

impl GpuEvaluator {
    /// Creates the context on GPU 0, uploads the problem's cases and loads the fitness kernel
    /// (compiled from [`fitness_source`] for this GPU).
    pub fn new(problem: &Problem, fitness_cubin: Vec<u8>) -> Result<GpuEvaluator, GpuError> {
        GpuEvaluator::with_kernels(problem, &Kernels { fitness: Some(fitness_cubin), interpreter: None })
    }

    /// As [`GpuEvaluator::new`], loading the fitness kernel, the interpreter, or both.
    pub fn with_kernels(problem: &Problem, kernels: &Kernels) -> Result<GpuEvaluator, GpuError> {
        if kernels.fitness.is_none() && kernels.interpreter.is_none() {
            return Err(GpuError::Problem("neither a fitness kernel nor an interpreter to load".into()));
        }
        let (name, _) = probe()?;
        let device = Device::new(problem, kernels)?;
        Ok(GpuEvaluator {
            problem: problem.clone(),
            device,
            ncases: problem.cases().len(),
            poisoned: None,
            name,
        })
    }

    /// Evaluates a generation of `n` individuals, of which `units` hold the compiled ones.
    pub fn evaluate(&mut self, units: &[CompiledUnit<'_>], n: usize) -> Result<GpuGeneration, GpuError> {
        self.evaluate_with(units, n, false, &[])
    }

    /// As [`evaluate`](Self::evaluate), leaving out the individuals in `skip`. `careful` waits for
    /// each kernel before launching the next, so a fault names its individual
    /// ([`GpuError::FaultAt`]); it is slower and meant for finding a culprit.
    pub fn evaluate_with(
        &mut self,
        units: &[CompiledUnit<'_>],
        n: usize,
        careful: bool,
        skip: &[usize],
    ) -> Result<GpuGeneration, GpuError> {
        if let Some(why) = &self.poisoned {
            return Err(GpuError::Fault(why.clone()));
        }
        let mut outcome = GpuGeneration { fitness: vec![None; n], ..Default::default() };
        if n == 0 {
            return Ok(outcome);
        }
        self.device.ensure_capacity(&self.problem, n, self.ncases).map_err(driver)?;
        let t = Instant::now();
        let (modules, runs) = self.load(units, n, careful, skip)?;
        outcome.load = t.elapsed();
        let t = Instant::now();
        let mut launched = Vec::with_capacity(n);
        for run in &runs {
            // A refused launch is not sticky: only this run's individuals fail.
            match self.device.launch(&self.problem, run, self.ncases) {
                Ok(()) => launched.extend(run.slot..run.slot + run.len),
                Err(e) => outcome
                    .faults
                    .extend((run.slot..run.slot + run.len).map(|i| (i, format!("launch refused: {e:?}")))),
            }
            if careful && let Err(e) = self.device.stream.synchronize() {
                let why = format!("{e:?}");
                self.poisoned = Some(why.clone());
                return Err(GpuError::FaultAt { individual: run.slot, why });
            }
        }
        self.wait()?;
        outcome.launch = t.elapsed();
        let t = Instant::now();
        let values = self.device.reduce(n, self.ncases)?;
        outcome.readback = t.elapsed();
        for i in launched {
            outcome.fitness[i] = values.get(i).copied();
        }
        // `modules` drops here: every module of this generation is unloaded.
        drop(runs);
        drop(modules);
        Ok(outcome)
    }

    /// Interprets a population: one program per individual, all over every case in one launch,
    /// fitness reduced on the device. `launch` is the upload of the bytecode and both kernels
    /// (the interpreter's and the sum of its tiles) until they end, `readback` the copy of the
    /// fitness values. A program that fails (its loop ran past the step limit) has a NaN
    /// fitness.
    pub fn interpret(&mut self, population: &WirePopulation) -> Result<GpuGeneration, GpuError> {
        if let Some(why) = &self.poisoned {
            return Err(GpuError::Fault(why.clone()));
        }
        let n = population.offsets.len();
        let mut outcome = GpuGeneration { fitness: vec![None; n], ..Default::default() };
        if n == 0 {
            return Ok(outcome);
        }
        let t = Instant::now();
        let order = self.device.launch_interpreter(&self.problem, population, self.ncases)?;
        let (_, _, sum) = self.device.interpret.clone().ok_or_else(|| no_kernel("the interpreter"))?;
        self.device.launch_tiles(&sum, n, self.ncases)?;
        self.wait()?;
        outcome.launch = t.elapsed();
        let t = Instant::now();
        let all = self.device.read_fitness(n)?;
        outcome.readback = t.elapsed();
        for (k, v) in order.into_iter().zip(all) {
            outcome.fitness[k] = Some(v);
        }
        Ok(outcome)
    }

    /// Waits for the stream; a fault poisons the evaluator.
    fn wait(&mut self) -> Result<(), GpuError> {
        self.device.stream.synchronize().map_err(|e| {
            let why = format!("{e:?}");
            self.poisoned = Some(why.clone());
            GpuError::Fault(why)
        })
    }

    /// Loads the units' modules and groups their members into launches: consecutive branches
    /// of one switch kernel whose individuals are consecutive too make one launch; every other
    /// member, and every member in careful mode, a launch of its own. Members in `skip` are left
    /// out.
    fn load(
        &self,
        units: &[CompiledUnit<'_>],
        n: usize,
        careful: bool,
        skip: &[usize],
    ) -> Result<(Vec<Arc<CudaModule>>, Vec<Run>), GpuError> {
        let mut modules = Vec::with_capacity(units.len());
        let mut runs: Vec<Run> = Vec::new();
        for u in units {
            if u.kernels.len() != u.members.len() {
                return Err(GpuError::Problem(format!(
                    "a unit names {} kernels for {} members",
                    u.kernels.len(),
                    u.members.len()
                )));
            }
            let m = self.device.ctx.load_module(Ptx::from_binary(u.cubin.to_vec())).map_err(driver)?;
            let mut functions: HashMap<&str, CudaFunction> = HashMap::new();
            let unit_runs = runs.len();
            for (text, &slot) in u.kernels.iter().zip(u.members) {
                if skip.contains(&slot) {
                    continue;
                }
                if slot >= n {
                    return Err(GpuError::Problem(format!("member {slot} of a generation of {n}")));
                }
                let Some(r) = KernelRef::parse(text) else {
                    return Err(GpuError::Problem(format!("`{text}` is not a kernel reference")));
                };
                if let Some(last) = runs[unit_runs..].last_mut()
                    && !careful
                    && last.kernel == r.kernel
                    && let (Some(first), Some(branch)) = (last.first, r.branch)
                    && branch == first + last.len as u32
                    && slot == last.slot + last.len
                {
                    last.len += 1;
                    continue;
                }
                let function = match functions.get(r.kernel) {
                    Some(f) => f.clone(),
                    None => {
                        let f = m.load_function(r.kernel).map_err(driver)?;
                        functions.insert(r.kernel, f.clone());
                        f
                    }
                };
                runs.push(Run { kernel: r.kernel.to_owned(), function, first: r.branch, slot, len: 1 });
            }
            modules.push(m);
        }
        Ok((modules, runs))
    }
}

/// One launch: a kernel for one individual, or consecutive branches of a switch kernel.
struct Run {
    kernel: String,
    function: CudaFunction,
    /// The first branch, for a switch kernel.
    first: Option<u32>,
    /// The first individual's slot.
    slot: usize,
    /// Individuals (rows of the launch).
    len: usize,
}
