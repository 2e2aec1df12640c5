//! The evolutionary loop: reproducible from its seed, improving on a real problem, and
//! usable by a caller that evaluates fitness itself.

use std::num::NonZeroUsize;

use gpfarm_gp::{
    Direction, Evolution, EvolutionConfig, EvolutionError, Fitness, InitMethod, Problem, evaluate_phenotype,
    run_cpu, run_cpu_with,
};

fn config(seed: u64) -> EvolutionConfig {
    EvolutionConfig { population: 60, generations: 5, seed, max_size: 0, ..EvolutionConfig::default() }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let p = Problem::builtin("search").unwrap();
    let a = run_cpu(&p, &config(11)).unwrap();
    // A different thread count must not change anything either.
    let b = run_cpu_with(&p, &config(11), NonZeroUsize::MIN, |_| {}).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.generations.len(), 6);
}

#[test]
fn different_seeds_give_different_runs() {
    let p = Problem::builtin("keijzer6").unwrap();
    let a = run_cpu(&p, &config(1)).unwrap();
    let b = run_cpu(&p, &config(2)).unwrap();
    assert_ne!(a.generations, b.generations);
}

#[test]
fn a_keijzer6_run_improves_on_its_first_generation() {
    let p = Problem::builtin("keijzer6").unwrap();
    let cfg = EvolutionConfig {
        population: 200,
        generations: 20,
        seed: 2024,
        max_size: 0,
        ..EvolutionConfig::default()
    };
    let report = run_cpu(&p, &cfg).unwrap();
    let first = report.generations[0].best;
    let last = report.generations[20].best;
    assert!(last.is_better_than(&first), "generation 0 best {first}, generation 20 best {last}");
    // With elitism the best never gets worse.
    for w in report.generations.windows(2) {
        assert!(!w[0].best.is_better_than(&w[1].best));
    }
    let (phenotype, fitness) = report.best.unwrap();
    assert_eq!(evaluate_phenotype(&p, &phenotype).fitness, fitness);
}

#[test]
fn sensible_initialisation_runs_and_is_reproducible() {
    let p = Problem::builtin("multiplier5").unwrap();
    let cfg = EvolutionConfig { init: InitMethod::Sensible, init_max_depth: 6, ..config(5) };
    let a = run_cpu(&p, &cfg).unwrap();
    assert_eq!(a, run_cpu(&p, &cfg).unwrap());
    // Sensible genomes always map: nothing is invalid at generation 0.
    assert_eq!(a.generations[0].invalid, 0);
}

#[test]
fn an_outer_loop_can_evaluate_unique_phenotypes_itself() {
    let p = Problem::builtin("search").unwrap();
    let mut evo = Evolution::new(&p, config(3)).unwrap();
    assert!(matches!(evo.stats(), Err(EvolutionError::NoFitness)));
    assert!(matches!(evo.breed(), Err(EvolutionError::NoFitness)));
    for _ in 0..3 {
        let dedup = evo.dedup();
        assert_eq!(dedup.index.len(), evo.population().len());
        let unique: Vec<Fitness> = dedup.unique.iter().map(|ph| evaluate_phenotype(&p, ph).fitness).collect();
        let fitness = dedup.expand(&unique, p.direction()).unwrap();
        evo.set_fitness(fitness).unwrap();
        let stats = evo.stats().unwrap();
        assert_eq!(stats.unique_phenotypes, dedup.unique.len());
        let invalid_mappings = evo.population().iter().filter(|i| !i.mapping.is_valid()).count();
        assert!(stats.invalid >= invalid_mappings);
        evo.breed().unwrap();
    }
    assert_eq!(evo.generation(), 3);
    assert_eq!(evo.population().len(), 60);
}

