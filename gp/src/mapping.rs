//! Grammatical-evolution mapping from a genome (codons) to a phenotype (program text).
//! Must never look at what the phenotype means, and never fail by panicking: any genome
//! maps either to a phenotype or to a stated reason why not.
//!
//! Rules: the leftmost nonterminal is expanded first; a rule with n > 1 alternatives
//! reads the next codon and takes alternative `codon % n`; a rule with one alternative
//! reads no codon (as PonyGE2). When the codons run out, reading starts again from the
//! first (a wrap), at most `max_wraps` times.

use serde::{Deserialize, Serialize};

use crate::grammar::{Grammar, Symbol};

/// The name of the parameter array a phenotype's free parameters index (`p[k]`).
pub const PARAM_ARRAY: &str = "p";

/// A genotype: the codons that choose alternatives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Genome(pub Vec<u32>);

impl Genome {
    /// The codons.
    pub fn codons(&self) -> &[u32] {
        &self.0
    }

    /// Number of codons.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no codons.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A phenotype: the program text derived from a genome.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Phenotype(String);

impl Phenotype {
    /// Wraps program text (hand-written programs, or text read back from a file).
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The program text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Phenotype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Bounds that keep mapping finite and phenotypes small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MappingLimits {
    /// How many times reading may restart at the first codon.
    pub max_wraps: u32,
    /// Most nonterminal expansions in one derivation.
    pub max_expansions: usize,
    /// Deepest derivation tree (the start rule is at depth 1), as PonyGE2's
    /// `MAX_TREE_DEPTH`; it also bounds how deeply a phenotype's C can nest.
    pub max_depth: usize,
    /// Longest phenotype, in bytes.
    pub max_phenotype_len: usize,
    /// Longest genome that is mapped at all; crossover can grow genomes without bound.
    pub max_genome_len: usize,
}

impl Default for MappingLimits {
    fn default() -> Self {
        Self {
            max_wraps: 2,
            max_expansions: 10_000,
            max_depth: 90,
            max_phenotype_len: 64 * 1024,
            max_genome_len: 10_000,
        }
    }
}

/// A successful derivation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Derivation {
    /// The program text.
    pub phenotype: Phenotype,
    /// Codons read, counting re-reads after wrapping (so it may exceed the genome length).
    pub used_codons: usize,
    /// Times reading restarted at the first codon.
    pub wraps: u32,
    /// Depth of the derivation tree (the start rule is at depth 1).
    pub max_depth: usize,
    /// Nonterminal nodes in the derivation tree (expansions performed).
    pub nodes: usize,
    /// Free parameters emitted (`p[0]` .. `p[params - 1]`).
    #[serde(default)]
    pub params: usize,
}

/// Why a genome has no phenotype.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum InvalidReason {
    /// Nonterminals were left after reading every codon `max_wraps + 1` times.
    #[error("ran out of codons: {codons} codon(s) read {passes} time(s) left nonterminals unexpanded")]
    OutOfCodons { codons: usize, passes: u32 },
    /// The derivation expanded too many nonterminals.
    #[error("more than {limit} expansions")]
    TooManyExpansions { limit: usize },
    /// The derivation tree grew deeper than allowed.
    #[error("derivation deeper than {limit} levels")]
    TooDeep { limit: usize },
    /// The phenotype grew past its limit.
    #[error("phenotype longer than {limit} bytes")]
    PhenotypeTooLong { limit: usize },
    /// The genome is longer than the mapper accepts.
    #[error("genome of {len} codons is longer than the limit of {limit}")]
    GenomeTooLong { len: usize, limit: usize },
}

/// The result of mapping one genome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mapping {
    /// A phenotype was derived.
    Valid(Derivation),
    /// No phenotype; the individual gets the worst fitness.
    Invalid(InvalidReason),
}

impl Mapping {
    /// The phenotype, if the mapping succeeded.
    pub fn phenotype(&self) -> Option<&Phenotype> {
        match self {
            Mapping::Valid(d) => Some(&d.phenotype),
            Mapping::Invalid(_) => None,
        }
    }

    /// The derivation, if the mapping succeeded.
    pub fn derivation(&self) -> Option<&Derivation> {
        match self {
            Mapping::Valid(d) => Some(d),
            Mapping::Invalid(_) => None,
        }
    }

    /// True if a phenotype was derived.
    pub fn is_valid(&self) -> bool {
        matches!(self, Mapping::Valid(_))
    }
}

