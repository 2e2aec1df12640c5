//! Running a user's kernel and variants of it ([`KernelJob`]): each variant on the same inputs as
//! the original, its outputs compared with the original's, its time taken beside the original's.
//!
//! Every buffer is uploaded once (its *pristine* copy) and copied into a working buffer before
//! every launch, so a kernel that writes its inputs cannot change what the next launch sees. Each
//! working buffer is followed by [`GUARD_BYTES`] of a known pattern: a variant that writes there
//! (past the end of its buffer, but not so far that the driver faults) is reported
//! `out_of_bounds`. Timing: `repeats` pairs of launches, the original and the variant (which goes
//! first alternates from pair to pair), each
//! between two CUDA events on the one stream, the copies in between outside the events; so noise
//! (clocks, other work on the GPU) falls on both alike and their ratio is fair.
//!
//! A launch the driver refuses or a module it cannot load is [`VariantRun::Refused`]; a kernel
//! that faults while running poisons the context ([`GpuError::Fault`]) and this process can do no
//! more: its parent starts another.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use gpfarm_protocol::worker::{ElemType, ErrorMeasure, KernelJob, VariantRun, WireArg};

use super::{GpuError, driver};

/// Bytes of guard after every buffer.
pub const GUARD_BYTES: usize = 4096;
/// The guard's byte.
const GUARD: u8 = 0xA5;

/// A user's kernel, loaded with its inputs, ready to run variants against it.
pub struct KernelBench {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Kept loaded as long as its function is used.
    _module: Arc<CudaModule>,
    original: CudaFunction,
    job: KernelJob,
    /// Per argument: pristine and working copies of a buffer (with guards).
    buffers: Vec<Option<(CudaSlice<u8>, CudaSlice<u8>)>>,
    /// Device addresses of the working buffers, by argument.
    addresses: Vec<u64>,
    /// The scalar arguments as their types, in order (made once: launches sit between timing
    /// events).
    scalars: Vec<Scalar>,
    /// The original's outputs, by argument.
    reference: Outputs,
}

/// A run's output buffers' contents, by argument (`None` for the others).
type Outputs = Vec<Option<Vec<u8>>>;

