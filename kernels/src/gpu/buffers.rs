//! The evaluator's CUDA context and what lives in it: the problem's cases, uploaded once; the
//! output slabs, tile sums and fitness values, grown to the largest generation seen and reused;
//! the interpreted programs' bytecode buffers; the kernels loaded once ([`super::modules`]).
//!
//! Buffers only grow, by powers of two, so a generation no larger than an earlier one allocates
//! nothing. Must never launch a kernel: this file allocates, uploads and holds.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, DriverError, LaunchArgs, PushKernelArg,
};
use gpfarm_gp::problem::{Column, InputColumn};
use gpfarm_gp::{ParamRole, Problem};

use super::modules::{load_fit, load_interpreter, load_reduce};
use super::{GpuError, Kernels, TILE, driver};

pub(super) enum DevCol {
    Int(CudaSlice<i32>),
    Float(CudaSlice<f32>),
}

pub(super) enum DevView<'a> {
    Int(CudaView<'a, i32>),
    Float(CudaView<'a, f32>),
}

impl DevCol {
    pub(super) fn upload(stream: &Arc<CudaStream>, col: &Column) -> Result<DevCol, DriverError> {
        Ok(match col {
            Column::Int(v) => DevCol::Int(stream.clone_htod(v)?),
            Column::Float(v) => DevCol::Float(stream.clone_htod(v)?),
        })
    }

    pub(super) fn zeros(stream: &Arc<CudaStream>, float: bool, n: usize) -> Result<DevCol, DriverError> {
        Ok(if float {
            DevCol::Float(stream.alloc_zeros(n.max(1))?)
        } else {
            DevCol::Int(stream.alloc_zeros(n.max(1))?)
        })
    }

    pub(super) fn view(&self, range: std::ops::Range<usize>) -> DevView<'_> {
        match self {
            DevCol::Int(s) => DevView::Int(s.slice(range)),
            DevCol::Float(s) => DevView::Float(s.slice(range)),
        }
    }

    /// Passes the whole buffer as the next kernel argument.
    pub(super) fn pass<'a>(&'a self, b: &mut LaunchArgs<'a>) {
        match self {
            DevCol::Int(s) => b.arg(s),
            DevCol::Float(s) => b.arg(s),
        };
    }

    pub(super) fn whole(&self) -> DevView<'_> {
        match self {
            DevCol::Int(s) => DevView::Int(s.slice(..)),
            DevCol::Float(s) => DevView::Float(s.slice(..)),
        }
    }
}

/// A problem's case data on the device: one buffer per kernel parameter that reads case data (by
/// parameter position), and the targets.
pub(super) struct CaseData {
    pub(super) params: Vec<Option<DevCol>>,
    pub(super) targets: DevCol,
}

impl CaseData {
    /// Uploads `problem`'s cases.
    pub(super) fn upload(stream: &Arc<CudaStream>, problem: &Problem) -> Result<CaseData, GpuError> {
        let cases = problem.cases();
        let mut params = Vec::new();
        for p in problem.kernel_params() {
            params.push(match p.role {
                ParamRole::Input(i) => Some(match &cases.inputs()[i] {
                    InputColumn::Scalar(col) => DevCol::upload(stream, col).map_err(driver)?,
                    InputColumn::IntArray { data, .. } => {
                        DevCol::upload(stream, &Column::Int(data.clone())).map_err(driver)?
                    }
                }),
                ParamRole::Lengths(i) => match &cases.inputs()[i] {
                    InputColumn::IntArray { lens, .. } => {
                        Some(DevCol::upload(stream, &Column::Int(lens.clone())).map_err(driver)?)
                    }
                    InputColumn::Scalar(_) => {
                        return Err(GpuError::Problem(format!("parameter {} has no lengths", p.name)));
                    }
                },
                ParamRole::Output(_) | ParamRole::NumCases => None,
            });
        }
        let targets = DevCol::upload(stream, cases.targets()).map_err(driver)?;
        Ok(CaseData { params, targets })
    }

    /// Passes the case data the interpreter's kernels take first: one buffer per input and
    /// `int[]` length parameter of the problem's compiled kernels, in their order, then the
    /// targets.
    pub(super) fn pass<'a>(&'a self, problem: &Problem, b: &mut LaunchArgs<'a>) {
        for (k, p) in problem.kernel_params().iter().enumerate() {
            if matches!(p.role, ParamRole::Input(_) | ParamRole::Lengths(_))
                && let Some(buf) = &self.params[k]
            {
                buf.pass(b);
            }
        }
        self.targets.pass(b);
    }
}

