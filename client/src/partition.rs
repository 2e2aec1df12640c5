//! Partitioning work over workers: the paper's balanced contiguous parts, whose sizes differ by
//! at most one. The one place a batch is split: the farm's and the threads' parts, and the
//! units a caller renders. (Guided chunks for a queue of free workers are unit forming, in the
//! generation engine.)

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
        fn every_item_appears_exactly_once_in_order(n in 0usize..5000, parts in 1usize..64) {
            let flat: Vec<usize> = balanced(n, parts).into_iter().flatten().collect();
            prop_assert_eq!(flat, (0..n).collect::<Vec<_>>());
        }
    }
}
