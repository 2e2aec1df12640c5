//! Partitioning work over workers: the paper's balanced contiguous parts, whose sizes differ by
//! at most one, and guided chunks of weighted items for workers that take the next chunk as
//! soon as they are free.

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
    let mut order: Vec<usize> = (0..weights.len()).collect();
    let weight = |i: usize| if weights[i].is_finite() { weights[i].max(0.0) } else { 0.0 };
    order.sort_by(|&a, &b| weight(b).total_cmp(&weight(a)).then(a.cmp(&b)));
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

    #[test]
    fn nothing_to_split_gives_no_parts() {
        assert!(balanced(0, 4).is_empty());
    }

    proptest! {
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
        fn guided_chunks_hold_every_item_once_heaviest_first(
            weights in proptest::collection::vec(0.0f64..1000.0, 0..400),
            workers in 1usize..32,
            floor in 0.0f64..2000.0,
            spread in 1.0f64..4.0,
        ) {
            let cap = floor * spread;
            let chunks = guided(&weights, workers, floor, cap);
            let mut flat: Vec<usize> = chunks.iter().flatten().copied().collect();
            for w in flat.windows(2) {
                prop_assert!(weights[w[0]] >= weights[w[1]]);
            }
            flat.sort_unstable();
            prop_assert_eq!(flat, (0..weights.len()).collect::<Vec<_>>());
            prop_assert!(chunks.iter().all(|c| !c.is_empty()));
            let sum = |c: &Vec<usize>| c.iter().map(|&i| weights[i]).sum::<f64>();
            // No chunk of several items exceeds the cap.
            for c in &chunks {
                prop_assert!(c.len() == 1 || sum(c) <= cap + 1e-9, "{} > {cap}", sum(c));
            }
        }

        #[test]
        fn every_item_appears_exactly_once_in_order(n in 0usize..5000, parts in 1usize..64) {
            let flat: Vec<usize> = balanced(n, parts).into_iter().flatten().collect();
            prop_assert_eq!(flat, (0..n).collect::<Vec<_>>());
        }
    }
}
