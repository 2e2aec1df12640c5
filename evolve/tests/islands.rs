//! The island model in one process: a run is fixed by its seed and its island count whatever
//! the timing (caching, overlap, evaluation threads, the order islands finish in); one island is
//! the run without islands; migration changes the islands it should and nothing before it; a
//! callback's error stops every island.

use std::collections::BTreeMap;

use gpfarm_evolve::{Engine, EvalMode, EvolveError, GenerationRecord, Options, ProblemRef};
use gpfarm_gp::EvolutionConfig;

fn options(seed: u64, islands: usize, cache: bool, overlap: bool) -> Options {
    Options {
        evolution: EvolutionConfig {
            population: 120,
            generations: 9,
            seed,
            max_size: 0,
            ..EvolutionConfig::default()
        },
        eval: EvalMode::Cpu,
        cache,
        overlap,
        islands,
        migrate_every: 3,
        migrants: 3,
        ..Options::default()
    }
}

/// Each island's (best, mean, best phenotype) per generation, in order, and the summary's best.
type Run = (BTreeMap<usize, Vec<(u64, Option<u64>, Option<String>)>>, f64, Vec<f64>);

fn run(problem: &str, options: Options) -> Run {
    let engine = Engine::new(ProblemRef::Builtin(problem.into()), options).unwrap();
    let mut islands: BTreeMap<usize, Vec<_>> = BTreeMap::new();
    let summary = engine
        .run_without_compiling(|r: &GenerationRecord| {
            let seen = islands.entry(r.island).or_default();
            assert_eq!(seen.len(), r.generation, "island {}: generations in order", r.island);
            seen.push((r.best.to_bits(), r.mean.map(f64::to_bits), r.best_phenotype.clone()));
            Ok(())
        })
        .unwrap();
    (islands, summary.best_fitness, summary.island_best)
}

#[test]
fn a_seed_and_an_island_count_fix_the_run_whatever_the_timing() {
    for problem in ["keijzer6", "multiplier5"] {
        let reference = run(problem, options(11, 3, true, true));
        assert_eq!(reference.0.len(), 3);
        assert!(reference.0.values().all(|g| g.len() == 10));
        for (cache, overlap) in [(false, false), (true, false), (false, true), (true, true)] {
            assert_eq!(
                run(problem, options(11, 3, cache, overlap)),
                reference,
                "{problem}: cache {cache}, overlap {overlap}"
            );
        }
        // The run's best is the best of its islands.
        let (_, best, island_best) = &reference;
        assert_eq!(island_best.len(), 3);
        assert!(island_best.contains(best));
        assert_ne!(run(problem, options(12, 3, true, true)).0, reference.0, "{problem}: another seed");
    }
}

#[test]
fn one_island_is_the_run_without_islands_and_migration_changes_what_comes_after_it() {
    let problem = "keijzer6";
    let plain = run(problem, Options { islands: 1, ..options(5, 1, true, true) });
    let mut no_migration = options(5, 1, true, true);
    no_migration.migrate_every = 1;
    assert_eq!(run(problem, no_migration), plain, "one island migrates to itself: nothing changes");
    let three = run(problem, options(5, 3, true, true));
    // Island 0 of three is seed 5's run up to the first migration (after generation 2, whose
    // record counts its immigrants); they change it after that.
    assert_eq!(three.0[&0][..2], plain.0[&0][..2]);
    assert_ne!(three.0[&0], plain.0[&0]);
    // Without migration (every more than the run) island 0 is seed 5's run throughout.
    let mut apart = options(5, 3, true, true);
    apart.migrate_every = 100;
    assert_eq!(run(problem, apart).0[&0], plain.0[&0]);
}

#[test]
fn immigrants_carry_the_best_along_the_ring() {
    // Migration after every generation but the last, 3 migrants: from generation 1 on, no
    // island's best is worse than the previous island's best of the generation before (that
    // island's elite keeps it, and it arrives among the immigrants; a generation's record counts
    // its immigrants). Generation 9, the last, receives none.
    let mut o = options(3, 4, true, true);
    o.migrate_every = 1;
    let (islands, _, _) = run("keijzer6", o);
    for g in 1..9 {
        for i in 0..4 {
            let previous = f64::from_bits(islands[&((i + 3) % 4)][g - 1].0);
            let mine = f64::from_bits(islands[&i][g].0);
            assert!(
                mine <= previous,
                "generation {g}: island {i} best {mine}, previous island had {previous}"
            );
        }
    }
}

#[test]
fn a_failing_callback_stops_every_island() {
    let engine = Engine::new(ProblemRef::Builtin("keijzer6".into()), options(1, 3, true, true)).unwrap();
    let mut seen = 0;
    let err = engine
        .run_without_compiling(|_| {
            seen += 1;
            if seen == 4 { Err("enough".into()) } else { Ok(()) }
        })
        .unwrap_err();
    assert!(matches!(&err, EvolveError::Callback(e) if e.to_string() == "enough"), "{err}");
    assert!(seen < 30, "the islands went on after the callback failed: {seen} records");
}

#[test]
fn island_settings_that_cannot_work_are_refused() {
    for (islands, every, migrants, needle) in
        [(0, 3, 1, "--islands"), (2, 0, 1, "--migrate-every"), (2, 3, 120, "--migrants")]
    {
        let o = Options { islands, migrate_every: every, migrants, ..options(1, 1, true, true) };
        let err = Engine::new(ProblemRef::Builtin("keijzer6".into()), o).err().expect("refused");
        assert!(err.to_string().contains(needle), "{err}");
    }
}

#[test]
fn a_stopped_engine_ends_its_run() {
    let engine = Engine::new(ProblemRef::Builtin("keijzer6".into()), options(1, 2, true, true)).unwrap();
    engine.stopper().store(true, std::sync::atomic::Ordering::Relaxed);
    let err = engine.run_without_compiling(|_| Ok(())).unwrap_err();
    assert!(matches!(err, EvolveError::Stopped), "{err}");
}
