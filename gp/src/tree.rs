//! Derivation trees under the grammar (grammar-guided GP, "CFG-GP"): the representation in which
//! individuals are trees of the problem's grammar and variation swaps, regrows, hoists or
//! re-labels whole subtrees, so that a small change of the genotype is a small change of the
//! program.
//!
//! A tree is held as its **choice sequence**: the alternative taken at each node whose rule has
//! more than one, in the order the leftmost derivation expands them (pre-order), one codon per
//! choice, each below its rule's number of alternatives. That is a [`Genome`] which
//! [`crate::mapping::map`] maps to the tree's program text without a wrap and without a codon
//! left over, so records, warm starts, the fitness memo and every route take trees unchanged. The
//! codons of a subtree are one contiguous run of the sequence, which makes every operator a
//! splice: replacing the run of a node of rule R by the run of another tree's node of rule R
//! gives a tree of the grammar again.
//!
//! Every operator here respects the depth limit it is given and asks `fits` (the caller's
//! measure of size, on the child's text) before it returns a child; a child that does not fit is
//! drawn again a few times, then the parent is returned unchanged: **no child is ever larger
//! than the limits**. Must never draw randomness from anything but the generator it is given.

use rand::Rng;

use crate::grammar::{Grammar, RuleId, Symbol};
use crate::mapping::{Genome, MappingLimits, Phenotype, map};

/// One node of a derivation tree: a nonterminal's expansion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// The rule it expands.
    pub rule: RuleId,
    /// The alternative it takes.
    pub alternative: usize,
    /// The first codon of its subtree in the choice sequence (its own, if its rule has a choice).
    pub start: usize,
    /// One past the last codon of its subtree.
    pub end: usize,
    /// Its depth (the root at 1, as the mapping counts).
    pub depth: usize,
    /// Levels of its subtree (1: no nonterminal below it).
    pub height: usize,
    /// Free parameters the derivation emits before this subtree.
    pub params_before: usize,
    /// Free parameters its subtree emits.
    pub params: usize,
    /// Whether its alternative can derive its own rule again (an inner node of the expression,
    /// where a leaf is not).
    pub recursive: bool,
}

/// A derivation tree: its choice sequence and its nodes in pre-order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The choice sequence (see the module documentation).
    pub choices: Vec<u32>,
    /// Every node, the root first, each before its children.
    pub nodes: Vec<Node>,
}

impl Tree {
    /// The tree `genome` derives under GE's rules ([`crate::mapping`]: `codon % alternatives`,
    /// wrapping), as a choice sequence of its own: the same program text, with no wrap and no
    /// unread codon. `None` where the genome does not map within `limits`.
    pub fn derive(grammar: &Grammar, genome: &Genome, limits: &MappingLimits) -> Option<Tree> {
        let codons = genome.codons();
        let budget = codons.len().saturating_mul(limits.max_wraps as usize + 1);
        let mut walk = Walk { grammar, codons, budget, used: 0, params: 0, limits, tree: Tree::empty() };
        walk.node(grammar.start(), 1)?;
        Some(walk.tree)
    }

    fn empty() -> Tree {
        Tree { choices: Vec::new(), nodes: Vec::new() }
    }

    /// Its choice sequence as a genome.
    pub fn genome(&self) -> Genome {
        Genome(self.choices.clone())
    }

    /// Levels of the whole tree.
    pub fn height(&self) -> usize {
        self.nodes.first().map_or(0, |n| n.height)
    }

    /// This tree with node `at`'s subtree replaced by `donor`'s node `from` subtree (of the same
    /// rule), and the parameters to go with it: `params` (this tree's) with the donor's values
    /// (`donor_params`) in place of the replaced subtree's.
    fn splice(
        &self,
        at: &Node,
        donor: &Tree,
        from: &Node,
        params: &[f32],
        donor_params: &[f32],
    ) -> (Genome, Vec<f32>) {
        let mut choices =
            Vec::with_capacity(self.choices.len() - (at.end - at.start) + (from.end - from.start));
        choices.extend_from_slice(&self.choices[..at.start]);
        choices.extend_from_slice(&donor.choices[from.start..from.end]);
        choices.extend_from_slice(&self.choices[at.end..]);
        let new = slice(donor_params, from.params_before, from.params);
        (Genome(choices), splice_params(params, at, new, from.params))
    }
}