#[test]
fn set_fitness_rejects_wrong_counts_and_directions() {
    let p = Problem::builtin("keijzer6").unwrap();
    let mut evo = Evolution::new(&p, config(4)).unwrap();
    assert!(matches!(
        evo.set_fitness(vec![Fitness::new(1.0, Direction::Lower); 3]),
        Err(EvolutionError::FitnessCount { expected: 60, found: 3 })
    ));
    assert!(matches!(
        evo.set_fitness(vec![Fitness::new(1.0, Direction::Higher); 60]),
        Err(EvolutionError::FitnessDirection { .. })
    ));
}

#[test]
fn a_generation_takes_its_fitness_once_and_the_last_one_breeds_no_further() {
    let p = Problem::builtin("keijzer6").unwrap();
    let mut evo = Evolution::new(&p, EvolutionConfig { generations: 1, ..config(8) }).unwrap();
    let evaluate = |evo: &Evolution| {
        let dedup = evo.dedup();
        let unique: Vec<Fitness> = dedup.unique.iter().map(|ph| evaluate_phenotype(&p, ph).fitness).collect();
        dedup.expand(&unique, p.direction()).unwrap()
    };
    let fitness = evaluate(&evo);
    evo.set_fitness(fitness.clone()).unwrap();
    assert!(matches!(evo.set_fitness(fitness), Err(EvolutionError::FitnessAlreadySet { generation: 0 })));
    evo.breed().unwrap();
    let fitness = evaluate(&evo);
    evo.set_fitness(fitness).unwrap();
    assert_eq!(evo.stats().unwrap().generation, 1);
    assert!(matches!(evo.breed(), Err(EvolutionError::LastGeneration { generation: 1 })));
    assert_eq!(evo.generation(), 1);
}

#[test]
fn elites_keep_the_fitness_of_the_generation_they_come_from() {
    let p = Problem::builtin("keijzer6").unwrap();
    let mut evo = Evolution::new(&p, EvolutionConfig { elite: 1, ..config(9) }).unwrap();
    let dedup = evo.dedup();
    let unique: Vec<Fitness> = dedup.unique.iter().map(|ph| evaluate_phenotype(&p, ph).fitness).collect();
    evo.set_fitness(dedup.expand(&unique, p.direction()).unwrap()).unwrap();
    let (_, best) = evo.best().unwrap();
    evo.breed().unwrap();
    // Whatever is passed for it, the elite in slot 0 keeps the best fitness of generation 0.
    evo.set_fitness(vec![Fitness::new(1e9, Direction::Lower); 60]).unwrap();
    assert_eq!(evo.fitness().unwrap()[0], best);
    assert_eq!(evo.best().unwrap().1, best);
}

#[test]
fn invalid_mappings_get_the_worst_fitness_whatever_is_passed() {
    let p = Problem::builtin("keijzer6").unwrap();
    // Genomes of one codon with no wrapping fail on any two-level derivation.
    let cfg = EvolutionConfig {
        init_min_len: 1,
        init_max_len: 1,
        limits: gpfarm_gp::MappingLimits { max_wraps: 0, ..Default::default() },
        representation: gpfarm_gp::Representation::Ge,
        ..config(6)
    };
    let mut evo = Evolution::new(&p, cfg).unwrap();
    let invalid = evo.population().iter().position(|i| !i.mapping.is_valid()).expect("some invalid");
    evo.set_fitness(vec![Fitness::new(0.0, Direction::Lower); 60]).unwrap();
    assert_eq!(evo.fitness().unwrap()[invalid], Fitness::worst(Direction::Lower));
}

#[test]
fn bad_configurations_are_refused_with_the_field_named() {
    let p = Problem::builtin("keijzer6").unwrap();
    for (cfg, field) in [
        (EvolutionConfig { population: 0, ..config(0) }, "population"),
        (EvolutionConfig { crossover_rate: 1.5, ..config(0) }, "crossover_rate"),
        (EvolutionConfig { codon_size: 5, ..config(0) }, "codon_size"),
        (EvolutionConfig { elite: 61, ..config(0) }, "elite"),
    ] {
        match Evolution::new(&p, cfg) {
            Err(EvolutionError::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected a config error, got {:?}", other.map(|_| ())),
        }
    }
}
