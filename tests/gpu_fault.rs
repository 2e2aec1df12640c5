//! A kernel that faults on the GPU. Alone in this file because the fault poisons every CUDA
//! context of the process that ran it.

mod common;

use gpfarm_client::{Compiler, Unit};
use gpfarm_kernels::gpu::{CompiledUnit, GpuError, GpuEvaluator};

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_faulting_kernel_is_reported_and_the_evaluator_refuses_further_work() {
    let (options, mut farm, problem, fitness_cubin) = common::keijzer6_on_gpu("faulting_kernel");
    let mut gpu = GpuEvaluator::new(&problem, fitness_cubin).unwrap();
    // Same signature as an individual, but it traps.
    let src = "extern \"C\" __global__ void bad(const float* in_x, float* out_y, int NCASES)\n\
               { int c = blockIdx.x * blockDim.x + threadIdx.x; if (c < NCASES) { out_y[c] = in_x[c]; __trap(); } }\n";
    let bad = farm.compile(&[Unit::new("bad.cu", src)], &options).unwrap();
    let cubin = bad.results[0].cubin().unwrap().to_vec();
    let (kernels, members) = (vec!["bad".to_string()], vec![0usize]);
    let units = [CompiledUnit { cubin: &cubin, kernels: &kernels, members: &members }];
    let first = gpu.evaluate(&units, 1);
    assert!(matches!(first, Err(GpuError::Fault(_))), "{first:?}");
    let again = gpu.evaluate(&[], 0);
    assert!(matches!(again, Err(GpuError::Fault(_))), "a poisoned evaluator must refuse: {again:?}");
}