/// `params[from..from + len]`, as far as `params` has them (values missing are drawn later).
fn slice(params: &[f32], from: usize, len: usize) -> &[f32] {
    let start = from.min(params.len());
    &params[start..(from + len).min(params.len())]
}

/// `params` with the values of `at`'s subtree replaced by `new`, which holds `count` values
/// where nothing is missing. Values are positional (`p[k]` in text order), so where `params`
/// or `new` is short (values never drawn), the values after the gap are left off and drawn when
/// the child is made.
fn splice_params(params: &[f32], at: &Node, new: &[f32], count: usize) -> Vec<f32> {
    let mut out = slice(params, 0, at.params_before).to_vec();
    if out.len() < at.params_before {
        return out;
    }
    out.extend_from_slice(new);
    let after = at.params_before + at.params;
    if new.len() == count && params.len() >= after {
        out.extend_from_slice(&params[after..]);
    }
    out
}

/// The state of [`Tree::derive`].
struct Walk<'a> {
    grammar: &'a Grammar,
    codons: &'a [u32],
    budget: usize,
    used: usize,
    params: usize,
    limits: &'a MappingLimits,
    tree: Tree,
}

impl Walk<'_> {
    /// Derives `rule` at `depth`; returns the height of its subtree.
    fn node(&mut self, rule: RuleId, depth: usize) -> Option<usize> {
        if depth > self.limits.max_depth || self.tree.nodes.len() >= self.limits.max_expansions {
            return None;
        }
        let alternatives = self.grammar.rule(rule).alternatives();
        let start = self.tree.choices.len();
        let alternative = if alternatives.len() == 1 {
            0
        } else {
            if self.used >= self.budget || self.codons.is_empty() {
                return None;
            }
            let a = self.codons[self.used % self.codons.len()] as usize % alternatives.len();
            self.used += 1;
            self.tree.choices.push(a as u32);
            a
        };
        let index = self.tree.nodes.len();
        let params_before = self.params;
        self.tree.nodes.push(Node {
            rule,
            alternative,
            start,
            end: start,
            depth,
            height: 1,
            params_before,
            params: 0,
            recursive: alternatives[alternative].is_recursive(),
        });
        let mut height = 1;
        for s in alternatives[alternative].symbols() {
            match s {
                Symbol::Nonterminal(child) => height = height.max(1 + self.node(*child, depth + 1)?),
                Symbol::Param => self.params += 1,
                Symbol::Terminal(_) => {}
            }
        }
        let node = &mut self.tree.nodes[index];
        node.end = self.tree.choices.len();
        node.height = height;
        node.params = self.params - params_before;
        Some(height)
    }
}

/// Grows a random subtree of `rule` at most `height` levels tall: "full" takes alternatives that
/// recurse while they fit, "grow" any that fits; after `budget` nodes every open branch is closed
/// by its shallowest alternatives. Returns its choice sequence and how many free parameters it
/// emits, or `None` where no derivation of `rule` fits in `height` levels.
pub fn grow(
    grammar: &Grammar,
    rng: &mut impl Rng,
    rule: RuleId,
    height: usize,
    full: bool,
    budget: usize,
) -> Option<(Vec<u32>, usize)> {
    let min = grammar.rule(rule).min_depth()? as usize;
    if min > height {
        return None;
    }
    let mut grown = (Vec::new(), 0);
    let mut left = budget;
    grow_into(grammar, rng, rule, height as u32, full, &mut left, &mut grown);
    Some(grown)
}

