//! The PTX route without a GPU: what it emits for the built-in problems' random and bred
//! populations, ptxas assembles; huge phenotypes emit without exhausting the stack; templates
//! other than the standard harness are refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gpfarm_gp::problem::ProblemSources;
use gpfarm_gp::{Phenotype, Problem};
use gpfarm_kernels::ptx_supported;
use gpfarm_kernels::unit::{Batch, kernel_name, key_text, render, render_batch};
use gpfarm_protocol::Language;

fn keyed_ptx(
    problem: &Problem,
    p: &Phenotype,
    arch: SmArch,
) -> Result<String, gpfarm_gp::program::ParseError> {
    key_text(problem, Language::Ptx, arch, p, None)
}

fn render_ptx_units(
    problem: &Problem,
    phenotypes: &[Phenotype],
    generation: usize,
    parts: &[std::ops::Range<usize>],
    arch: SmArch,
    shape: Shape,
) -> Batch {
    render_batch(problem, Language::Ptx, shape, arch, phenotypes, generation, parts)
}
use gpfarm_protocol::{Shape, SmArch};

/// ptxas: `GPFARM_PTXAS`, else the pinned wheel's (`.toolchain/site/nvidia/cu13/bin/ptxas` in
/// this checkout or an ancestor), else a CUDA installation's. `None`, with the reason printed,
/// when there is none; with `GPFARM_REQUIRE_NVRTC=1` a missing ptxas fails instead.
fn ptxas_or_skip(test: &str) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("GPFARM_PTXAS").map(PathBuf::from).into_iter().collect();
    for dir in Path::new(env!("CARGO_MANIFEST_DIR")).ancestors() {
        candidates.push(dir.join(".toolchain/site/nvidia/cu13/bin/ptxas"));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            candidates.push(PathBuf::from(home).join("bin/ptxas"));
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda/bin/ptxas"));
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Some(found.clone());
    }
    let looked = candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    if std::env::var_os("GPFARM_REQUIRE_NVRTC").is_some() {
        panic!("{test}: ptxas is required here; looked at {looked}");
    }
    eprintln!("SKIPPED {test}: no ptxas (looked at {looked})");
    None
}

