//! Times the evaluator's `sinf` and `cosf` ([`sin_cos_block`], a block of 128 arguments at a
//! time, both functions) against the C library's `sinf` alone, over 2^20 floats drawn uniformly
//! from (-s, s) for a few scales s: the best of five passes, in ns an argument, as CSV.
//!
//! `cargo run --release -p gpfarm-gp --example sin_speed`

use std::hint::black_box;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use gpfarm_gp::program::semantics::sin_cos_block;

fn main() {
    let n = 1 << 20;
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    println!("scale,c_library_sinf_ns,sin_cos_block_ns");
    for scale in [3.0f64, 30.0, 1000.0] {
        let xs: Vec<f32> = (0..n).map(|_| (rng.random_range(-1.0..1.0) * scale) as f32).collect();
        let (mut sin, mut cos) = (vec![0.0f32; n], vec![0.0f32; n]);
        let (mut libc, mut ours) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..5 {
            let t = Instant::now();
            for (s, &x) in sin.iter_mut().zip(black_box(&xs)) {
                *s = x.sin();
            }
            black_box(&sin);
            libc = libc.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for ((x, s), c) in black_box(&xs).chunks(128).zip(sin.chunks_mut(128)).zip(cos.chunks_mut(128)) {
                sin_cos_block(x, s, c);
            }
            black_box((&sin, &cos));
            ours = ours.min(t.elapsed().as_secs_f64());
        }
        println!("{scale},{:.2},{:.2}", libc / n as f64 * 1e9, ours / n as f64 * 1e9);
    }
}
