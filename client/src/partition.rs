//! Partitioning work over workers, the one place a batch is split: the paper's balanced
//! contiguous parts (the farm's and the threads' parts of a call, the daemons each island of a
//! run gets), and the units a population is put into ([`plan`]), which `gpfarm evolve`, `gpfarm
//! bench` and the islands all take from here, so a flag means the same units everywhere. Must
//! return every item exactly once.

use std::ops::Range;

/// Splits `0..n` into `parts` contiguous ranges in order; sizes differ by at most one, the
/// larger ones first. Returns fewer ranges when `n < parts` (no empty ranges).
pub fn balanced(n: usize, parts: usize) -> Vec<Range<usize>> {
    let parts = parts.max(1).min(n.max(1));
    if n == 0 {
        return Vec::new();
    }
    let (base, extra) = (n / parts, n % parts);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// Splits `0..n` into contiguous ranges of at most `k` items each, as few as that allows, sizes
/// differing by at most one (`balanced` over `ceil(n / k)` parts).
pub fn per_unit(n: usize, k: usize) -> Vec<Range<usize>> {
    balanced(n, n.div_ceil(k.max(1)))
}

/// How many of `total` workers (daemons, threads) each of `parts` takers gets: balanced
/// shares, the larger ones first, and at least one each (so a taker may share a worker when
/// there are fewer workers than takers).
pub fn shares(total: usize, parts: usize) -> Vec<usize> {
    let parts = parts.max(1);
    (0..parts).map(|k| (total / parts + usize::from(k < total % parts)).max(1)).collect()
}

/// How a batch of individuals is put into units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnitPlan {
    /// Units of at most `k` individuals, as few as that allows, their sizes differing by at most
    /// one ([`per_unit`]), heaviest individuals first.
    PerUnit(usize),
    /// Guided chunks for `workers` that each take the next unit when free ([`guided`]), each
    /// unit's weight between `floor` and `cap` (the compile route's bounds).
    Guided {
        /// Compile workers taking units from the queue.
        workers: usize,
        /// The least weight of a unit.
        floor: f64,
        /// The most weight of a unit of several individuals.
        cap: f64,
    },
}

impl UnitPlan {
    /// The plan of a run: `per_unit` individuals a unit when given, else guided chunks for
    /// `workers` within `bounds` (a route's `(floor, cap)`).
    pub fn new(per_unit: Option<usize>, workers: usize, bounds: (f64, f64)) -> UnitPlan {
        match per_unit {
            Some(k) => UnitPlan::PerUnit(k),
            None => UnitPlan::Guided { workers, floor: bounds.0, cap: bounds.1 },
        }
    }
}

/// The units of a batch whose individuals have the estimated compile costs `weights`, by
/// `plan`: indices into `weights`, heaviest first (ties in index order), every index exactly
/// once, no unit empty.
pub fn plan(weights: &[f64], plan: UnitPlan) -> Vec<Vec<usize>> {
    match plan {
        UnitPlan::PerUnit(k) => {
            let order = heaviest_first(weights);
            per_unit(order.len(), k).into_iter().map(|r| order[r].to_vec()).collect()
        }
        UnitPlan::Guided { workers, floor, cap } => guided(weights, workers, floor, cap),
    }
}

/// A weight as the planner counts it: negative and non-finite estimates count as nothing.
fn counted(w: f64) -> f64 {
    if w.is_finite() { w.max(0.0) } else { 0.0 }
}

/// The indices of `weights`, heaviest first, ties in index order.
fn heaviest_first(weights: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| counted(weights[b]).total_cmp(&counted(weights[a])).then(a.cmp(&b)));
    order
}