/// Everything that lives in one CUDA context; rebuilt after a fault.
pub(super) struct Device {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// The problem's cases.
    pub(super) cases: CaseData,
    /// One slab per output, `capacity * ncases` values.
    pub(super) outputs: Vec<DevCol>,
    pub(super) capacity: usize,
    /// One fitness per individual or program.
    pub(super) fitness: CudaSlice<f64>,
    /// The sum of each tile of cases, `ntiles` per individual or program.
    pub(super) partial: CudaSlice<f64>,
    /// The fitness kernels (tile sums, fitness), when compiled individuals are evaluated.
    pub(super) reduce: Option<(CudaFunction, CudaFunction)>,
    /// The interpreter's kernels (small stack, large stack) and its [`super::TILES_KERNEL`], when
    /// programs are interpreted.
    pub(super) interpret: Option<(CudaFunction, CudaFunction, CudaFunction)>,
    /// The interpreted programs' words and their offsets in launch order, kept from one
    /// population to the next (grown when too small) so that a launch allocates nothing.
    pub(super) words: CudaSlice<u32>,
    pub(super) offsets: CudaSlice<u32>,
    /// The fitting kernels and their buffers, when free parameters are fitted on the GPU.
    pub(super) fit: Option<super::modules::FitModules>,
    pub(super) fit_buffers: Option<FitBuffers>,
    /// The cases the fitting kernels run on, when not all of them (evenly spaced ones, with
    /// their count; [`super::GpuEvaluator::fit_on_cases`]).
    pub(super) fit_cases: Option<(CaseData, usize)>,
    /// Streams beside [`Device::stream`] that compiled individuals' launches are spread over, so
    /// that kernels that run long (loops) run side by side; made at the first such launch.
    pub(super) side: Vec<Arc<CudaStream>>,
    /// The free parameters' values of compiled individuals, `value_stride` per individual by
    /// slot ([`super::GpuEvaluator::set_values`]); `value_stride` 0: none given.
    pub(super) values: CudaSlice<f32>,
    pub(super) value_stride: usize,
    pub(super) values_len: usize,
    /// Units' modules, kept loaded while their CUBIN comes again.
    pub(super) modules: super::modules::ModuleCache,
    /// The compiled fitting units the next fits name, each its module and kernel.
    pub(super) fit_code: Vec<(Arc<cudarc::driver::CudaModule>, CudaFunction)>,
}

/// The fitting kernel's buffers: parameter values, each program's first value and count, the
/// tile sums and the programs' sums; grown as [`grow_copy`] grows.
pub(super) struct FitBuffers {
    pub(super) params: CudaSlice<f32>,
    pub(super) poffsets: CudaSlice<u32>,
    pub(super) nparams: CudaSlice<i32>,
    /// The tile sums of the programs launched on each side stream (by the stream's index).
    pub(super) partial: Vec<CudaSlice<f64>>,
    /// Where each program's packed sums start in `sums`.
    pub(super) at: CudaSlice<i64>,
    pub(super) sums: CudaSlice<f64>,
    /// The fitting loop's state ([`super::contract::FIT_STEP_KERNEL`]), made at its first fit.
    pub(super) looped: Option<LoopBuffers>,
}

/// What the fitting loop on the GPU keeps per start, in launch order: the sums at its best
/// values and a scratch for its solve (each in the layout of the sums), its best values (in the
/// layout of the values), its λ, whether it goes on, its parameter count for the next launches
/// (-1: not run, 0: a trial's sum of squares alone), its sums of squares where it began and at its
/// best values, the launches that ran it and the trials it made.
pub(super) struct LoopBuffers {
    pub(super) best: CudaSlice<f64>,
    pub(super) work: CudaSlice<f64>,
    pub(super) bestp: CudaSlice<f32>,
    pub(super) lambda: CudaSlice<f64>,
    pub(super) active: CudaSlice<i32>,
    pub(super) running: CudaSlice<i32>,
    pub(super) first: CudaSlice<f64>,
    pub(super) sse: CudaSlice<f64>,
    pub(super) launches: CudaSlice<i32>,
    pub(super) trials: CudaSlice<i32>,
}

