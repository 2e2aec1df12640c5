//! Guided chunks of weighted items for workers that each take the next chunk as soon as they are
//! free: how the engine forms the units of a generation. Must return every item exactly once.

use gpfarm_kernels::{PTX_UNIT_WEIGHT, UNIT_WEIGHT};
use gpfarm_protocol::Route;

/// The least and most estimated weight of a unit of `route`. The least keeps the route's fixed
/// cost per unit under a fifth of a unit. The most: units of many heavy kernels cost more than
/// their weights say (a unit of eight bloated keijzer6 individuals took 3.6 s of NVRTC on the GPU
/// host while the rest of its generation took 1 s), and one such unit holds up its generation.
pub fn unit_bounds(route: Route) -> (f64, f64) {
    let fixed = match route {
        Route::Nvrtc => UNIT_WEIGHT,
        Route::Ptx => PTX_UNIT_WEIGHT,
    };
    (4.0 * fixed, 8.0 * fixed)
}

/// The units the engine forms from one generation's individuals for `workers` compile workers,
/// given each individual's estimated cost on `route` (NVRTC:
/// [`gpfarm_kernels::compile_weight`], PTX: [`gpfarm_kernels::ptx_compile_weight`]): guided
/// chunks ([`guided`]) within the route's [`unit_bounds`]. Returns indices into `weights`; every
/// index appears exactly once.
pub fn generation_units(route: Route, weights: &[f64], workers: usize) -> Vec<Vec<usize>> {
    let (floor, cap) = unit_bounds(route);
    guided(weights, workers, floor, cap)
}

/// Chunks of weighted items for `workers` that each take the next chunk when free: heaviest items
/// first, so the long ones start early and the short ones fill in at the end; each chunk holds
/// about the unassigned weight over `1.5 × workers` (guided self-scheduling), so chunks shrink
/// towards the end and the workers finish together; but at least `floor` (a chunk's fixed cost
/// stays a small share), at most `cap` (an item heavier than estimated cannot hold up the rest
/// for long; an item heavier than `cap` is a chunk of its own), and at most the total over
/// `workers` (every worker gets a chunk). Returns indices into `weights`; every index appears
/// exactly once.
pub(crate) fn guided(weights: &[f64], workers: usize, floor: f64, cap: f64) -> Vec<Vec<usize>> {
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
    }
}
