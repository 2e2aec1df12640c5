//! `gpfarm improve` on the shipped example kernels: compiled to PTX, patched and linked on any
//! machine with NVRTC; run, checked and timed (and hostile variants isolated) on a GPU.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use gpfarm_client::{
    CompilerSpec, GpuWorker, InProcess, SmArch, VariantOutcome, Workers, gpu_worker_executable,
};
use gpfarm_improve::{ImproveConfig, Kernel, KernelDir, improve, link, original_ptx};
use gpfarm_protocol::worker::VariantRun;
use rand::SeedableRng;

const EXAMPLES: [&str; 5] = ["matmul", "stencil", "bfs", "nn", "reduction"];

fn example(name: &str) -> KernelDir {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/kernels").join(name);
    KernelDir::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_example_compiles_to_ptx_and_its_patched_variants_link_or_fail_alone() {
    if !common::nvjitlink_or_skip("improve_examples_link") {
        return;
    }
    let build = gpfarm_client::BuildConfig::default();
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let mut compiler =
        InProcess::new(&toolchain, &gpfarm_client::CompileOptions::cubin(SmArch::SM_90)).unwrap();
    for name in EXAMPLES {
        let dir = example(name);
        let ptx = original_ptx(&dir, &build, SmArch::SM_90).unwrap();
        let kernel = Kernel::parse(&ptx, &dir.kernel).unwrap();
        assert_eq!(kernel.original(), ptx, "{name}: parsing keeps the PTX byte for byte");
        assert!(kernel.instructions() >= 8, "{name}: {} instructions", kernel.instructions());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut texts = vec![kernel.original()];
        for k in 0..40 {
            let edits: Vec<_> = (0..1 + k % 3).map(|_| kernel.random_edit(&mut rng)).collect();
            texts.push(kernel.apply(&edits).0);
        }
        // Bounded as the search runs it: it still links.
        let bounded = gpfarm_improve::ptx::bound_loops(&kernel.original(), &dir.kernel, 1000);
        let loops = ["matmul", "bfs", "reduction"].contains(&name);
        assert_eq!(bounded.contains("trap;"), loops, "{name}: matmul, bfs and reduction loop");
        let linked = link(&mut compiler, &[bounded], SmArch::SM_90).unwrap();
        assert!(linked[0].is_ok(), "{name}: bounded: {:?}", linked[0]);
        // One that no assembler takes: it fails alone, with the assembler's reason.
        texts.push(kernel.original().replacen("ret;", "ret.bogus;", 1));
        let linked = link(&mut compiler, &texts, SmArch::SM_90).unwrap();
        assert!(linked[0].is_ok(), "{name}: the original links: {:?}", linked[0]);
        let broken = linked.last().unwrap().as_ref().unwrap_err();
        assert!(broken.contains("bogus") || broken.contains("syntax"), "{name}: {broken}");
        let linked = &linked[..linked.len() - 1];
        let valid = linked.iter().skip(1).filter(|r| r.is_ok()).count();
        let invalid = linked.iter().skip(1).filter(|r| r.is_err()).count();
        eprintln!(
            "{name}: {} instructions, {valid} of 40 random variants link, {invalid} do not",
            kernel.instructions()
        );
        assert!(valid >= 4, "{name}: only {valid} variants link");
        let job = dir.job(dir.search, 1, linked[0].clone().unwrap()).unwrap();
        assert_eq!(job.entry, dir.kernel);
    }
}

/// A variant of `kernel`'s PTX whose body is `body` (for hostile variants).
fn with_body(ptx: &str, body: &str) -> String {
    let open = ptx.find("\n{\n").expect("a body") + 3;
    let close = ptx.rfind("\n}").expect("its end");
    format!("{}{}{}", &ptx[..open], body, &ptx[close..])
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn variants_that_hang_fault_or_write_out_of_bounds_cost_themselves_alone() {
    let arch = common::require_gpu("improve_hostile");
    let dir = example("nn");
    let build = gpfarm_client::BuildConfig::default();
    let ptx = original_ptx(&dir, &build, arch).unwrap();
    let kernel = Kernel::parse(&ptx, &dir.kernel).unwrap();
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let mut compiler = InProcess::new(&toolchain, &gpfarm_client::CompileOptions::cubin(arch)).unwrap();
    let hang = with_body(&ptx, "$L_spin:\n\tbra.uni $L_spin;\n");
    let fault =
        with_body(&ptx, "\t.reg .b64 %rdx<2>;\n\tmov.u64 %rdx1, 8;\n\tst.global.u32 [%rdx1], 1;\n\tret;\n");
    // Writes the distance past the end of `distances` (n floats): into its guard.
    let oob = with_body(
        &ptx,
        "\t.reg .b64 %rdx<3>;\n\t.reg .b32 %rx<2>;\n\tld.param.u64 %rdx1, [nn_param_1];\n\tld.param.u32 %rx1, [nn_param_2];\n\tmul.wide.s32 %rdx2, %rx1, 4;\n\tadd.s64 %rdx1, %rdx1, %rdx2;\n\tcvta.to.global.u64 %rdx1, %rdx1;\n\tst.global.u32 [%rdx1], 7;\n\tret;\n",
    );
    let texts = [kernel.original(), hang, kernel.original(), fault, oob, kernel.original()];
    let cubins: Vec<Vec<u8>> =
        link(&mut compiler, &texts, arch).unwrap().into_iter().map(|r| r.expect("each links")).collect();
    let job = dir.job(4096, 1, cubins[0].clone()).unwrap();
    let mut worker = GpuWorker::kernels(&gpu_worker_executable().unwrap(), job).unwrap();
    worker.set_deadline(Duration::from_secs(3));
    let t = std::time::Instant::now();
    let out = worker.run_variants(&cubins).unwrap();
    eprintln!("six variants, one hanging and one faulting, in {:?}", t.elapsed());
    let exact = |o: &VariantOutcome| matches!(o, VariantOutcome::Run(VariantRun::Ran { error, out_of_bounds: false, .. }) if *error == 0.0);
    assert!(exact(&out[0]) && exact(&out[2]) && exact(&out[5]), "{out:?}");
    assert_eq!(out[1], VariantOutcome::Timeout);
    assert!(matches!(out[3], VariantOutcome::Fault(_)), "{:?}", out[3]);
    assert!(
        matches!(out[4], VariantOutcome::Run(VariantRun::Ran { out_of_bounds: true, .. })),
        "{:?}",
        out[4]
    );
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_short_search_on_each_example_keeps_the_original_s_output() {
    let arch = common::require_gpu("improve_search");
    for name in EXAMPLES {
        let dir = example(name);
        let out = tempfile::tempdir().unwrap();
        let config = ImproveConfig {
            population: 16,
            generations: 2,
            arch,
            compiler: CompilerSpec::Threads(Workers::PerCore),
            out: Some(out.path().to_path_buf()),
            ..ImproveConfig::default()
        };
        let o = improve(&dir, &config, |r| eprintln!("{name}: {r:?}")).unwrap();
        assert_eq!(o.records.len(), 3);
        assert!(o.original_ms > 0.0);
        assert!(o.evaluated > 16, "{name}: {} variants", o.evaluated);
        assert!(out.path().join("records.jsonl").is_file() && out.path().join("original.ptx").is_file());
        if let Some(best) = &o.best {
            assert!(best.score.error <= dir.tolerance);
            assert!(out.path().join("best.cubin").is_file() && out.path().join("best.diff").is_file());
            assert_eq!(o.checks.len(), 1 + dir.validate.len());
        }
    }
}

#[test]
fn without_a_gpu_both_kinds_of_worker_refuse_in_one_line() {
    if gpfarm_kernels::gpu::probe().is_ok() {
        eprintln!("SKIPPED without_a_gpu: this machine has a GPU (the tests above run there)");
        return;
    }
    let exe = gpu_worker_executable().unwrap();
    let job = gpfarm_protocol::worker::KernelJob {
        original: vec![0; 16],
        entry: "k".into(),
        args: Vec::new(),
        grid: [1; 3],
        block: [1; 3],
        shared_bytes: 0,
        measure: gpfarm_protocol::worker::ErrorMeasure::Exact,
        repeats: 1,
    };
    let kernels = GpuWorker::kernels(&exe, job).err().expect("no GPU, no kernel worker").to_string();
    let problem = gpfarm_protocol::worker::ProblemRef::Builtin("keijzer6".into());
    let evaluator =
        GpuWorker::spawn(&exe, problem, vec![1, 2, 3]).err().expect("no GPU, no worker").to_string();
    for err in [kernels, evaluator] {
        assert!(err.contains("could not start: no GPU") && !err.contains('\n'), "{err}");
    }
}
