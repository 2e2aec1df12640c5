//! Loading CUBIN into the evaluator's context: the kernels that stay loaded (the fitness
//! kernel's, the interpreter's), and each generation's units, whose members are grouped into
//! launches ([`Run`]).
//!
//! Units' modules stay loaded in a [`ModuleCache`] keyed by their CUBIN, so that code evaluated
//! again (a structure compiled once and run with new values of its free parameters, step after
//! step) is not loaded again; the cache unloads everything once it holds [`CACHE_BYTES`] of
//! CUBIN. Must never launch anything.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use super::contract::{
    FIT_SMALL_WIDTHS, FIT_STEP_KERNEL, FIT_TILES_KERNEL, FIT_WIDTHS, INTERP_KERNEL_LARGE,
    INTERP_KERNEL_SMALL, fit_kernel, fit_kernel_plain, fit_kernel_small,
};
use super::{CompiledUnit, FITNESS_KERNEL, GpuError, KernelRef, TILES_KERNEL, driver};

/// CUBIN bytes the module cache holds before it unloads everything.
pub(super) const CACHE_BYTES: usize = 256 << 20;

/// Loaded modules by their CUBIN's hash.
#[derive(Default)]
pub(super) struct ModuleCache {
    by_hash: HashMap<blake3::Hash, Arc<CudaModule>>,
    bytes: usize,
}

impl ModuleCache {
    /// The module of `cubin`, loaded into `ctx` unless it already is. `taken` holds the CUBINs this
    /// evaluation already took: a CUBIN that comes twice (the same structures run with two sets of
    /// values) gets a module of its own the second time, so that its members' step-limit flags
    /// stay their own.
    pub(super) fn load(
        &mut self,
        ctx: &Arc<CudaContext>,
        cubin: &[u8],
        taken: &mut HashSet<blake3::Hash>,
    ) -> Result<Arc<CudaModule>, GpuError> {
        let hash = blake3::hash(cubin);
        if !taken.insert(hash) {
            return ctx.load_module(Ptx::from_binary(cubin.to_vec())).map_err(driver);
        }
        if let Some(m) = self.by_hash.get(&hash) {
            return Ok(m.clone());
        }
        if self.bytes + cubin.len() > CACHE_BYTES {
            self.by_hash.clear();
            self.bytes = 0;
        }
        let m = ctx.load_module(Ptx::from_binary(cubin.to_vec())).map_err(driver)?;
        self.by_hash.insert(hash, m.clone());
        self.bytes += cubin.len();
        Ok(m)
    }
}

/// One launch: a kernel for one individual, or consecutive branches of a switch kernel.
pub(super) struct Run {
    pub(super) kernel: String,
    pub(super) function: CudaFunction,
    /// The first branch, for a switch kernel.
    pub(super) first: Option<u32>,
    /// The first individual's slot.
    pub(super) slot: usize,
    /// Individuals (rows of the launch).
    pub(super) len: usize,
}

/// The fitness kernels (tile sums, fitness) from the fitness kernel's CUBIN.
pub(super) fn load_reduce(
    ctx: &Arc<CudaContext>,
    cubin: &[u8],
) -> Result<(CudaFunction, CudaFunction), GpuError> {
    let module = ctx.load_module(Ptx::from_binary(cubin.to_vec())).map_err(driver)?;
    Ok((
        module.load_function(FITNESS_KERNEL).map_err(driver)?,
        module.load_function(TILES_KERNEL).map_err(driver)?,
    ))
}

/// The interpreter's kernels (small stack, large stack) and its [`TILES_KERNEL`] from the
/// interpreter's CUBIN.
pub(super) fn load_interpreter(
    ctx: &Arc<CudaContext>,
    cubin: &[u8],
) -> Result<(CudaFunction, CudaFunction, CudaFunction), GpuError> {
    let module = ctx.load_module(Ptx::from_binary(cubin.to_vec())).map_err(driver)?;
    Ok((
        module.load_function(INTERP_KERNEL_SMALL).map_err(driver)?,
        module.load_function(INTERP_KERNEL_LARGE).map_err(driver)?,
        module.load_function(TILES_KERNEL).map_err(driver)?,
    ))
}

/// The fitting kernels: one per width of [`FIT_WIDTHS`], a small-stack one per width of
/// [`FIT_SMALL_WIDTHS`], [`FIT_TILES_KERNEL`] and [`FIT_STEP_KERNEL`].
#[derive(Clone)]
pub(super) struct FitModules {
    /// The kernel of each width, in [`FIT_WIDTHS`] order.
    pub(super) kernels: Vec<(usize, CudaFunction)>,
    /// Each width's plain twin, where the modules have one (the width's kernel then runs only
    /// the starts with derivatives, and the twin the others), in [`FIT_WIDTHS`] order.
    pub(super) plain: Vec<Option<CudaFunction>>,
    /// The small-stack kernel of each width of [`FIT_SMALL_WIDTHS`], in that order.
    pub(super) small: Vec<(usize, CudaFunction)>,
    pub(super) tiles: CudaFunction,
    pub(super) step: CudaFunction,
    /// The modules the functions live in, kept loaded.
    _modules: Vec<Arc<CudaModule>>,
}

/// The fitting kernels from their CUBIN (one module with every width, or several), checked to
/// hold a kernel of every width, the small-stack ones, the tiles kernel and the step kernel.
pub(super) fn load_fit(ctx: &Arc<CudaContext>, cubins: &[Vec<u8>]) -> Result<FitModules, GpuError> {
    let modules: Vec<Arc<CudaModule>> = cubins
        .iter()
        .map(|c| ctx.load_module(Ptx::from_binary(c.clone())).map_err(driver))
        .collect::<Result<_, _>>()?;
    let find = |name: &str| {
        modules
            .iter()
            .find_map(|m| m.load_function(name).ok())
            .ok_or_else(|| GpuError::Problem(format!("no fitting kernel `{name}` in the modules given")))
    };
    let kernels =
        FIT_WIDTHS.iter().map(|&w| Ok((w, find(&fit_kernel(w))?))).collect::<Result<_, GpuError>>()?;
    let plain = FIT_WIDTHS
        .iter()
        .map(|&w| modules.iter().find_map(|m| m.load_function(&fit_kernel_plain(w)).ok()))
        .collect();
    let small = FIT_SMALL_WIDTHS
        .iter()
        .map(|&w| Ok((w, find(&fit_kernel_small(w))?)))
        .collect::<Result<_, GpuError>>()?;
    Ok(FitModules {
        kernels,
        plain,
        small,
        tiles: find(FIT_TILES_KERNEL)?,
        step: find(FIT_STEP_KERNEL)?,
        _modules: modules,
    })
}

/// Loads the units' modules and groups their members into launches: consecutive branches
/// of one switch kernel whose individuals are consecutive too make one launch; every other
/// member, and every member in careful mode, a launch of its own. Members in `skip` are left
/// out.
pub(super) fn load_units(
    ctx: &Arc<CudaContext>,
    cache: &mut ModuleCache,
    units: &[CompiledUnit<'_>],
    n: usize,
    careful: bool,
    skip: &[usize],
) -> Result<(Vec<Arc<CudaModule>>, Vec<Run>), GpuError> {
    let mut modules = Vec::with_capacity(units.len());
    let mut taken = HashSet::new();
    let mut runs: Vec<Run> = Vec::new();
    for u in units {
        if u.kernels.len() != u.members.len() {
            return Err(GpuError::Problem(format!(
                "a unit names {} kernels for {} members",
                u.kernels.len(),
                u.members.len()
            )));
        }
        let m = cache.load(ctx, u.cubin, &mut taken)?;
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