/// Assembles `ptx` as relocatable code (it calls the math library's extern functions).
fn assemble(ptxas: &Path, name: &str, ptx: &str) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join(name);
    std::fs::write(&input, ptx).unwrap();
    let out = Command::new(ptxas)
        .args(["-arch=sm_90", "-c", "-o"])
        .arg(dir.path().join("out.o"))
        .arg(&input)
        .output()
        .unwrap();
    if !out.status.success() {
        let kept = std::env::temp_dir().join(name);
        std::fs::write(&kept, ptx).unwrap();
        panic!(
            "ptxas refused {name} (kept at {}):\n{}{}",
            kept.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn assembles_all(problem_name: &str) {
    let test = format!("{problem_name}_populations_assemble");
    let Some(ptxas) = ptxas_or_skip(&test) else {
        return;
    };
    let problem = Problem::builtin(problem_name).unwrap();
    ptx_supported(&problem).unwrap();
    let mut individuals = 0;
    for (k, phenotypes) in common::populations(&problem, &[1, 2, 3], 300).iter().enumerate() {
        let n = phenotypes.len();
        let parts: Vec<_> = (0..n).step_by(50).map(|s| s..(s + 50).min(n)).collect();
        for shape in [Shape::Kernels, Shape::Switch] {
            let units = render_ptx_units(&problem, phenotypes, k, &parts, SmArch::SM_90, shape);
            // The grammars produce only what the parser accepts.
            assert_eq!(units.refused, vec![], "{problem_name}");
            let started = Instant::now();
            for u in &units.units {
                assert!(u.source().contains(".target sm_90"));
                let entries = u.source().matches(".visible .entry").count();
                assert_eq!(entries, if shape == Shape::Switch { 1 } else { u.members.len() });
                assemble(&ptxas, &format!("{problem_name}_{shape}_{}", u.unit.name), u.source());
            }
            eprintln!(
                "{problem_name} population {k}: {n} distinct individuals in {} units of {shape}, ptxas {:.2} s",
                units.units.len(),
                started.elapsed().as_secs_f64()
            );
        }
        individuals += n;
    }
    assert!(individuals > 600, "{individuals}");
}

#[test]
fn keijzer6_populations_assemble() {
    assembles_all("keijzer6");
}

#[test]
fn search_populations_assemble() {
    assembles_all("search");
}

#[test]
fn multiplier5_populations_assemble() {
    assembles_all("multiplier5");
}

/// Every construct of the subset in one statement problem with float and int locals, and every
/// math function in both forms (protected division with a divisor known only at run time and a
/// constant one).
#[test]
fn every_construct_assembles() {
    let Some(ptxas) = ptxas_or_skip("every_construct_assembles") else {
        return;
    };
    let problem = Problem::builtin("search").unwrap();
    let statements = Phenotype::new(
        "for (i = 0; i < LENINPUT; i++) { if (INPUT[i] == SEARCH && OUTPUT == 0 || !tmp) OUTPUT = i; else tmp += 2; } \
         while (tmp < 3) tmp++; tmp = (int)(SEARCH * 1.5) % 7 << 2 >> 1 ^ ~tmp | 5 & -3; \
         tmp = SEARCH > 2 ? (int)sqrtf(SEARCH) : (int)(fabs(SEARCH / 3.0) + fmaxf(1.0f, tmp) + fmin(2, 3.5)); \
         tmp = (int)(sinf(tmp) + cosf(tmp) + expf(tmp) + logf(tmp) + tanhf(tmp) + powf(tmp, 2.0f)); \
         tmp = (int)(sin(tmp) + cos(tmp) + exp(tmp) + log(tmp) + tanh(tmp) + pow(tmp, 0.5)); \
         tmp = (int)(pdivf(tmp, SEARCH) + pdiv(tmp, 0.5) + pdiv(SEARCH * 1.0, tmp) + pdivf(2.0f, 0.0005f)); \
         tmp /= 3; tmp -= INPUT[-7]; if (tmp != 2.5f) { } i--; OUTPUT = OUTPUT >= tmp; OUTPUT = OUTPUT <= 1e300;",
    );
    let keijzer = Problem::builtin("keijzer6").unwrap();
    let expression = Phenotype::new(
        "x > 1 ? -x : (double)x / 07.35 + (x != x) - !x + (float)(int)x + pdivf(1.0f, x - 1.0f) + pdiv(x, x * 1.0)",
    );
    let ptx = keyed_ptx(&problem, &statements, SmArch::SM_90).unwrap();
    assemble(&ptxas, "search_constructs.ptx", &ptx);
    let ptx = keyed_ptx(&keijzer, &expression, SmArch::SM_90).unwrap();
    assemble(&ptxas, "keijzer_constructs.ptx", &ptx);
}

/// A 10,000-term sum and phenotypes nested as deep as the parser allows emit (and assemble)
/// without exhausting a test thread's stack.
#[test]
fn huge_and_deep_phenotypes_emit() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let sum =
        (0..10_000).map(|k| if k % 2 == 0 { "x".to_owned() } else { format!("{k}.5f") }).collect::<Vec<_>>();
    let sum = Phenotype::new(sum.join(" + "));
    let nested = Phenotype::new(format!("{}x{}", "sinf(-(".repeat(60), "))".repeat(60)));
    let parens = Phenotype::new(format!("{}x{}", "(".repeat(190), ")".repeat(190)));
    let mut emitted = Vec::new();
    for p in [&sum, &nested, &parens] {
        let ptx = keyed_ptx(&problem, p, SmArch::SM_90).unwrap();
        assert!(ptx.contains(".visible .entry gpfarm_individual("));
        emitted.push(ptx);
    }
    assert_eq!(emitted[0].matches("add.rn.f32").count(), 9_999);
    assert_eq!(emitted[1].matches("call.uni").count(), 60);
    if let Some(ptxas) = ptxas_or_skip("huge_and_deep_phenotypes_emit") {
        for (k, ptx) in emitted.iter().enumerate() {
            assemble(&ptxas, &format!("huge_{k}.ptx"), ptx);
        }
    }
}

/// A problem that is keijzer6 except for its template.
fn keijzer6_with_template(template: &str) -> Problem {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gp/problems/keijzer6");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let (toml, grammar, cases) = (read("problem.toml"), read("grammar.bnf"), read("cases.json"));
    Problem::from_sources(
        "keijzer6 with another template",
        &ProblemSources { toml: &toml, grammar: &grammar, cases: &cases, template },
    )
    .unwrap()
}

#[test]
fn the_built_in_problems_take_the_ptx_route() {
    for name in Problem::builtin_names() {
        ptx_supported(&Problem::builtin(name).unwrap()).unwrap();
    }
}

#[test]
fn a_template_that_computes_more_is_refused_at_its_line() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gp/problems/keijzer6");
    let original = std::fs::read_to_string(dir.join("template.cu")).unwrap();
    let changed =
        original.replace("out_y[c] = (float)({{PHENOTYPE}});", "out_y[c] = (float)({{PHENOTYPE}}) * 2.0f;");
    assert_ne!(original, changed);
    let line = changed.lines().position(|l| l.contains("* 2.0f")).unwrap() + 1;
    let err = ptx_supported(&keijzer6_with_template(&changed)).unwrap_err();
    assert_eq!(err.difference.line, line);
    let message = err.to_string();
    assert!(message.contains(&format!("line {line}")), "{message}");
    assert!(message.contains("`out_y[c] = (float)({{PHENOTYPE}}) * 2.0f;`"), "{message}");
    assert!(message.contains("which has `out_y[c] = (float)({{PHENOTYPE}});`"), "{message}");

    // Comments and spacing are not differences.
    let respaced = original.replace("if (c >= NCASES) return;", "if (c>=NCASES)   return; // past the end");
    ptx_supported(&keijzer6_with_template(&respaced)).unwrap();
    // A harness with a different case index is.
    let other = original.replace("int c = blockIdx.x * blockDim.x + threadIdx.x;", "int c = threadIdx.x;");
    let err = ptx_supported(&keijzer6_with_template(&other)).unwrap_err();
    assert_eq!(err.difference.found, "int c = threadIdx.x;");
    assert_eq!(err.difference.standard, "int c = blockIdx.x * blockDim.x + threadIdx.x;");
}