impl KernelBench {
    /// Makes a context, uploads the job's buffers, loads the original and runs it once for its
    /// reference outputs. An original that faults, or writes past its buffers, is an error.
    pub fn new(mut job: KernelJob) -> Result<KernelBench, GpuError> {
        // No driver or no device: a clear error rather than the driver loader's panic.
        super::probe()?;
        let ctx = CudaContext::new_non_primary(0, 0).map_err(driver)?;
        let stream = ctx.default_stream();
        let cubin = std::mem::take(&mut job.original);
        let module = ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| GpuError::Problem(format!("the original kernel does not load: {e:?}")))?;
        let original = module
            .load_function(&job.entry)
            .map_err(|e| GpuError::Problem(format!("the original has no kernel {:?}: {e:?}", job.entry)))?;
        let mut buffers = Vec::with_capacity(job.args.len());
        let mut addresses = Vec::with_capacity(job.args.len());
        for a in &job.args {
            match a {
                WireArg::Buffer { data, .. } => {
                    let mut host = data.clone();
                    host.resize(data.len() + GUARD_BYTES, GUARD);
                    let pristine = stream.clone_htod(&host).map_err(driver)?;
                    let work = stream.clone_htod(&host).map_err(driver)?;
                    addresses.push(work.device_ptr(&stream).0);
                    buffers.push(Some((pristine, work)));
                }
                WireArg::Scalar { .. } => {
                    addresses.push(0);
                    buffers.push(None);
                }
            }
        }
        let scalars = job
            .args
            .iter()
            .filter_map(|a| match *a {
                WireArg::Scalar { elem, bits } => Some(Scalar::of(elem, bits)),
                WireArg::Buffer { .. } => None,
            })
            .collect();
        let mut bench = KernelBench {
            ctx,
            stream,
            _module: module,
            original: original.clone(),
            job,
            buffers,
            addresses,
            scalars,
            reference: Vec::new(),
        };
        bench.reset()?;
        bench.launch(&original).map_err(|e| GpuError::Problem(format!("the original's launch: {e}")))?;
        bench.stream.synchronize().map_err(|e| GpuError::Fault(format!("the original kernel: {e:?}")))?;
        let (outputs, oob) = bench.read_outputs()?;
        if oob {
            return Err(GpuError::Problem("the original kernel writes past the end of a buffer".into()));
        }
        bench.reference = outputs;
        Ok(bench)
    }

    /// The GPU's name.
    pub fn device_name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown GPU".into())
    }

    /// Copies every pristine buffer (guards too) over its working copy.
    fn reset(&mut self) -> Result<(), GpuError> {
        for (pristine, work) in self.buffers.iter_mut().flatten() {
            self.stream.memcpy_dtod(pristine, work).map_err(driver)?;
        }
        Ok(())
    }

    /// Launches `f` with the job's arguments and launch (asynchronously).
    fn launch(&self, f: &CudaFunction) -> Result<(), String> {
        let mut s = self.scalars.iter();
        let mut b = self.stream.launch_builder(f);
        for (k, a) in self.job.args.iter().enumerate() {
            match a {
                WireArg::Buffer { .. } => {
                    b.arg(&self.addresses[k]);
                }
                WireArg::Scalar { .. } => {
                    match s.next().expect("one per scalar argument") {
                        Scalar::F32(v) => b.arg(v),
                        Scalar::F64(v) => b.arg(v),
                        Scalar::I32(v) => b.arg(v),
                        Scalar::U32(v) => b.arg(v),
                        Scalar::I64(v) => b.arg(v),
                        Scalar::U8(v) => b.arg(v),
                    };
                }
            }
        }
        let cfg = LaunchConfig {
            grid_dim: (self.job.grid[0], self.job.grid[1], self.job.grid[2]),
            block_dim: (self.job.block[0], self.job.block[1], self.job.block[2]),
            shared_mem_bytes: self.job.shared_bytes,
        };
        // SAFETY: the arguments are the job's, in the kernel's order as its harness declares
        // them: each buffer's device address (allocated above with room for its data and a
        // guard) and each scalar as its declared type. A kernel that disagrees with its harness
        // can fault; that is caught as a fault of this process, which its parent replaces.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(|e| format!("{e:?}"))
    }

    /// The outputs (guards cut off) and whether any guard was written.
    fn read_outputs(&self) -> Result<(Outputs, bool), GpuError> {
        let mut out = Vec::with_capacity(self.job.args.len());
        let mut oob = false;
        for (a, b) in self.job.args.iter().zip(&self.buffers) {
            match (a, b) {
                (WireArg::Buffer { data, output, .. }, Some((_, work))) => {
                    let mut host = self.stream.clone_dtoh(work).map_err(driver)?;
                    oob |= host[data.len()..].iter().any(|&g| g != GUARD);
                    host.truncate(data.len());
                    out.push(output.then_some(host));
                }
                _ => out.push(None),
            }
        }
        Ok((out, oob))
    }

    /// Runs variant `cubin`: once to check its outputs and guards, then `repeats` timed
    /// launches, each after one of the original. [`GpuError::Fault`] when it faulted.
    pub fn run(&mut self, cubin: &[u8]) -> Result<VariantRun, GpuError> {
        let module = match self.ctx.load_module(Ptx::from_binary(cubin.to_vec())) {
            Ok(m) => m,
            Err(e) => return Ok(VariantRun::Refused(format!("its module does not load: {e:?}"))),
        };
        let f = match module.load_function(&self.job.entry) {
            Ok(f) => f,
            Err(e) => return Ok(VariantRun::Refused(format!("no kernel {:?}: {e:?}", self.job.entry))),
        };
        self.reset()?;
        if let Err(e) = self.launch(&f) {
            return Ok(VariantRun::Refused(format!("its launch was refused: {e}")));
        }
        self.stream.synchronize().map_err(|e| GpuError::Fault(format!("{e:?}")))?;
        let (outputs, out_of_bounds) = self.read_outputs()?;
        let error = self.error(&outputs);
        let repeats = self.job.repeats as usize;
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut marks = Vec::with_capacity(repeats * 2);
        for _ in 0..repeats * 2 {
            marks.push((
                self.ctx.new_event(timed).map_err(driver)?,
                self.ctx.new_event(timed).map_err(driver)?,
            ));
        }
        let original = self.original.clone();
        // Marks 2r and 2r+1 time repeat r's original and variant; which of the two runs first
        // alternates, so that neither gains from going first.
        for k in 0..marks.len() {
            let (r, second) = (k / 2, k % 2 == 1);
            let variant_now = second != (r % 2 == 1);
            let (start, end) = &marks[if variant_now { 2 * r + 1 } else { 2 * r }];
            self.reset()?;
            start.record(&self.stream).map_err(driver)?;
            self.launch(if variant_now { &f } else { &original }).map_err(GpuError::Fault)?;
            end.record(&self.stream).map_err(driver)?;
        }
        self.stream.synchronize().map_err(|e| GpuError::Fault(format!("{e:?}")))?;
        let mut times = marks.iter().map(|(s, e)| s.elapsed_ms(e).map_err(driver));
        let (mut original_ms, mut variant_ms) = (Vec::with_capacity(repeats), Vec::with_capacity(repeats));
        for _ in 0..repeats {
            original_ms.push(times.next().expect("two per repeat")?);
            variant_ms.push(times.next().expect("two per repeat")?);
        }
        Ok(VariantRun::Ran { error, out_of_bounds, variant_ms, original_ms })
    }

    /// The error of `outputs` against the original's, by the job's measure.
    fn error(&self, outputs: &Outputs) -> f64 {
        let mut worst = 0.0f64;
        let (mut differ, mut total) = (0usize, 0usize);
        for ((a, got), want) in self.job.args.iter().zip(outputs).zip(&self.reference) {
            let (WireArg::Buffer { elem, .. }, Some(got), Some(want)) = (a, got, want) else { continue };
            let size = elem.size();
            for (g, w) in got.chunks_exact(size).zip(want.chunks_exact(size)) {
                total += 1;
                if g == w {
                    continue;
                }
                differ += 1;
                let (g, w) = (value(*elem, g), value(*elem, w));
                let e = match self.job.measure {
                    ErrorMeasure::Exact => 0.0,
                    _ if g.is_nan() != w.is_nan() || g.is_infinite() || w.is_infinite() => f64::INFINITY,
                    _ if g.is_nan() => 0.0,
                    ErrorMeasure::MaxAbs => (g - w).abs(),
                    ErrorMeasure::MaxRel => (g - w).abs() / w.abs().max(1e-30),
                };
                worst = worst.max(e);
            }
        }
        match self.job.measure {
            ErrorMeasure::Exact => differ as f64 / total.max(1) as f64,
            _ => worst,
        }
    }
}

/// One element's value as a number.
fn value(elem: ElemType, b: &[u8]) -> f64 {
    match elem {
        ElemType::F32 => f32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
        ElemType::F64 => f64::from_le_bytes(b.try_into().expect("8 bytes")),
        ElemType::I32 => i32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
        ElemType::U32 => u32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
        ElemType::I64 => i64::from_le_bytes(b.try_into().expect("8 bytes")) as f64,
        ElemType::U8 => b[0] as f64,
    }
}

/// A scalar argument as its type.
enum Scalar {
    F32(f32),
    F64(f64),
    I32(i32),
    U32(u32),
    I64(i64),
    U8(u8),
}

impl Scalar {
    fn of(elem: ElemType, bits: u64) -> Scalar {
        match elem {
            ElemType::F32 => Scalar::F32(f32::from_bits(bits as u32)),
            ElemType::F64 => Scalar::F64(f64::from_bits(bits)),
            ElemType::I32 => Scalar::I32(bits as u32 as i32),
            ElemType::U32 => Scalar::U32(bits as u32),
            ElemType::I64 => Scalar::I64(bits as i64),
            ElemType::U8 => Scalar::U8(bits as u8),
        }
    }
}