fn grow_into(
    grammar: &Grammar,
    rng: &mut impl Rng,
    rule: RuleId,
    height: u32,
    full: bool,
    left: &mut usize,
    out: &mut (Vec<u32>, usize),
) {
    let alternatives = grammar.rule(rule).alternatives();
    let fits: Vec<usize> = (0..alternatives.len())
        .filter(|&a| alternatives[a].min_depth().is_some_and(|d| d <= height))
        .collect();
    let pool: Vec<usize> = if *left == 0 {
        let shallowest = fits.iter().filter_map(|&a| alternatives[a].min_depth()).min();
        fits.iter().copied().filter(|&a| alternatives[a].min_depth() == shallowest).collect()
    } else {
        *left -= 1;
        let recursive: Vec<usize> =
            fits.iter().copied().filter(|&a| alternatives[a].is_recursive()).collect();
        if full && !recursive.is_empty() { recursive } else { fits }
    };
    let Some(&choice) = pool.get(rng.random_range(0..pool.len().max(1))) else { return };
    if alternatives.len() > 1 {
        out.0.push(choice as u32);
    }
    for s in alternatives[choice].symbols() {
        match s {
            Symbol::Nonterminal(child) => grow_into(grammar, rng, *child, height - 1, full, left, out),
            Symbol::Param => out.1 += 1,
            Symbol::Terminal(_) => {}
        }
    }
}

/// What the operators need besides the trees: the grammar, the deepest tree allowed, and the
/// caller's size test of a child's text (`true`: within the size limit).
pub struct Limits<'a> {
    /// The grammar trees derive under.
    pub grammar: &'a Grammar,
    /// Bounds on mapping; its `max_depth` is the deepest tree bred.
    pub mapping: &'a MappingLimits,
    /// Whether a child's program text is within the size limit.
    pub fits: &'a (dyn Fn(&Phenotype) -> bool + Sync),
}

/// Children drawn again before an operator gives up and returns its parent.
const TRIES: usize = 8;

impl Limits<'_> {
    /// Whether `genome` maps, within the mapping's limits, to a program that fits.
    fn accepts(&self, genome: &Genome) -> bool {
        map(self.grammar, genome, self.mapping).phenotype().is_some_and(|p| (self.fits)(p))
    }
}

/// A node of `nodes` drawn as Operon and Koza draw crossover points: an inner node (one whose
/// alternative recurses) with probability 0.9 where there are any, else any node; `None` for no
/// nodes.
fn pick<'n>(rng: &mut impl Rng, nodes: &[&'n Node]) -> Option<&'n Node> {
    let inner: Vec<&Node> = nodes.iter().copied().filter(|n| n.recursive).collect();
    let pool = if !inner.is_empty() && rng.random_bool(0.9) { inner } else { nodes.to_vec() };
    if pool.is_empty() { None } else { Some(pool[rng.random_range(0..pool.len())]) }
}

/// Subtree crossover: a node of `a` (an inner node with probability 0.9) is replaced by a node of `b` of the same rule
/// whose subtree keeps the child within the depth limit; the child's parameters are `a`'s with
/// the donor's values in the swapped subtree. Returns `a` (and its parameters) unchanged when no
/// child within the limits is found.
pub fn crossover(
    rng: &mut impl Rng,
    limits: &Limits<'_>,
    (a, a_params): (&Tree, &[f32]),
    (b, b_params): (&Tree, &[f32]),
) -> (Genome, Vec<f32>) {
    let shared: Vec<&Node> = a.nodes.iter().filter(|n| b.nodes.iter().any(|m| m.rule == n.rule)).collect();
    for _ in 0..TRIES {
        let Some(at) = pick(rng, &shared) else { break };
        let donors: Vec<&Node> = b
            .nodes
            .iter()
            .filter(|m| m.rule == at.rule && at.depth - 1 + m.height <= limits.mapping.max_depth)
            .collect();
        let Some(from) = pick(rng, &donors) else { continue };
        let (genome, params) = a.splice(at, b, from, a_params, b_params);
        if limits.accepts(&genome) {
            return (genome, params);
        }
    }
    (a.genome(), a_params.to_vec())
}