#[test]
fn refused_phenotypes_are_listed_and_left_out() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let phenotypes: Vec<Phenotype> =
        ["x + 1", "y + 1", "x * 2.0f", "sinf(x", "atan(x)", "x"].iter().map(|s| Phenotype::new(*s)).collect();
    let units =
        render_ptx_units(&problem, &phenotypes, 4, &[0..2, 2..4, 4..6], SmArch::SM_90, Shape::Kernels);
    let refused: Vec<usize> = units.refused.iter().map(|r| r.index).collect();
    assert_eq!(refused, vec![1, 3, 4]);
    assert_eq!(units.units.len(), 3);
    assert_eq!(units.units[0].members, vec![0]);
    assert_eq!(units.units[0].kernels, vec!["g4_i0"]);
    assert_eq!(units.units[1].unit.name, "g4_u1.ptx");
    assert_eq!(units.units[2].members, vec![5]);
    // A part whose individuals are all refused gives no unit.
    let none = render_ptx_units(&problem, &phenotypes, 4, &[1..2, 2..3], SmArch::SM_90, Shape::Kernels);
    assert_eq!(none.units.len(), 1);
    assert_eq!(none.units[0].unit.name, "g4_u1.ptx");
    let program = gpfarm_gp::Program::parse(&problem, &phenotypes[0]).unwrap();
    let k = kernel_name(0, 0);
    let member =
        gpfarm_kernels::unit::Member { kernel: &k, phenotype: &phenotypes[0], program: Some(&program) };
    let unit = render(&problem, Language::Ptx, Shape::Kernels, SmArch(80), &k, &[member]).unit;
    assert_eq!(String::from_utf8(unit.source).unwrap().matches(".target sm_80").count(), 1);
}
