//! Variation and selection operators on genomes: variable one-point crossover, int-flip
//! mutation, tournament selection and elitism. Must never map or evaluate individuals:
//! callers pass in what the operators need (used-codon counts, fitness values).

use rand::Rng;
use rand::seq::index;

use crate::fitness::Fitness;
use crate::mapping::Genome;

/// The part of a genome crossover and mutation act on: the used codons of a valid
/// individual (capped at its length, since wrapping re-reads codons), or the whole
/// genome of an invalid one.
pub fn effective_len(genome: &Genome, used_codons: Option<usize>) -> usize {
    match used_codons {
        Some(u) => u.min(genome.len()),
        None => genome.len(),
    }
}

/// PonyGE2's variable one-point crossover: an independent point in each parent, each in
/// `1..=effective length`, then the heads are swapped over the tails. Parents without
/// codons contribute nothing.
pub fn variable_onepoint(
    rng: &mut impl Rng,
    a: &Genome,
    a_used: Option<usize>,
    b: &Genome,
    b_used: Option<usize>,
) -> (Genome, Genome) {
    let pa = point(rng, effective_len(a, a_used));
    let pb = point(rng, effective_len(b, b_used));
    let (ca, cb) = (a.codons(), b.codons());
    let mut child_a = Vec::with_capacity(pa + cb.len() - pb);
    child_a.extend_from_slice(&ca[..pa]);
    child_a.extend_from_slice(&cb[pb..]);
    let mut child_b = Vec::with_capacity(pb + ca.len() - pa);
    child_b.extend_from_slice(&cb[..pb]);
    child_b.extend_from_slice(&ca[pa..]);
    (Genome(child_a), Genome(child_b))
}

fn point(rng: &mut impl Rng, max: usize) -> usize {
    if max == 0 { 0 } else { rng.random_range(1..=max) }
}

/// Int-flip mutation: each codon of the effective length is replaced by a fresh random
/// codon in `0..codon_size` with probability `per_codon` (default `1 / effective
/// length`); if none was chosen, one random codon is, so a mutation always happens.
pub fn int_flip(
    rng: &mut impl Rng,
    genome: &mut Genome,
    used_codons: Option<usize>,
    per_codon: Option<f64>,
    codon_size: u32,
) {
    let len = effective_len(genome, used_codons);
    if len == 0 {
        return;
    }
    let p = per_codon.unwrap_or(1.0 / len as f64).clamp(0.0, 1.0);
    let mut flipped = false;
    for codon in &mut genome.0[..len] {
        if rng.random_bool(p) {
            *codon = rng.random_range(0..codon_size.max(1));
            flipped = true;
        }
    }
    if !flipped {
        let i = rng.random_range(0..len);
        genome.0[i] = rng.random_range(0..codon_size.max(1));
    }
}

/// Tournament selection: `size` distinct contestants drawn uniformly (all of them if the
/// population is smaller); the best wins, ties going to the earlier draw. Returns the
/// winner's index, or `None` for an empty population.
pub fn tournament(rng: &mut impl Rng, fitness: &[Fitness], size: usize) -> Option<usize> {
    winner(&contestants(rng, fitness.len(), size), |i| fitness[i])
}

/// The contestants of a tournament among `n` individuals: `size` distinct indices drawn
/// uniformly (all of them if `n` is smaller), in draw order. Drawing them needs no fitness, so
/// a tournament can be planned before its contestants are evaluated.
pub fn contestants(rng: &mut impl Rng, n: usize, size: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    index::sample(rng, n, size.clamp(1, n)).into_vec()
}

/// The winner among `contestants`: the best fitness, ties going to the earlier draw.
pub fn winner(contestants: &[usize], fitness: impl Fn(usize) -> Fitness) -> Option<usize> {
    let mut best: Option<(usize, Fitness)> = None;
    for &i in contestants {
        let f = fitness(i);
        best = match best {
            Some((b, bf)) if !f.is_better_than(&bf) => Some((b, bf)),
            _ => Some((i, f)),
        };
    }
    best.map(|(i, _)| i)
}

/// Indices of the `count` best individuals, best first; ties keep population order so
/// that a seed fixes the choice.
pub fn elites(fitness: &[Fitness], count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..fitness.len()).collect();
    order.sort_by(|&a, &b| fitness[b].cmp_quality(&fitness[a]).then(a.cmp(&b)));
    order.truncate(count);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fitness::Direction;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn fit(values: &[f64], d: Direction) -> Vec<Fitness> {
        values.iter().map(|&v| Fitness::new(v, d)).collect()
    }

    #[test]
    fn crossover_swaps_tails_and_conserves_codons() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let a = Genome(vec![1, 2, 3, 4]);
        let b = Genome(vec![10, 20, 30]);
        for _ in 0..100 {
            let (x, y) = variable_onepoint(&mut rng, &a, Some(4), &b, Some(3));
            assert_eq!(x.len() + y.len(), 7);
            // Each child starts with a non-empty head of its own parent.
            assert_eq!(x.codons()[0], 1);
            assert_eq!(y.codons()[0], 10);
        }
    }

    #[test]
    fn crossover_points_stay_within_used_codons() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let a = Genome(vec![1; 10]);
        let b = Genome(vec![2; 10]);
        for _ in 0..100 {
            let (x, _) = variable_onepoint(&mut rng, &a, Some(2), &b, Some(10));
            let head = x.codons().iter().take_while(|&&c| c == 1).count();
            // The head of `a` is at most its 2 used codons; the rest comes from `b`.
            assert!((1..=2).contains(&head));
            assert!(x.codons()[head..].iter().all(|&c| c == 2));
        }
    }

    #[test]
    fn mutation_always_changes_something_within_used_codons_only() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut changed_any = 0;
        for _ in 0..100 {
            let mut g = Genome(vec![7; 10]);
            int_flip(&mut rng, &mut g, Some(3), None, 5);
            // Codon size 5 cannot produce 7, so every flipped codon is visible.
            assert!(g.codons()[3..].iter().all(|&c| c == 7));
            let flipped = g.codons()[..3].iter().filter(|&&c| c != 7).count();
            assert!(flipped >= 1);
            changed_any += flipped;
        }
        assert!(changed_any >= 100);
    }

    #[test]
    fn tournament_of_whole_population_picks_the_best() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let f = fit(&[3.0, 1.0, 2.0], Direction::Lower);
        assert_eq!(tournament(&mut rng, &f, 3), Some(1));
        let f = fit(&[3.0, 1.0, 2.0], Direction::Higher);
        assert_eq!(tournament(&mut rng, &f, 10), Some(0));
        assert_eq!(tournament(&mut rng, &[], 3), None);
    }

    #[test]
    fn elites_are_the_best_in_order_with_ties_by_index() {
        let f = fit(&[5.0, 1.0, 3.0, 1.0], Direction::Lower);
        assert_eq!(elites(&f, 3), [1, 3, 2]);
        let f = fit(&[5.0, 1.0, 3.0, 5.0], Direction::Higher);
        assert_eq!(elites(&f, 2), [0, 3]);
    }
}