/// Streams compiled individuals' launches are spread over ([`Device::side`]).
pub(super) const SIDE_STREAMS: usize = 16;

/// Tiles of [`TILE`] cases that `ncases` cases fill (at least one).
pub(super) fn tiles(ncases: usize) -> usize {
    ncases.div_ceil(TILE as usize).max(1)
}

fn out_is_float(problem: &Problem) -> Vec<bool> {
    problem.spec().outputs.iter().map(|o| o.ty.c_name() == "float").collect()
}

impl Device {
    pub(super) fn new(problem: &Problem, kernels: &Kernels) -> Result<Device, GpuError> {
        // A context of our own (not the primary one), so that after a sticky fault dropping it
        // really destroys it and a fresh one starts clean.
        let ctx = CudaContext::new_non_primary(0, 0).map_err(driver)?;
        let stream = ctx.default_stream();
        let cases = CaseData::upload(&stream, problem)?;
        let reduce = kernels.fitness.as_deref().map(|cubin| load_reduce(&ctx, cubin)).transpose()?;
        let interpret =
            kernels.interpreter.as_deref().map(|cubin| load_interpreter(&ctx, cubin)).transpose()?;
        let fit = if kernels.fit.is_empty() { None } else { Some(load_fit(&ctx, &kernels.fit)?) };
        let fitness = stream.alloc_zeros::<f64>(1).map_err(driver)?;
        let partial = stream.alloc_zeros::<f64>(1).map_err(driver)?;
        let words = stream.alloc_zeros::<u32>(1).map_err(driver)?;
        let offsets = stream.alloc_zeros::<u32>(1).map_err(driver)?;
        let values = stream.alloc_zeros::<f32>(1).map_err(driver)?;
        Ok(Device {
            ctx,
            stream,
            cases,
            outputs: Vec::new(),
            capacity: 0,
            fitness,
            partial,
            reduce,
            interpret,
            words,
            offsets,
            fit,
            fit_buffers: None,
            fit_cases: None,
            side: Vec::new(),
            values,
            value_stride: 0,
            values_len: 0,
            modules: Default::default(),
            fit_code: Vec::new(),
        })
    }

    /// The side streams, each made to wait for the work queued on the main stream so far.
    pub(super) fn side_streams(&mut self) -> Result<&[Arc<CudaStream>], DriverError> {
        self.make_side_streams()?;
        for s in &self.side {
            s.join(&self.stream)?;
        }
        Ok(&self.side)
    }

    /// The side streams, made at the first call; nothing waits for anything (the caller makes
    /// each stream it uses wait for the main one).
    pub(super) fn make_side_streams(&mut self) -> Result<&[Arc<CudaStream>], DriverError> {
        while self.side.len() < SIDE_STREAMS {
            self.side.push(self.ctx.new_stream()?);
        }
        Ok(&self.side)
    }

    pub(super) fn ensure_capacity(
        &mut self,
        problem: &Problem,
        n: usize,
        ncases: usize,
    ) -> Result<(), DriverError> {
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
    pub(super) fn ensure_fitness(&mut self, n: usize, ncases: usize) -> Result<(), DriverError> {
        if self.fitness.len() < n {
            self.fitness = self.stream.alloc_zeros::<f64>(n.next_power_of_two())?;
        }
        let need = self.fitness.len() * tiles(ncases);
        if self.partial.len() < need {
            self.partial = self.stream.alloc_zeros::<f64>(need)?;
        }
        Ok(())
    }
}

/// Makes `dev` hold at least `len` values (at least one), replacing it by a zeroed buffer of the
/// next power of two when it is too small; its values are kept only when it is large enough.
pub(super) fn grow<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    dev: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), DriverError> {
    if dev.len() < len.max(1) {
        *dev = stream.alloc_zeros::<T>(len.max(1).next_power_of_two())?;
    }
    Ok(())
}

/// Copies `host` to the start of `dev`, first replacing `dev` by a buffer of the next power of
/// two when it is too small.
pub(super) fn grow_copy<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    host: &[T],
    dev: &mut CudaSlice<T>,
) -> Result<(), DriverError> {
    grow(stream, dev, host.len())?;
    if !host.is_empty() {
        stream.memcpy_htod(host, &mut dev.slice_mut(..host.len()))?;
    }
    Ok(())
}
