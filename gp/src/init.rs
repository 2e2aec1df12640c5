//! Initial genomes: uniformly random codon strings, or PonyGE2-style "sensible"
//! ramped half-and-half initialisation that builds derivation trees of bounded depth and
//! encodes their choices as codons. Must never draw randomness from anything but the
//! generator it is given, so a seed fixes the population.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::grammar::{Grammar, RuleId, Symbol};
use crate::mapping::Genome;

/// How the first generation is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitMethod {
    /// Random codons; length uniform in the configured range.
    Random,
    /// Ramped half-and-half over derivation-tree depths (PonyGE2's sensible
    /// initialisation), plus a random tail half as long as the chosen codons.
    Sensible,
}

/// A genome of uniformly random length in `min_len..=max_len`, codons in `0..codon_size`.
pub fn random_genome(rng: &mut impl Rng, min_len: usize, max_len: usize, codon_size: u32) -> Genome {
    let (lo, hi) = (min_len.min(max_len), min_len.max(max_len));
    let len = rng.random_range(lo..=hi);
    Genome((0..len).map(|_| rng.random_range(0..codon_size.max(1))).collect())
}

/// `size` genomes by ramped half-and-half: tree depths are ramped from the start rule's
/// minimum depth up to `max_depth`, and individuals alternate between "grow" (any
/// alternative that fits the remaining depth) and "full" (recursive alternatives while
/// they fit). A tree that reaches `max_nodes` nonterminals finishes every open branch
/// by its shallowest alternatives, so deep "full" trees stay finite. Returns `None` if
/// the start rule cannot terminate.
pub fn sensible_genomes(
    grammar: &Grammar,
    rng: &mut impl Rng,
    size: usize,
    max_depth: u32,
    codon_size: u32,
    max_nodes: usize,
) -> Option<Vec<Genome>> {
    let min = grammar.rule(grammar.start()).min_depth()?;
    let max = max_depth.max(min);
    let depths: Vec<u32> = (min..=max).collect();
    let mut out = Vec::with_capacity(size);
    for i in 0..size {
        let full = i % 2 == 1;
        let depth = depths[(i / 2) % depths.len()];
        let mut codons = Vec::new();
        let mut budget = max_nodes;
        let mut b = Builder { grammar, full, codon_size, codons: &mut codons, budget: &mut budget };
        b.build(rng, grammar.start(), depth);
        // The tail gives crossover and mutation material beyond the used codons.
        let tail = codons.len().div_ceil(2).max(1);
        for _ in 0..tail {
            codons.push(rng.random_range(0..codon_size.max(1)));
        }
        out.push(Genome(codons));
    }
    Some(out)
}

/// State of one tree being grown.
struct Builder<'a> {
    grammar: &'a Grammar,
    full: bool,
    codon_size: u32,
    codons: &'a mut Vec<u32>,
    budget: &'a mut usize,
}

impl Builder<'_> {
    /// Derives from `rule` within `depth` levels, appending the codons that reproduce
    /// each choice under `codon % alternatives`. Only called with `depth >=
    /// rule.min_depth()`, which guarantees some alternative fits.
    fn build(&mut self, rng: &mut impl Rng, rule: RuleId, depth: u32) {
        let alternatives = self.grammar.rule(rule).alternatives();
        let fits: Vec<usize> = (0..alternatives.len())
            .filter(|&a| alternatives[a].min_depth().is_some_and(|d| d <= depth))
            .collect();
        let pool: Vec<usize> = if *self.budget == 0 {
            // Out of nodes: only the shallowest alternatives, to close the tree fast.
            let shallowest = fits.iter().filter_map(|&a| alternatives[a].min_depth()).min();
            fits.iter().copied().filter(|&a| alternatives[a].min_depth() == shallowest).collect()
        } else {
            *self.budget -= 1;
            let recursive: Vec<usize> =
                fits.iter().copied().filter(|&a| alternatives[a].is_recursive()).collect();
            if self.full && !recursive.is_empty() { recursive } else { fits }
        };
        if pool.is_empty() {
            return;
        }
        let choice = pool[rng.random_range(0..pool.len())];
        if alternatives.len() > 1 {
            let n = alternatives.len() as u32;
            let c = choice as u32;
            // Any codon congruent to the choice selects it; pick one at random below the
            // codon size so that these codons look like the rest of the genome.
            let k_max = self.codon_size.saturating_sub(1).saturating_sub(c) / n;
            self.codons.push(c + n * rng.random_range(0..=k_max));
        }
        for s in alternatives[choice].symbols() {
            if let Symbol::Nonterminal(child) = s {
                self.build(rng, *child, depth - 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{MappingLimits, map};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn random_genomes_respect_length_and_codon_bounds() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..200 {
            let g = random_genome(&mut rng, 3, 7, 10);
            assert!((3..=7).contains(&g.len()));
            assert!(g.codons().iter().all(|&c| c < 10));
        }
    }

    #[test]
    fn sensible_genomes_map_to_trees_no_deeper_than_requested() {
        let g = Grammar::parse("<e> ::= <e> + <e> | (<e>) | <v>\n<v> ::= x | y").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let genomes = sensible_genomes(&g, &mut rng, 40, 5, 1000, 10_000).unwrap();
        assert_eq!(genomes.len(), 40);
        let mut deepest = 0;
        for genome in &genomes {
            let d = map(&g, genome, &MappingLimits::default());
            let d = d.derivation().expect("sensible genomes always map");
            assert!(d.max_depth <= 5, "depth {} > 5", d.max_depth);
            assert!(d.used_codons <= genome.len());
            deepest = deepest.max(d.max_depth);
        }
        // "Full" individuals at the top of the ramp reach the maximum depth.
        assert_eq!(deepest, 5);
    }

    #[test]
    fn full_trees_of_great_depth_stay_within_the_node_budget() {
        let g = Grammar::parse("<e> ::= <e> + <e> | <v>\n<v> ::= x | y").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        // A full binary tree of depth 60 would have 2^59 leaves.
        let genomes = sensible_genomes(&g, &mut rng, 2, 60, 1000, 500).unwrap();
        for genome in &genomes {
            let d = map(&g, genome, &MappingLimits::default());
            let d = d.derivation().expect("budgeted trees still map");
            assert!(d.nodes <= 2 * 500 + 60, "{} nodes", d.nodes);
        }
    }

    #[test]
    fn sensible_init_refuses_a_grammar_that_cannot_terminate() {
        let g = Grammar::parse("<e> ::= <e> + <e>").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        assert!(sensible_genomes(&g, &mut rng, 4, 5, 100, 10_000).is_none());
    }
}