/// Maps `genome` through `grammar` from its start rule.
pub fn map(grammar: &Grammar, genome: &Genome, limits: &MappingLimits) -> Mapping {
    let codons = genome.codons();
    if codons.len() > limits.max_genome_len {
        return Mapping::Invalid(InvalidReason::GenomeTooLong {
            len: codons.len(),
            limit: limits.max_genome_len,
        });
    }
    let budget = codons.len().saturating_mul(limits.max_wraps as usize + 1);
    let start = Symbol::Nonterminal(grammar.start());
    // A stack popped from the top expands the leftmost nonterminal first, and emits
    // terminals exactly when everything to their left has been derived.
    let mut stack: Vec<(&Symbol, usize)> = vec![(&start, 1)];
    let mut text = String::new();
    let mut used = 0usize;
    let mut nodes = 0usize;
    let mut max_depth = 0usize;
    let mut params = 0usize;
    while let Some((symbol, depth)) = stack.pop() {
        match symbol {
            Symbol::Terminal(_) | Symbol::Param => {
                if let Symbol::Terminal(t) = symbol {
                    text.push_str(t);
                } else {
                    text.push_str(&format!("{PARAM_ARRAY}[{params}]"));
                    params += 1;
                }
                if text.len() > limits.max_phenotype_len {
                    return Mapping::Invalid(InvalidReason::PhenotypeTooLong {
                        limit: limits.max_phenotype_len,
                    });
                }
            }
            Symbol::Nonterminal(id) => {
                nodes += 1;
                if nodes > limits.max_expansions {
                    return Mapping::Invalid(InvalidReason::TooManyExpansions {
                        limit: limits.max_expansions,
                    });
                }
                if depth > limits.max_depth {
                    return Mapping::Invalid(InvalidReason::TooDeep { limit: limits.max_depth });
                }
                max_depth = max_depth.max(depth);
                let alternatives = grammar.rule(*id).alternatives();
                let choice = if alternatives.len() == 1 {
                    0
                } else {
                    if used >= budget {
                        return Mapping::Invalid(InvalidReason::OutOfCodons {
                            codons: codons.len(),
                            passes: limits.max_wraps + 1,
                        });
                    }
                    let codon = codons[used % codons.len()];
                    used += 1;
                    codon as usize % alternatives.len()
                };
                for s in alternatives[choice].symbols().iter().rev() {
                    stack.push((s, depth + 1));
                }
            }
        }
    }
    let wraps = if used == 0 { 0 } else { ((used - 1) / codons.len()) as u32 };
    Mapping::Valid(Derivation {
        phenotype: Phenotype(text),
        used_codons: used,
        wraps,
        max_depth,
        nodes,
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grammar() -> Grammar {
        Grammar::parse("<e> ::= <e> + <e> | <v>\n<v> ::= x | y\n<one> ::= <v>").unwrap()
    }

    #[test]
    fn codon_modulo_alternatives_picks_the_production() {
        let g = grammar();
        let m = map(&g, &Genome(vec![2, 5]), &MappingLimits::default());
        // Reads: 2 -> `<e> + <e>`, 5 -> <v>, (wrap) 2 -> x, 5 -> <v>, (wrap) 2 -> x.
        let d = m.derivation().unwrap();
        assert_eq!(d.phenotype.as_str(), "x + x");
        assert_eq!(d.used_codons, 5);
        assert_eq!(d.wraps, 2);
    }

    #[test]
    fn each_param_emitted_is_the_next_slot_of_the_array() {
        let g = Grammar::parse("<e> ::= <e> + <e> | x * #param# | #param#").unwrap();
        // 0 -> `<e> + <e>`, 1 -> `x * #param#`, 0 -> `<e> + <e>`, 2, 1.
        let m = map(&g, &Genome(vec![0, 1, 0, 2, 1]), &MappingLimits::default());
        let d = m.derivation().unwrap();
        assert_eq!(d.phenotype.as_str(), "x * p[0] + p[1] + x * p[2]");
        assert_eq!(d.params, 3);
        assert_eq!(
            map(&grammar(), &Genome(vec![2, 5]), &MappingLimits::default()).derivation().unwrap().params,
            0
        );
    }

    #[test]
    fn single_alternative_rules_read_no_codon() {
        let g =
            Grammar::parse_with_start("<e> ::= <e> + <e> | <v>\n<v> ::= x | y\n<one> ::= <v>", Some("one"))
                .unwrap();
        let d = map(&g, &Genome(vec![1]), &MappingLimits::default());
        let d = d.derivation().unwrap();
        assert_eq!(d.phenotype.as_str(), "y");
        assert_eq!(d.used_codons, 1);
        assert_eq!(d.max_depth, 2);
        assert_eq!(d.nodes, 2);
    }

    #[test]
    fn empty_genome_is_invalid_when_a_choice_is_needed() {
        let g = grammar();
        assert!(!map(&g, &Genome(vec![]), &MappingLimits::default()).is_valid());
    }

    #[test]
    fn expansion_limit_stops_runaway_derivations() {
        let g = grammar();
        let limits = MappingLimits { max_wraps: 1_000_000, max_expansions: 50, ..MappingLimits::default() };
        assert_eq!(
            map(&g, &Genome(vec![0]), &limits),
            Mapping::Invalid(InvalidReason::TooManyExpansions { limit: 50 })
        );
    }

    #[test]
    fn depth_limit_stops_deep_derivations() {
        let g = grammar();
        let limits = MappingLimits { max_depth: 3, ..MappingLimits::default() };
        // 0 recurses (depth 2), 0 again (depth 3), then 0 asks for depth 4.
        assert_eq!(
            map(&g, &Genome(vec![0, 0, 0, 1, 1]), &limits),
            Mapping::Invalid(InvalidReason::TooDeep { limit: 3 })
        );
        // `<e> + <e>` over two <v>: depth 3 fits.
        assert!(map(&g, &Genome(vec![0, 1, 0, 1, 1]), &limits).is_valid());
    }

    #[test]
    fn phenotype_length_limit_is_enforced() {
        let g = grammar();
        let limits = MappingLimits { max_phenotype_len: 4, ..MappingLimits::default() };
        assert_eq!(
            map(&g, &Genome(vec![0, 1, 0, 1, 0]), &limits),
            Mapping::Invalid(InvalidReason::PhenotypeTooLong { limit: 4 })
        );
    }

    #[test]
    fn overlong_genome_is_rejected_before_mapping() {
        let limits = MappingLimits { max_genome_len: 3, ..MappingLimits::default() };
        assert!(matches!(
            map(&grammar(), &Genome(vec![1; 4]), &limits),
            Mapping::Invalid(InvalidReason::GenomeTooLong { len: 4, limit: 3 })
        ));
    }
}
