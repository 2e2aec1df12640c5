//! The fitness reduction's CUDA C, generated for one problem: the per-case fitness term, the sum
//! of each tile of cases, and the sum of the tiles into one `double` per program.
//!
//! Every GPU route sums in the one order [`TILE`] describes: the fitness kernel
//! ([`fitness_source`]) over compiled individuals' output slabs, the interpreter's kernel (which
//! takes [`fitness_term`], [`block_sum`] and [`tiles_source`] from here) over the cases it runs
//! itself, so both give the same bits. This file only writes source text: it must never touch
//! the driver, and must never change the order of summation for one route alone.

use gpfarm_gp::problem::ScalarType;
use gpfarm_gp::{FitnessKind, Problem};

use super::GpuError;

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
