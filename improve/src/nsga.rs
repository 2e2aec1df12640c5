//! NSGA-II's selection (Deb et al. 2002) on two objectives, both minimised: fast non-dominated
//! sorting into fronts, crowding distance within a front, and survival of the best `n` by (front,
//! crowding). Non-finite objectives are worst.

/// Whether `a` dominates `b`: no worse in both objectives, better in one.
pub fn dominates(a: [f64; 2], b: [f64; 2]) -> bool {
    let (a, b) = (a.map(worst_if_nan), b.map(worst_if_nan));
    a[0] <= b[0] && a[1] <= b[1] && (a[0] < b[0] || a[1] < b[1])
}

fn worst_if_nan(x: f64) -> f64 {
    if x.is_nan() { f64::INFINITY } else { x }
}

/// The points' fronts, best first: front 0 is the points no other dominates, front 1 those only
/// front 0 dominates, and so on. Every index appears once.
pub fn fronts(points: &[[f64; 2]]) -> Vec<Vec<usize>> {
    let n = points.len();
    let mut dominated_by = vec![0usize; n];
    let mut dominating: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        for j in 0..n {
            if i != j && dominates(points[i], points[j]) {
                dominating[i].push(j);
            } else if i != j && dominates(points[j], points[i]) {
                dominated_by[i] += 1;
            }
        }
    }
    let mut fronts = Vec::new();
    let mut current: Vec<usize> = (0..n).filter(|&i| dominated_by[i] == 0).collect();
    while !current.is_empty() {
        let mut next = Vec::new();
        for &i in &current {
            for &j in &dominating[i] {
                dominated_by[j] -= 1;
                if dominated_by[j] == 0 {
                    next.push(j);
                }
            }
        }
        next.sort_unstable();
        fronts.push(std::mem::replace(&mut current, next));
    }
    fronts
}

/// The crowding distance of each member of `front` (in its order): infinite at either end of
/// each objective, else the sum over objectives of the gap between its neighbours, scaled by the
/// objective's range in the front.
pub fn crowding(points: &[[f64; 2]], front: &[usize]) -> Vec<f64> {
    let mut distance = vec![0.0; front.len()];
    if front.len() <= 2 {
        return vec![f64::INFINITY; front.len()];
    }
    for m in [0, 1] {
        let value = |k: usize| worst_if_nan(points[front[k]][m]);
        let mut order: Vec<usize> = (0..front.len()).collect();
        order.sort_by(|&a, &b| value(a).total_cmp(&value(b)));
        let (lo, hi) = (value(order[0]), value(order[front.len() - 1]));
        distance[order[0]] = f64::INFINITY;
        distance[order[front.len() - 1]] = f64::INFINITY;
        let range = hi - lo;
        if !(range.is_finite() && range > 0.0) {
            continue;
        }
        for w in order.windows(3) {
            let gap = value(w[2]) - value(w[0]);
            distance[w[1]] += if gap.is_finite() { gap / range } else { 0.0 };
        }
    }
    distance
}

/// Each point's front (0 best) and crowding distance, for tournaments.
pub fn rank(points: &[[f64; 2]]) -> Vec<(usize, f64)> {
    let mut out = vec![(0, 0.0); points.len()];
    for (r, front) in fronts(points).iter().enumerate() {
        for (k, d) in crowding(points, front).into_iter().enumerate() {
            out[front[k]] = (r, d);
        }
    }
    out
}

/// Whether `a` wins a binary tournament against `b` by (front, crowding).
pub fn better(a: (usize, f64), b: (usize, f64)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 > b.1)
}

/// The `n` survivors (indices, in no set order): whole fronts while they fit, then the most
/// crowding-distant members of the front that does not.
pub fn survivors(points: &[[f64; 2]], n: usize) -> Vec<usize> {
    let mut kept = Vec::with_capacity(n);
    for front in fronts(points) {
        if kept.len() + front.len() <= n {
            kept.extend_from_slice(&front);
            continue;
        }
        let d = crowding(points, &front);
        let mut order: Vec<usize> = (0..front.len()).collect();
        order.sort_by(|&a, &b| d[b].total_cmp(&d[a]).then(front[a].cmp(&front[b])));
        kept.extend(order.into_iter().take(n - kept.len()).map(|k| front[k]));
        break;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fronts_follow_dominance_and_survivors_keep_the_spread() {
        let points =
            [[1.0, 5.0], [2.0, 2.0], [5.0, 1.0], [3.0, 3.0], [4.0, 4.0], [2.0, 6.0], [f64::NAN, 0.0]];
        let f = fronts(&points);
        assert_eq!(f[0], vec![0, 1, 2, 6], "NaN time is worst, but its error of 0 is best");
        assert_eq!(f[1], vec![3, 5]);
        assert_eq!(f[2], vec![4]);
        let d = crowding(&points, &f[0]);
        assert!(d[0].is_infinite() && d[3].is_infinite());
        let kept = survivors(&points, 5);
        assert_eq!(kept.len(), 5);
        assert!([0, 1, 2, 6].iter().all(|i| kept.contains(i)));
        assert!(dominates([1.0, 1.0], [1.0, 2.0]) && !dominates([1.0, 2.0], [1.0, 2.0]));
        let r = rank(&points);
        assert!(better(r[1], r[3]) && !better(r[4], r[3]));
    }
}
