//! A seeded random population of floating-point expression kernels, for measuring compilers
//! without running a GP loop. The expressions mix arithmetic with the transcendental calls that
//! dominate NVRTC's cost in regression problems.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const FUNCS: &[&str] = &["sinf", "expf", "tanhf", "sqrtf(fabsf", "logf(fabsf"];

fn expr(rng: &mut ChaCha8Rng, depth: u32, out: &mut String) {
    let leaf = depth == 0 || rng.random_bool(0.25);
    if leaf {
        if rng.random_bool(0.5) {
            out.push('x');
        } else {
            out.push_str(&format!("{:.2}f", rng.random_range(0.0..10.0f32)));
        }
        return;
    }
    match rng.random_range(0..6) {
        0..=3 => {
            out.push('(');
            expr(rng, depth - 1, out);
            out.push_str([" + ", " - ", " * ", " / "][rng.random_range(0..4)]);
            expr(rng, depth - 1, out);
            out.push(')');
        }
        _ => {
            let f = FUNCS[rng.random_range(0..FUNCS.len())];
            out.push_str(f);
            out.push('(');
            expr(rng, depth - 1, out);
            out.push_str(match f {
                "sqrtf(fabsf" => "))",
                "logf(fabsf" => ") + 1.0f)",
                _ => ")",
            });
        }
    }
}

/// Kernel `name` evaluating one random expression of `x` per thread.
pub fn kernel(rng: &mut ChaCha8Rng, name: &str) -> String {
    let mut body = String::new();
    expr(rng, 5, &mut body);
    format!(
        "extern \"C\" __global__ void {name}(const float* __restrict__ X, float* __restrict__ Y, int n)\n{{\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    if (c >= n) return;\n    float x = X[c];\n    Y[c] = {body};\n}}\n"
    )
}

/// `count` kernels named `ind_0 ..`, grouped `per_unit` to a translation unit; returns
/// (unit name, source, kernel names) per unit.
pub fn population(count: usize, per_unit: usize, seed: u64) -> Vec<(String, String, Vec<String>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let per_unit = per_unit.max(1);
    (0..count)
        .collect::<Vec<_>>()
        .chunks(per_unit)
        .enumerate()
        .map(|(u, idx)| {
            let names: Vec<String> = idx.iter().map(|i| format!("ind_{i}")).collect();
            let source: String = names.iter().map(|n| kernel(&mut rng, n)).collect();
            (format!("random_{u}.cu"), source, names)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_population() {
        assert_eq!(population(20, 3, 7), population(20, 3, 7));
        assert_ne!(population(20, 3, 7), population(20, 3, 8));
    }

    #[test]
    fn units_hold_the_requested_number_of_kernels() {
        let pop = population(10, 4, 1);
        let sizes: Vec<usize> = pop.iter().map(|u| u.2.len()).collect();
        assert_eq!(sizes, vec![4, 4, 2]);
        assert!(pop[2].1.contains("void ind_9("));
    }
}
