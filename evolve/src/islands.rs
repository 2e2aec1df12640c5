//! The island model: sub-populations evolved side by side, each by its own pipeline with its
//! own evaluator, on a ring. After every M-th generation each island sends its best k
//! individuals (with their fitness) to the next island and takes the previous island's in place
//! of its worst ([`gpfarm_gp::Pipeline::migrate_every`]).
//!
//! Migration waits: an island that reaches a migration generation breeds nothing more until its
//! immigrants are in. So a run is fixed by its seed and its number of islands, whatever the
//! timing, the compiler or the machine: island `i` evolves from seed [`island_seed`]`(seed, i)`,
//! and what it receives depends on nothing but the island before it.
//!
//! Islands in one process are threads joined by channels ([`ring`]). Islands in several
//! processes (MPI ranks) are the same: each process holds a stretch of the ring
//! ([`ring_stretch`]), and something carries the two loose ends' parcels between processes.

use crossbeam_channel::{Receiver, Sender, unbounded};
use gpfarm_gp::Migrant;

/// The migrants an island sends after one generation: the generation, and the individuals with
/// their fitness, best first.
pub type Parcel = (usize, Vec<Migrant>);

/// An island's two ends of the ring.
#[derive(Debug, Clone)]
pub struct Link {
    /// Where its emigrants go: the next island.
    pub to_next: Sender<Parcel>,
    /// Where its immigrants come from: the previous island.
    pub from_previous: Receiver<Parcel>,
}

/// The ring of `n` islands of one process: island `i` sends to island `i + 1`, the last to the
/// first (itself, when alone).
pub fn ring(n: usize) -> Vec<Link> {
    let (mut links, out, into) = ring_stretch(n);
    // Close the ring: what the last sends is what the first receives.
    let last = links.len() - 1;
    links[last].to_next = into;
    drop(out);
    links
}

/// A stretch of `n` consecutive islands of a larger ring (at least one): island `i` of the
/// stretch sends to island `i + 1`. Also returns the stretch's loose ends: the receiver of what
/// its last island sends onwards, and the sender of what its first island receives.
pub fn ring_stretch(n: usize) -> (Vec<Link>, Receiver<Parcel>, Sender<Parcel>) {
    let n = n.max(1);
    // Channel i carries parcels into island i; channel n carries those out of the stretch.
    let (senders, receivers): (Vec<Sender<Parcel>>, Vec<Receiver<Parcel>>) =
        (0..=n).map(|_| unbounded()).unzip();
    let into_first = senders[0].clone();
    let out_of_last = receivers[n].clone();
    let links = (0..n)
        .map(|i| Link { to_next: senders[i + 1].clone(), from_previous: receivers[i].clone() })
        .collect();
    (links, out_of_last, into_first)
}

/// The seed island `island` evolves from, for a run of `seed`: the run's own for island 0 (so
/// one island is the run without islands), and a mix of both for the others, so that runs of
/// neighbouring seeds share no island.
pub fn island_seed(seed: u64, island: usize) -> u64 {
    if island == 0 {
        return seed;
    }
    // SplitMix64's finaliser.
    let mut z = seed ^ (island as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_passes_each_parcel_to_the_next_island() {
        let links = ring(3);
        for (i, link) in links.iter().enumerate() {
            link.to_next.send((i, Vec::new())).unwrap();
        }
        let got: Vec<usize> = links.iter().map(|l| l.from_previous.try_recv().unwrap().0).collect();
        assert_eq!(got, [2, 0, 1]);
        let alone = ring(1);
        alone[0].to_next.send((5, Vec::new())).unwrap();
        assert_eq!(alone[0].from_previous.try_recv().unwrap().0, 5);
    }

    #[test]
    fn a_stretch_has_two_loose_ends() {
        let (links, out, into) = ring_stretch(2);
        into.send((9, Vec::new())).unwrap();
        assert_eq!(links[0].from_previous.try_recv().unwrap().0, 9);
        links[0].to_next.send((1, Vec::new())).unwrap();
        assert_eq!(links[1].from_previous.try_recv().unwrap().0, 1);
        links[1].to_next.send((2, Vec::new())).unwrap();
        assert_eq!(out.try_recv().unwrap().0, 2);
    }

    #[test]
    fn island_seeds_differ_from_each_other_and_from_neighbouring_runs() {
        assert_eq!(island_seed(42, 0), 42);
        let mut seen: Vec<u64> =
            (0..4u64).flat_map(|seed| (0..8).map(move |i| island_seed(seed, i))).collect();
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), n);
    }
}