/// Chunks of weighted items for `workers` that each take the next chunk when free: heaviest items
/// first, so the long ones start early and the short ones fill in at the end; each chunk holds
/// about the unassigned weight over `1.5 × workers` (guided self-scheduling), so chunks shrink
/// towards the end and the workers finish together; but at least `floor` (a chunk's fixed cost
/// stays a small share), at most `cap` (an item heavier than estimated cannot hold up the rest
/// for long; an item heavier than `cap` is a chunk of its own), and at most the total over
/// `workers` (every worker gets a chunk). Returns indices into `weights`; every index appears
/// exactly once.
pub fn guided(weights: &[f64], workers: usize, floor: f64, cap: f64) -> Vec<Vec<usize>> {
    let workers = workers.max(1) as f64;
    let order = heaviest_first(weights);
    let weight = |i: usize| counted(weights[i]);
    let total: f64 = order.iter().map(|&i| weight(i)).sum();
    let mut remaining = total;
    let mut chunks = Vec::new();
    let mut chunk = Vec::new();
    let mut held = 0.0;
    for i in order {
        let target = (remaining / (1.5 * workers)).max(floor).min(cap.max(floor)).min(total / workers);
        if !chunk.is_empty() && held + weight(i) > target {
            remaining -= held;
            held = 0.0;
            chunks.push(std::mem::take(&mut chunk));
        }
        chunk.push(i);
        held += weight(i);
    }
    if !chunk.is_empty() {
        chunks.push(chunk);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn three_hundred_over_sixteen_gives_parts_of_nineteen_and_eighteen() {
        let sizes: Vec<usize> = balanced(300, 16).iter().map(|r| r.len()).collect();
        assert_eq!(sizes.iter().filter(|&&s| s == 19).count(), 12);
        assert_eq!(sizes.iter().filter(|&&s| s == 18).count(), 4);
    }

    #[test]
    fn nothing_to_split_gives_no_parts() {
        assert!(balanced(0, 4).is_empty());
    }

    #[test]
    fn asking_for_more_parts_than_items_gives_one_each() {
        assert_eq!(balanced(3, 16), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn per_unit_gives_the_fewest_parts_of_at_most_k() {
        assert_eq!(per_unit(10, 4), vec![0..4, 4..7, 7..10]);
        assert_eq!(per_unit(10, 0), per_unit(10, 1));
    }

    #[test]
    fn a_fixed_plan_of_four_over_ten_gives_four_three_three_heaviest_first() {
        let weights: Vec<f64> = (0..10).map(|i| f64::from(i % 4)).collect();
        let units = plan(&weights, UnitPlan::PerUnit(4));
        let sizes: Vec<usize> = units.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![4, 3, 3]);
        let flat: Vec<f64> = units.iter().flatten().map(|&i| weights[i]).collect();
        assert!(flat.windows(2).all(|w| w[0] >= w[1]), "{flat:?}");
    }

    #[test]
    fn shares_give_every_taker_at_least_one_worker() {
        assert_eq!(shares(16, 3), vec![6, 5, 5]);
        assert_eq!(shares(2, 4), vec![1, 1, 1, 1]);
        assert_eq!(shares(7, 1), vec![7]);
    }

    #[test]
    fn guided_chunks_shrink_towards_the_end_and_give_every_worker_one() {
        let weights = vec![10.0; 300];
        let chunks = guided(&weights, 16, 20.0, 1000.0);
        assert!(chunks.len() >= 16);
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
        assert!(sizes[0] <= 300 / 16, "{sizes:?}");
        // The floor of 20 holds two items; only the leftover may be smaller.
        assert_eq!(sizes[sizes.len() - 2], 2, "{sizes:?}");
        assert!(*sizes.last().unwrap() <= 2, "{sizes:?}");
    }

    #[test]
    fn the_cap_keeps_heavy_items_apart() {
        let weights = vec![400.0; 100];
        let chunks = guided(&weights, 4, 100.0, 900.0);
        assert!(chunks.iter().all(|c| c.len() <= 2), "{chunks:?}");
    }

    #[test]
    fn a_heavy_item_gets_a_chunk_of_its_own() {
        let mut weights = vec![1.0; 100];
        weights[42] = 500.0;
        let chunks = guided(&weights, 4, 5.0, 50.0);
        assert_eq!(chunks[0], vec![42]);
    }

    proptest! {
        #[test]
        fn every_plan_holds_every_item_once_heaviest_first(
            weights in proptest::collection::vec(0.0f64..1000.0, 0..400),
            workers in 1usize..32,
            floor in 0.0f64..2000.0,
            spread in 1.0f64..4.0,
            k in 1usize..40,
        ) {
            let cap = floor * spread;
            for p in [UnitPlan::PerUnit(k), UnitPlan::Guided { workers, floor, cap }] {
                let chunks = plan(&weights, p);
                let mut flat: Vec<usize> = chunks.iter().flatten().copied().collect();
                for w in flat.windows(2) {
                    prop_assert!(weights[w[0]] >= weights[w[1]]);
                }
                flat.sort_unstable();
                prop_assert_eq!(flat, (0..weights.len()).collect::<Vec<_>>());
                prop_assert!(chunks.iter().all(|c| !c.is_empty()));
            }
            let sum = |c: &Vec<usize>| c.iter().map(|&i| weights[i]).sum::<f64>();
            // No guided chunk of several items exceeds the cap.
            for c in &guided(&weights, workers, floor, cap) {
                prop_assert!(c.len() == 1 || sum(c) <= cap + 1e-9, "{} > {cap}", sum(c));
            }
            // No fixed unit holds more than k.
            prop_assert!(plan(&weights, UnitPlan::PerUnit(k)).iter().all(|c| c.len() <= k));
        }

        #[test]
        fn sizes_differ_by_at_most_one(n in 0usize..5000, parts in 1usize..64) {
            let ranges = balanced(n, parts);
            if let (Some(max), Some(min)) = (ranges.iter().map(|r| r.len()).max(), ranges.iter().map(|r| r.len()).min()) {
                prop_assert!(max - min <= 1);
                prop_assert!(min >= 1);
            }
            prop_assert!(ranges.len() <= parts);
        }

        #[test]
        fn every_item_appears_exactly_once_in_order(n in 0usize..5000, parts in 1usize..64) {
            let flat: Vec<usize> = balanced(n, parts).into_iter().flatten().collect();
            prop_assert_eq!(flat, (0..n).collect::<Vec<_>>());
        }
    }
}