/// How [`mutate`] changed a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// A subtree was grown afresh in place of another of its rule.
    Regrow,
    /// A node took another alternative with the same nonterminals and parameters (an operator
    /// for another of its arity, a variable for another), its subtrees kept.
    Point,
    /// A subtree was replaced by one of its own subtrees of the same rule (shrinks the tree).
    Hoist,
    /// Nothing within the limits was found: the parent is returned.
    None,
}

/// Mutates `tree` by one of regrowth, point mutation and hoisting, drawn uniformly among those
/// that apply; a regrown subtree's parameters are drawn afresh (left missing here), the others
/// keep theirs. Returns the child, its parameters and what was done.
pub fn mutate(
    rng: &mut impl Rng,
    limits: &Limits<'_>,
    tree: &Tree,
    params: &[f32],
) -> (Genome, Vec<f32>, Mutation) {
    let g = limits.grammar;
    for _ in 0..TRIES {
        let kind = match rng.random_range(0..3) {
            0 => Mutation::Regrow,
            1 => Mutation::Point,
            _ => Mutation::Hoist,
        };
        let all: Vec<&Node> = tree.nodes.iter().collect();
        let child = match kind {
            Mutation::Regrow => {
                let at = all[rng.random_range(0..all.len())];
                let room = (limits.mapping.max_depth + 1).saturating_sub(at.depth);
                // Regrown subtrees stay about the size of the one they replace, give or take.
                let budget = rng.random_range(1..=(2 * (at.end - at.start) + 4));
                let full = rng.random_bool(0.5);
                let height = rng.random_range(1..=room.max(1));
                grow(g, rng, at.rule, height, full, budget).map(|(choices, count)| {
                    let mut out = tree.choices[..at.start].to_vec();
                    out.extend_from_slice(&choices);
                    out.extend_from_slice(&tree.choices[at.end..]);
                    let fresh: Vec<f32> = (0..count).map(|_| rng.random_range(-1.0..=1.0)).collect();
                    (Genome(out), splice_params(params, at, &fresh, count))
                })
            }
            Mutation::Point => {
                let able: Vec<&Node> = all.iter().copied().filter(|n| !same_shape(g, n).is_empty()).collect();
                (!able.is_empty()).then(|| {
                    let at = able[rng.random_range(0..able.len())];
                    let others = same_shape(g, at);
                    let mut out = tree.choices.clone();
                    out[at.start] = others[rng.random_range(0..others.len())] as u32;
                    (Genome(out), params.to_vec())
                })
            }
            Mutation::Hoist => {
                let able: Vec<(&Node, Vec<&Node>)> = all
                    .iter()
                    .map(|n| (*n, descendants(tree, n).filter(|d| d.rule == n.rule).collect::<Vec<_>>()))
                    .filter(|(_, d)| !d.is_empty())
                    .collect();
                (!able.is_empty()).then(|| {
                    let (at, below) = &able[rng.random_range(0..able.len())];
                    let from = below[rng.random_range(0..below.len())];
                    tree.splice(at, tree, from, params, params)
                })
            }
            Mutation::None => None,
        };
        if let Some((genome, params)) = child
            && limits.accepts(&genome)
        {
            return (genome, params, kind);
        }
    }
    (tree.genome(), params.to_vec(), Mutation::None)
}

/// The nodes strictly below `n`.
fn descendants<'t>(tree: &'t Tree, n: &Node) -> impl Iterator<Item = &'t Node> {
    let first = tree.nodes.iter().position(|m| std::ptr::eq(m, n)).map_or(tree.nodes.len(), |i| i + 1);
    let depth = n.depth;
    // In pre-order, a node's descendants are the nodes right after it that are deeper.
    tree.nodes[first..].iter().take_while(move |m| m.depth > depth)
}

