//! Balanced partitioning, as in the paper: contiguous parts whose sizes differ by at most one.

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
