//! A unit whose CUBIN lacks a kernel it named fails, and its individuals are compiled again
//! alone, rather than being evaluated from someone else's code.

mod common;

use common::nvrtc_or_skip;
use gpfarm_client::cubin::missing_kernel;
use gpfarm_client::{Batch, CompileOptions, Compiler, CompilerError, InProcess, Unit, UnitOutcome};
use gpfarm_evolve::{Engine, EvalMode, Options, ProblemRef, Route};
use gpfarm_gp::EvolutionConfig;

/// NVRTC in process, except that the first CUBIN it returns for the run's individuals is another
/// unit's (not the one of the template check the engine compiles before generation 0).
struct Swapping {
    inner: InProcess,
    other: Vec<u8>,
    swapped: bool,
}

impl Compiler for Swapping {
    fn name(&self) -> String {
        "swapping".into()
    }

    fn toolchain(&self) -> String {
        self.inner.toolchain()
    }

    fn compile(&mut self, units: &[Unit], options: &CompileOptions) -> Result<Batch, CompilerError> {
        let mut batch = self.inner.compile(units, options)?;
        let individuals =
            |u: &Unit| !String::from_utf8_lossy(&u.source).contains(gpfarm_evolve::TEMPLATE_CHECK_KERNEL);
        if !self.swapped
            && let Some((r, _)) =
                batch.results.iter_mut().zip(units).find(|(r, u)| r.cubin().is_some() && individuals(u))
        {
            r.outcome = UnitOutcome::Cubin(self.other.clone());
            self.swapped = true;
        }
        Ok(batch)
    }
}

/// Each generation's best and mean, and the units compiled to find who broke one.
fn run(compiler: &mut (dyn Compiler + Send)) -> (Vec<(f64, Option<f64>)>, usize) {
    let options = Options {
        evolution: EvolutionConfig {
            population: 60,
            generations: 3,
            seed: 2,
            max_size: 0,
            ..EvolutionConfig::default()
        },
        eval: EvalMode::Cpu,
        route: Some(Route::Nvrtc),
        ..Options::default()
    };
    let engine = Engine::new(ProblemRef::Builtin("keijzer6".into()), options).unwrap();
    let (mut trajectory, mut isolation) = (Vec::new(), 0);
    engine
        .run(compiler, |r| {
            trajectory.push((r.best, r.mean));
            isolation += r.compile.isolation_units;
            Ok(())
        })
        .unwrap();
    (trajectory, isolation)
}

#[test]
fn a_cubin_without_its_kernels_fails_its_unit_and_the_run_is_unchanged() {
    if !nvrtc_or_skip("cubin_check") {
        return;
    }
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let engine = Engine::new(ProblemRef::Builtin("keijzer6".into()), Options::default()).unwrap();
    let options = engine.compile_options();
    let mut clean = InProcess::new(&toolchain, &options).unwrap();
    let other = clean
        .compile(
            &[Unit::new("other.cu", "extern \"C\" __global__ void other(float* y) { y[0] = 1.0f; }")],
            &options,
        )
        .unwrap()
        .results[0]
        .cubin()
        .unwrap()
        .to_vec();
    assert_eq!(missing_kernel(&other, &["other".into()]), None);
    // Branches of a switch kernel name the kernel before the `@`.
    assert_eq!(missing_kernel(&other, &["other@0".into(), "other@7".into()]), None);
    assert!(missing_kernel(&other, &["mine@0".into()]).unwrap().contains("`mine`"));
    let why = missing_kernel(&other, &["other".into(), "mine".into()]).unwrap();
    assert!(why.contains("lacks kernel `mine`") && why.contains("other"), "{why}");
    assert!(missing_kernel(b"not an ELF", &[]).unwrap().contains("not a CUDA ELF"));

    let (expected, none) = run(&mut clean);
    assert_eq!(none, 0, "a clean run isolates nobody");
    let mut swapping =
        Swapping { inner: InProcess::new(&toolchain, &options).unwrap(), other, swapped: false };
    let (got, isolation) = run(&mut swapping);
    assert!(swapping.swapped);
    assert!(isolation > 0, "the unit with the wrong CUBIN was not split");
    assert_eq!(got, expected);
}