/// The other alternatives of `n`'s rule with the same nonterminals, in order, and as many
/// parameters as its own: those a point mutation may switch it to (empty where its rule has one
/// alternative, since then it has no codon of its own).
fn same_shape(g: &Grammar, n: &Node) -> Vec<usize> {
    let alternatives = g.rule(n.rule).alternatives();
    if alternatives.len() < 2 {
        return Vec::new();
    }
    let shape = |a: usize| {
        let s = alternatives[a].symbols();
        (
            s.iter().filter_map(Symbol::nonterminal).collect::<Vec<_>>(),
            s.iter().filter(|x| **x == Symbol::Param).count(),
        )
    };
    let own = shape(n.alternative);
    (0..alternatives.len()).filter(|&a| a != n.alternative && shape(a) == own).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const G: &str = "<e> ::= <e> + <e> | <e> * <e> | sinf(<e>) | <v> | #param# * <v>\n<v> ::= x | y";

    fn grammar() -> Grammar {
        Grammar::parse(G).unwrap()
    }

    /// Nodes the program text writes: operators, variables and parameters.
    fn size(p: &Phenotype) -> usize {
        let s = p.as_str();
        s.matches(['+', '*', 'x', 'y']).count() + s.matches("sinf").count() + s.matches("p[").count()
    }

    fn tree(g: &Grammar, seed: u64, budget: usize) -> Tree {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (choices, _) = grow(g, &mut rng, g.start(), 8, seed.is_multiple_of(2), budget).unwrap();
        Tree::derive(g, &Genome(choices), &MappingLimits::default()).unwrap()
    }

    #[test]
    fn a_tree_maps_to_its_text_without_wrapping_and_every_subtree_is_one_run_of_codons() {
        let g = grammar();
        let t = tree(&g, 4, 12);
        let m = map(&g, &t.genome(), &MappingLimits::default());
        let d = m.derivation().unwrap();
        assert_eq!((d.used_codons, d.wraps), (t.choices.len(), 0));
        // The root covers every codon; each child lies inside its parent.
        assert_eq!((t.nodes[0].start, t.nodes[0].end), (0, t.choices.len()));
        for (i, n) in t.nodes.iter().enumerate() {
            let parent = t.nodes[..i].iter().rev().find(|p| p.depth + 1 == n.depth).unwrap_or(&t.nodes[0]);
            assert!(parent.start <= n.start && n.end <= parent.end);
        }
    }

    #[test]
    fn a_ge_genome_derives_the_tree_of_the_same_text() {
        let g = grammar();
        // Wraps: 0 -> `<e> + <e>`, 3 -> <v>, (wrap) 0 -> x, 3 -> <v>, (wrap) 0 -> x.
        let genome = Genome(vec![0, 8]);
        let t = Tree::derive(&g, &genome, &MappingLimits::default()).unwrap();
        let text = |x: &Genome| map(&g, x, &MappingLimits::default()).phenotype().unwrap().clone();
        assert_eq!(text(&t.genome()), text(&genome));
        assert_eq!(text(&t.genome()).as_str(), "x + x");
        assert!(t.choices.iter().zip(&t.nodes).all(|(&c, _)| c < 5));
    }

    #[test]
    fn crossover_swaps_subtrees_of_one_rule_and_carries_the_donors_values() {
        let g = grammar();
        let limits = MappingLimits::default();
        let a = Tree::derive(&g, &Genome(vec![0, 4, 0, 3, 1]), &limits).unwrap(); // p[0] * x + y
        let b = Tree::derive(&g, &Genome(vec![2, 4, 1]), &limits).unwrap(); // sinf(p[0] * y)
        let fits = |_: &Phenotype| true;
        let l = Limits { grammar: &g, mapping: &limits, fits: &fits };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let (child, params) = crossover(&mut rng, &l, (&a, &[5.0]), (&b, &[7.0]));
            let p = map(&g, &child, &limits).derivation().unwrap().clone();
            assert_eq!(params.len(), p.params, "{}", p.phenotype);
            // The first value is a's unless the swapped subtree held it, then b's.
            if p.params == 1 && p.phenotype.as_str().starts_with("p[0] * x") {
                assert_eq!(params, [5.0]);
            }
            seen.insert(p.phenotype.as_str().to_owned());
        }
        for expected in ["sinf(p[0] * y) + y", "p[0] * x + sinf(p[1] * y)", "p[0] * y + y", "sinf(p[0] * y)"]
        {
            assert!(seen.contains(expected), "{expected} not among {seen:?}");
        }
    }

    /// The texts of the children `mutate` makes of `genome`'s tree by `kind`, over 300 draws.
    fn mutated(genome: Vec<u32>, kind: Mutation, seed: u64) -> std::collections::HashSet<String> {
        let g = grammar();
        let limits = MappingLimits::default();
        let t = Tree::derive(&g, &Genome(genome), &limits).unwrap();
        let fits = |_: &Phenotype| true;
        let l = Limits { grammar: &g, mapping: &limits, fits: &fits };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..300)
            .filter_map(|_| {
                let (child, _, done) = mutate(&mut rng, &l, &t, &[]);
                (done == kind).then(|| map(&g, &child, &limits).phenotype().unwrap().as_str().to_owned())
            })
            .collect()
    }

    fn texts(of: &[&str]) -> std::collections::HashSet<String> {
        of.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn point_mutation_switches_an_operator_for_one_of_its_arity_and_keeps_the_rest() {
        // x + y
        assert_eq!(mutated(vec![0, 3, 0, 3, 1], Mutation::Point, 2), texts(&["x * y", "y + y", "x + x"]));
    }

    #[test]
    fn hoisting_replaces_a_subtree_by_one_of_its_own() {
        // sinf(x + y)
        assert_eq!(
            mutated(vec![2, 0, 3, 0, 3, 1], Mutation::Hoist, 3),
            texts(&["x + y", "x", "y", "sinf(x)", "sinf(y)"])
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Whatever the parents, every child is a tree of the grammar (it maps without wrapping
        /// and reads every codon), within the depth limit and the size limit, with one value per
        /// parameter it reads where its parents had them.
        #[test]
        fn children_are_trees_of_the_grammar_within_the_limits(seed in 0u64..10_000, budget_a in 1usize..30, budget_b in 1usize..30, max_size in 1usize..25, max_depth in 3usize..12) {
            let g = grammar();
            let limits = MappingLimits { max_depth, ..MappingLimits::default() };
            let fits = move |p: &Phenotype| size(p) <= max_size;
            let l = Limits { grammar: &g, mapping: &limits, fits: &fits };
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let parent = |s: u64, b: usize| {
                let mut r = ChaCha8Rng::seed_from_u64(s);
                let (c, _) = grow(&g, &mut r, g.start(), max_depth, s.is_multiple_of(3), b).unwrap();
                Tree::derive(&g, &Genome(c), &limits).unwrap()
            };
            let (a, b) = (parent(seed, budget_a), parent(seed + 1, budget_b));
            let pa: Vec<f32> = (0..a.nodes[0].params).map(|k| k as f32).collect();
            let pb: Vec<f32> = (0..b.nodes[0].params).map(|k| -(k as f32)).collect();
            let within = |t: &Tree| (l.fits)(map(&g, &t.genome(), &limits).phenotype().unwrap());
            for _ in 0..4 {
                let (x, xp) = crossover(&mut rng, &l, (&a, &pa), (&b, &pb));
                let (y, yp, _) = mutate(&mut rng, &l, &a, &pa);
                for (child, parent_fits) in [(&x, within(&a)), (&y, within(&a))] {
                    let d = map(&g, child, &limits);
                    let d = d.derivation().expect("a child of trees maps");
                    prop_assert_eq!((d.used_codons, d.wraps), (child.len(), 0));
                    prop_assert!(d.max_depth <= max_depth);
                    if parent_fits {
                        prop_assert!(size(&d.phenotype) <= max_size, "{} over {}", d.phenotype, max_size);
                    }
                }
                // Parents with every value give children with every value.
                prop_assert_eq!(xp.len(), map(&g, &x, &limits).derivation().unwrap().params);
                prop_assert_eq!(yp.len(), map(&g, &y, &limits).derivation().unwrap().params);
            }
        }
    }
}
