//! Breeding as data arrives gives exactly the run of the classic loop (a pipeline of depth 1,
//! evaluated in order), whatever the depth and whatever the order in which fitness values come
//! back. The classic loop's runs are also pinned by values recorded from its original, separate
//! implementation, so a change to the loop itself cannot pass unnoticed.

use std::num::NonZeroUsize;

use gpfarm_gp::{
    Evolution, EvolutionConfig, EvolutionError, Fitness, GenerationStats, Pipeline, Problem,
    evaluate_phenotype, run_cpu_with,
};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn config(seed: u64) -> EvolutionConfig {
    EvolutionConfig {
        population: 50,
        generations: 8,
        seed,
        elite: 2,
        max_size: 0,
        ..EvolutionConfig::default()
    }
}

/// Runs a pipeline, answering fitness in a shuffled order a few at a time, and returns every
/// generation's statistics and the most generations ever incomplete at once.
fn run_pipeline(
    problem: &Problem,
    cfg: &EvolutionConfig,
    depth: usize,
    order_seed: u64,
) -> (Vec<GenerationStats>, usize) {
    let mut p = Pipeline::new(problem, cfg.clone(), NonZeroUsize::new(depth).unwrap()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(order_seed);
    let mut waiting = Vec::new();
    let mut stats = Vec::new();
    let mut most_open = 0;
    while !p.is_finished() {
        waiting.extend(p.take_born());
        waiting.shuffle(&mut rng);
        let n = rng.random_range(1..=8).min(waiting.len());
        let open: std::collections::BTreeSet<usize> = waiting.iter().map(|b| b.generation).collect();
        most_open = most_open.max(open.len());
        for b in waiting.drain(..n) {
            p.set_fitness(b.generation, b.slot, evaluate_phenotype(problem, &b.phenotype).fitness).unwrap();
        }
        stats.extend(p.advance());
    }
    (stats, most_open)
}

#[test]
fn a_pipeline_gives_the_classic_run_at_any_depth_and_in_any_order() {
    for name in ["keijzer6", "search", "multiplier5"] {
        let problem = Problem::builtin(name).unwrap();
        let cfg = config(7);
        let classic = run_cpu_with(&problem, &cfg, NonZeroUsize::MIN, |_| {}).unwrap();
        for depth in [1, 2, 3] {
            for order in [1, 2] {
                let (stats, most_open) = run_pipeline(&problem, &cfg, depth, order);
                assert_eq!(stats, classic.generations, "{name}, depth {depth}, order {order}");
                assert!(most_open <= depth, "{name}: {most_open} generations open at depth {depth}");
            }
        }
    }
}

#[test]
fn at_depth_two_the_next_generation_is_bred_before_this_one_is_complete() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let cfg = EvolutionConfig {
        population: 100,
        generations: 3,
        seed: 3,
        max_size: 0,
        ..EvolutionConfig::default()
    };
    let mut p = Pipeline::new(&problem, cfg, NonZeroUsize::new(2).unwrap()).unwrap();
    let mut first = p.take_born();
    assert!(first.iter().all(|b| b.generation == 0));
    // Answer all but the last few of generation 0.
    let held = first.split_off(first.len() - 3);
    for b in &first {
        p.set_fitness(0, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    assert!(p.advance().is_empty(), "generation 0 is not complete yet");
    let early = p.take_born();
    assert!(
        !early.is_empty() && early.iter().all(|b| b.generation == 1),
        "nothing of generation 1 bred early"
    );
    assert_eq!(p.oldest_open(), Some(0));
    for b in &held {
        p.set_fitness(0, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    let done = p.advance();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].generation, 0);
    // The rest of generation 1 follows at once; elites keep their fitness and are not handed out.
    let rest = p.take_born();
    let slots: std::collections::BTreeSet<usize> = early.iter().chain(&rest).map(|b| b.slot).collect();
    assert!(!slots.contains(&0), "the elite was handed out for evaluation");
    assert!(rest.iter().all(|b| b.generation == 1));
}

#[test]
fn the_classic_loop_breeds_the_same_children_as_the_pipeline_step_by_step() {
    // The same seed and fitness give the same generation-1 population in both.
    let problem = Problem::builtin("search").unwrap();
    let cfg = config(21);
    let mut evo = Evolution::new(&problem, cfg.clone()).unwrap();
    let dedup = evo.dedup();
    let unique: Vec<Fitness> = dedup.unique.iter().map(|p| evaluate_phenotype(&problem, p).fitness).collect();
    evo.set_fitness(dedup.expand(&unique, problem.direction()).unwrap()).unwrap();
    evo.breed().unwrap();
    let mut p = Pipeline::new(&problem, cfg, NonZeroUsize::MIN).unwrap();
    for b in p.take_born() {
        p.set_fitness(b.generation, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    p.advance();
    let bred: Vec<_> = p.take_born();
    for b in &bred {
        assert_eq!(evo.population()[b.slot].phenotype(), Some(&b.phenotype), "slot {}", b.slot);
    }
    let invalid = evo.population().iter().skip(2).filter(|i| i.phenotype().is_none()).count();
    assert_eq!(bred.len() + invalid, 48);
}

#[test]
fn a_fitness_for_nobody_is_an_error_not_a_panic() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let mut p = Pipeline::new(&problem, config(1), NonZeroUsize::MIN).unwrap();
    let b = p.take_born().remove(0);
    let f = evaluate_phenotype(&problem, &b.phenotype).fitness;
    assert!(matches!(p.set_fitness(5, 0, f), Err(EvolutionError::UnknownIndividual { .. })));
    assert!(matches!(p.set_fitness(0, 999, f), Err(EvolutionError::UnknownIndividual { .. })));
    p.set_fitness(0, b.slot, f).unwrap();
    assert!(matches!(p.set_fitness(0, b.slot, f), Err(EvolutionError::UnknownIndividual { .. })));
    let wrong = Fitness::new(1.0, gpfarm_gp::Direction::Higher);
    assert!(matches!(p.set_fitness(0, 1, wrong), Err(EvolutionError::FitnessDirection { .. })));
}

/// Per generation: index, best fitness, mean, invalid, unique phenotypes, mean genome length.
type Row = (usize, f64, Option<f64>, usize, usize, f64);

fn rows(stats: &[GenerationStats]) -> Vec<Row> {
    stats
        .iter()
        .map(|s| (s.generation, s.best.value(), s.mean, s.invalid, s.unique_phenotypes, s.mean_genome_len))
        .collect()
}

/// Recorded from the classic loop before it became a pipeline of depth 1 (`config(7)`, evaluated
/// by the CPU interpreter): each problem's generations and the best phenotype of the run.
/// Keijzer-6's means of generations 2, 6 and 8 moved in their 11th to 13th digit when the evaluator's
/// `sinf` and `cosf` became its own, correctly rounded, instead of the C library's; every other
/// figure, the populations and the bests stayed as recorded.
const RECORDED: [(&str, [Row; 9], &str, f64); 3] = [
    (
        "keijzer6",
        [
            (0, 0.5486935788910617, Some(3.1156932920247594e29), 0, 37, 64.24),
            (1, 0.5486935788910617, Some(1.6763433132202105e25), 0, 40, 70.74),
            (2, 0.5486935788910617, Some(8.467989659545966), 0, 37, 76.0),
            (3, 0.5045186155296874, Some(1.6763433132202105e25), 0, 39, 73.38),
            (4, 0.5045186155296874, Some(1.3394337869981674e26), 0, 46, 75.7),
            (5, 0.5045186155296874, Some(56.60656308916307), 0, 41, 75.42),
            (6, 0.5045186117099613, Some(43.57115689502439), 0, 38, 79.82),
            (7, 0.11537879503058845, Some(1.1158280412441166e27), 0, 39, 73.72),
            (8, 0.11537879503058845, Some(86.59529922573859), 0, 34, 65.34),
        ],
        "logf(fabsf(x + x)+1)",
        0.11537879503058845,
    ),
    (
        "search",
        [
            (0, 16.0, Some(2.0833333333333335), 2, 48, 64.24),
            (1, 16.0, Some(3.7708333333333335), 2, 45, 71.7),
            (2, 16.0, Some(4.387755102040816), 1, 48, 69.42),
            (3, 16.0, Some(3.2857142857142856), 1, 49, 73.92),
            (4, 16.0, Some(3.8085106382978724), 3, 47, 65.0),
            (5, 16.0, Some(4.541666666666667), 2, 46, 77.5),
            (6, 16.0, Some(6.395833333333333), 2, 46, 77.98),
            (7, 16.0, Some(5.583333333333333), 2, 48, 87.66),
            (8, 16.0, Some(5.4375), 2, 42, 90.66),
        ],
        "for(i=0;i < LENINPUT;i++){OUTPUT = (-1);}",
        16.0,
    ),
    (
        "multiplier5",
        [
            (0, 4433.0, Some(5122.875), 2, 48, 64.24),
            (1, 4433.0, Some(4961.693877551021), 1, 48, 70.24),
            (2, 4433.0, Some(4874.836734693878), 1, 46, 71.64),
            (3, 4381.0, Some(4829.08), 0, 49, 72.42),
            (4, 4381.0, Some(4819.2), 0, 49, 75.56),
            (5, 4285.0, Some(4662.68), 0, 49, 76.1),
            (6, 4277.0, Some(4676.7959183673465), 1, 47, 64.06),
            (7, 4201.0, Some(4596.183673469388), 1, 49, 70.12),
            (8, 4201.0, Some(4592.3877551020405), 1, 48, 73.52),
        ],
        "o0=b0;o1=a1;o2=(a1 & a0);o3=((~ a4) | (~ a4));o4=a3;o5=((~ a3) & b0);o6=(~ a1);\
         o7=((~ a0) & (~ a1));o8=b0;o9=((~ b3) & b3);",
        4201.0,
    ),
];

#[test]
fn the_loop_repeats_the_recorded_runs_of_the_classic_loop() {
    // Recorded with grammatical evolution's codons, which stay available as they were.
    let config = |seed| EvolutionConfig { representation: gpfarm_gp::Representation::Ge, ..config(seed) };
    for (name, generations, best, best_fitness) in RECORDED {
        let problem = Problem::builtin(name).unwrap();
        let report = run_cpu_with(&problem, &config(7), NonZeroUsize::MIN, |_| {}).unwrap();
        assert_eq!(rows(&report.generations), generations, "{name}");
        let (phenotype, fitness) = report.best.unwrap();
        assert_eq!((phenotype.as_str(), fitness.value()), (best, best_fitness), "{name}");

        // Driven step by step, the loop gives the same generations.
        let mut evo = Evolution::new(&problem, config(7)).unwrap();
        let mut stepped = Vec::new();
        loop {
            let dedup = evo.dedup();
            let unique: Vec<Fitness> =
                dedup.unique.iter().map(|p| evaluate_phenotype(&problem, p).fitness).collect();
            evo.set_fitness(dedup.expand(&unique, problem.direction()).unwrap()).unwrap();
            stepped.push(evo.stats().unwrap());
            if evo.generation() == config(7).generations {
                break;
            }
            evo.breed().unwrap();
        }
        assert_eq!(stepped, report.generations, "{name}");
    }
}

/// Runs a ring of island pipelines in one thread, answering each island's fitness in a shuffled
/// order a few at a time; when every island waits for its immigrants, the best `migrants` of
/// each go to the next. Returns each island's statistics.
fn run_islands(
    problem: &Problem,
    seeds: &[u64],
    depth: usize,
    order_seed: u64,
    every: Option<usize>,
    migrants: usize,
) -> Vec<Vec<GenerationStats>> {
    let depth = NonZeroUsize::new(depth).unwrap();
    let mut islands: Vec<Pipeline> = seeds
        .iter()
        .map(|&s| {
            let mut p = Pipeline::new(problem, config(s), depth).unwrap();
            if let Some(every) = every {
                p.migrate_every(every);
            }
            p
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(order_seed);
    let mut waiting = vec![Vec::new(); seeds.len()];
    let mut stats = vec![Vec::new(); seeds.len()];
    while !islands.iter().all(Pipeline::is_finished) {
        let awaiting: Vec<Option<usize>> = islands.iter().map(Pipeline::awaiting_migration).collect();
        if awaiting.iter().all(Option::is_some) {
            let g = awaiting[0].unwrap();
            assert!(
                awaiting.iter().all(|a| *a == Some(g)),
                "islands wait at different generations: {awaiting:?}"
            );
            let out: Vec<_> = islands.iter().map(|p| p.emigrants(g, migrants).unwrap()).collect();
            let n = islands.len();
            for (i, p) in islands.iter_mut().enumerate() {
                p.immigrate(g, out[(i + n - 1) % n].clone()).unwrap();
            }
        }
        // One island at a time, drawn at random: they progress at different speeds.
        let i = rng.random_range(0..islands.len());
        let p = &mut islands[i];
        waiting[i].extend(p.take_born());
        waiting[i].shuffle(&mut rng);
        let n = rng.random_range(1..=8).min(waiting[i].len());
        for b in waiting[i].drain(..n) {
            p.set_fitness(b.generation, b.slot, evaluate_phenotype(problem, &b.phenotype).fitness).unwrap();
        }
        stats[i].extend(p.advance());
    }
    stats
}

#[test]
fn islands_migrate_the_same_way_at_any_depth_and_in_any_order() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let seeds = [7, 8, 9];
    let reference = run_islands(&problem, &seeds, 1, 1, Some(3), 2);
    assert!(reference.iter().all(|s| s.len() == 9));
    for depth in [1, 2] {
        for order in [2, 3] {
            assert_eq!(
                run_islands(&problem, &seeds, depth, order, Some(3), 2),
                reference,
                "depth {depth}, order {order}"
            );
        }
    }
    // Without migration each island is the run of its own seed; with it, generations up to the
    // first migration (after generation 2) are the same, and later ones are not.
    let apart = run_islands(&problem, &seeds, 2, 1, None, 2);
    for (i, &seed) in seeds.iter().enumerate() {
        let alone = run_cpu_with(&problem, &config(seed), NonZeroUsize::MIN, |_| {}).unwrap();
        assert_eq!(apart[i], alone.generations, "island {i} without migration");
        assert_eq!(reference[i][..2], alone.generations[..2], "island {i} before migrating");
    }
    assert_ne!(reference, apart, "migration changed nothing");
}

#[test]
fn immigrants_replace_the_worst_and_keep_their_fitness() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let stats = run_islands(&problem, &[1, 2], 1, 4, Some(1), 3);
    // Generation g of island 1 holds island 0's best 3 of generation g (immigrated after it was
    // evaluated), so its best is at least island 0's best. Not the last generation: no
    // migration after it.
    for (g, (mine, theirs)) in stats[1].iter().zip(&stats[0]).take(8).enumerate() {
        let (mine, theirs) = (mine.best, theirs.best);
        assert!(!theirs.is_better_than(&mine), "generation {g}: island 1 {mine:?}, island 0 {theirs:?}");
    }
}

#[test]
fn immigrants_are_refused_when_no_generation_waits_for_them() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let mut p = Pipeline::new(&problem, config(1), NonZeroUsize::MIN).unwrap();
    p.migrate_every(2);
    assert_eq!(p.awaiting_migration(), None);
    let err = p.immigrate(0, Vec::new()).unwrap_err();
    assert!(matches!(err, EvolutionError::NotAwaitingMigration { generation: 0 }), "{err}");
    // Generation 0 complete: generation 1 waits only once it is complete too.
    for b in p.take_born() {
        p.set_fitness(b.generation, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    p.advance();
    assert_eq!(p.awaiting_migration(), None);
    for b in p.take_born() {
        p.set_fitness(b.generation, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    // Complete, but not reported (its statistics include its immigrants) and not bred from.
    assert!(p.advance().is_empty() && p.awaiting_migration() == Some(1));
    assert!(p.take_born().is_empty(), "bred from a generation waiting for immigrants");
    let emigrants = p.emigrants(1, 2).unwrap();
    assert_eq!(emigrants.len(), 2);
    assert!(!emigrants[1].1.is_better_than(&emigrants[0].1));
    p.immigrate(1, emigrants).unwrap();
    assert_eq!(p.advance().len(), 1, "generation 1 retires once its immigrants are in");
    assert!(!p.take_born().is_empty());
}

#[test]
fn a_run_of_trees_never_breeds_a_program_over_the_size_limit_and_every_one_is_a_tree() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let cfg = EvolutionConfig {
        population: 60,
        generations: 5,
        seed: 11,
        max_size: 15,
        representation: gpfarm_gp::Representation::Tree,
        ..EvolutionConfig::default()
    };
    let mut evo = Evolution::new(&problem, cfg).unwrap();
    let mut sizes = Vec::new();
    loop {
        for i in evo.population() {
            let d = i.mapping.derivation().expect("a tree always maps");
            // A tree's codons are its choices: read once each, no wrap.
            assert_eq!((d.used_codons, d.wraps), (i.genome.len(), 0));
            let size = gpfarm_gp::Program::parse_for(problem.spec(), &d.phenotype).unwrap().size();
            assert!(size <= 15, "{} has {size} nodes", d.phenotype);
            sizes.push(size);
        }
        let dedup = evo.dedup();
        let unique: Vec<Fitness> =
            dedup.unique.iter().map(|p| evaluate_phenotype(&problem, p).fitness).collect();
        evo.set_fitness(dedup.expand(&unique, problem.direction()).unwrap()).unwrap();
        if evo.generation() == 5 {
            break;
        }
        evo.breed().unwrap();
    }
    // Not all of one size: the limit bounds the search, it does not fix it.
    assert!(sizes.iter().any(|&s| s >= 5) && sizes.iter().any(|&s| s <= 3), "{sizes:?}");
}
