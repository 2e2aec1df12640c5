//! A kernel that faults on the GPU. Alone in this file because the fault poisons every CUDA
//! context of the process that ran it.

mod common;

use common::config;
use gpfarm_client::{CompileOptions, Compiler, Farm, SmArch, Unit};
use gpfarm_gp::Problem;
use gpfarm_kernels::gpu::{self, CompiledUnit, GpuError, GpuEvaluator};

#[test]
fn a_faulting_kernel_is_reported_and_the_evaluator_refuses_further_work() {
    let (name, (major, minor)) = match gpu::probe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED faulting_kernel: {e}");
            return;
        }
    };
    eprintln!("faulting_kernel: running on {name}");
    let arch = SmArch((major * 10 + minor) as u32);
    let problem = Problem::builtin("keijzer6").unwrap();
    let mut farm = Farm::spawn(config(2)).unwrap();
    let options = CompileOptions::cubin(arch);
    let fitness =
        farm.compile(&[Unit::new("f.cu", gpu::fitness_source(&problem).unwrap())], &options).unwrap();
    let mut gpu = GpuEvaluator::new(&problem, fitness.results[0].cubin().unwrap().to_vec()).unwrap();
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
