//! `sinf` and `cosf` as the CPU evaluator computes them: in double, and rounded once to float.
//! For every float below [`REDUCED`] in magnitude the result is the float nearest the true sine
//! or cosine (correctly rounded), the same bits on every machine and from every path of the
//! evaluator: the tree walk, the blocks of the tape with or without AVX2, the derivatives. Checked
//! on all 2.4 billion such floats (an ignored test, about 90 s): against the C library's double
//! `sin` and `cos` rounded to float wherever that decides the rounding, and on the 18 arguments
//! where it does not, against 60-digit values (`mpmath`). The C library's `sinf` and `cosf` are
//! not correctly rounded (glibc 2.36's differ from the nearest float in about 1.3% of arguments)
//! and can change between its versions. Beyond [`REDUCED`], and for infinities and NaN, the C
//! library's `sinf` and `cosf` answer.
//!
//! The argument is reduced by the nearest multiple `n` of π/2 in three parts (Cody and Waite's
//! method: each `n · part` exact, so the remainder `r` keeps its relative accuracy), and `sin r`
//! and `cos r` are the polynomials of fdlibm's `__kernel_sin` and `__kernel_cos` (errors below
//! 2^-58 on |r| ≤ π/4), picked and signed by `n mod 4`; one argument whose sine lies too near
//! halfway between two floats for that is answered from a table of one. Written branch-free so
//! that a block of arguments is computed by vector instructions: 1.9 ns an argument for both the
//! sine and the cosine with AVX2, against 6.4–9.3 ns for glibc's `sinf` alone (2-core development
//! machine, `examples/sin_speed.rs`). No fused multiply-add is used, so AVX2 and SSE2 give the
//! same bits.

/// Arguments below this in magnitude are reduced here: `n` stays below 2^19, so each `n · part`
/// of π/2 (33 significant bits a part) is exact in double.
pub const REDUCED: f32 = 524_288.0;

const INV_PIO2: f64 = std::f64::consts::FRAC_2_PI;
const PIO2_1: f64 = f64::from_bits(0x3ff9_21fb_5440_0000); // 1.57079632673412561417e0
const PIO2_2: f64 = f64::from_bits(0x3dd0_b461_1a60_0000); // 6.0771005063039659766e-11
const PIO2_2T: f64 = f64::from_bits(0x3ba3_198a_2e03_7073); // 2.02226624879595063154e-21
/// 1.5 · 2^52: `x + SHIFT - SHIFT` rounds `x` to an integer, whose low bits `x + SHIFT` holds.
const SHIFT: f64 = 6_755_399_441_055_744.0;
const S1: f64 = f64::from_bits(0xbfc5_5555_5555_5549); // -1.66666666666666324348e-1
const S2: f64 = f64::from_bits(0x3f81_1111_1110_f8a6); // 8.33333333332248946124e-3
const S3: f64 = f64::from_bits(0xbf2a_01a0_19c1_61d5); // -1.98412698298579493134e-4
const S4: f64 = f64::from_bits(0x3ec7_1de3_57b1_fe7d); // 2.75573137070700676789e-6
const S5: f64 = f64::from_bits(0xbe5a_e5e6_8a2b_9ceb); // -2.50507602534068634195e-8
const S6: f64 = f64::from_bits(0x3de5_d93a_5acf_d57c); // 1.58969099521155010221e-10
const C1: f64 = f64::from_bits(0x3fa5_5555_5555_554c); // 4.16666666666666019037e-2
const C2: f64 = f64::from_bits(0xbf56_c16c_16c1_5177); // -1.38888888888741095749e-3
const C3: f64 = f64::from_bits(0x3efa_01a0_19cb_1590); // 2.48015872894767294178e-5
const C4: f64 = f64::from_bits(0xbe92_7e4f_809c_52ad); // -2.75573143513906633035e-7
const C5: f64 = f64::from_bits(0x3e21_ee9e_bdb4_b1c4); // 2.0875723212981748279e-9
const C6: f64 = f64::from_bits(0xbda8_fae9_be88_38d4); // -1.13596475577881948265e-11

/// `|x|` and `sinf(|x|)` (correctly rounded, from 60 digits), for the one float below [`REDUCED`]
/// where the double computation does not round to it: `sinf(9830.3984375)` is `-0x1.63f4bap-2`,
/// where the polynomial gives the float one unit further from zero.
const HARD_SIN: (f64, f64) = (9830.3984375, f32::from_bits(0xbeb1_fa5d) as f64);

/// Whether `x` is reduced here rather than by the C library.
#[inline(always)]
fn reduced(x: f32) -> bool {
    x.abs() < REDUCED
}

/// The sine and cosine of `x` (|x| < [`REDUCED`]) in double, before their rounding to float.
#[inline(always)]
fn sin_cos_wide(x: f32) -> (f64, f64) {
    let xd = f64::from(x);
    let t = xd * INV_PIO2 + SHIFT;
    let q = t.to_bits();
    let n = t - SHIFT;
    let r = ((xd - n * PIO2_1) - n * PIO2_2) - n * PIO2_2T;
    let z = r * r;
    let s = r + (z * r) * (S1 + z * (S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)))));
    // sin(-0) is -0, which the sum above makes +0.
    let s = if xd == 0.0 { xd } else { s };
    let w = z * z;
    let tail = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    let half = 0.5 * z;
    let one = 1.0 - half;
    let c = one + (((1.0 - one) - half) + z * tail);
    // x = n·π/2 + r: sin x is sin r, cos r, −sin r, −cos r for n mod 4 = 0, 1, 2, 3.
    let (a, b) = if q & 1 != 0 { (c, s) } else { (s, c) };
    let sin = if q & 2 != 0 { -a } else { a };
    let cos = if (q + 1) & 2 != 0 { -b } else { b };
    // The one float below REDUCED whose sine the polynomial rounds the wrong way: its true value
    // lies 6.6e-10 of a unit in the last place (2^-30.5) from halfway between two floats.
    let sin = if xd.abs() == HARD_SIN.0 { HARD_SIN.1.copysign(xd) } else { sin };
    (sin, cos)
}

/// `sinf(x)`.
pub fn sinf(x: f32) -> f32 {
    if reduced(x) { sin_cos_wide(x).0 as f32 } else { x.sin() }
}

/// `cosf(x)`.
pub fn cosf(x: f32) -> f32 {
    if reduced(x) { sin_cos_wide(x).1 as f32 } else { x.cos() }
}

/// `sinf` and `cosf` of every value of `xs`, into `sin` and `cos` (each as long as `xs`): the
/// same bits as [`sinf`] and [`cosf`], computed by vector instructions.
pub fn sin_cos_block(xs: &[f32], sin: &mut [f32], cos: &mut [f32]) {
    assert!(sin.len() == xs.len() && cos.len() == xs.len(), "one sine and one cosine an argument");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { sin_cos_avx2(xs, sin, cos) };
        return;
    }
    sin_cos_lanes(xs, sin, cos);
}

/// [`sin_cos_lanes`] compiled for AVX2 (the same operations, so the same bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sin_cos_avx2(xs: &[f32], sin: &mut [f32], cos: &mut [f32]) {
    sin_cos_lanes(xs, sin, cos);
}

#[inline(always)]
fn sin_cos_lanes(xs: &[f32], sin: &mut [f32], cos: &mut [f32]) {
    // Every lane through the reduction first (vectorized), then the rare argument beyond it again.
    for ((&x, s), c) in xs.iter().zip(sin.iter_mut()).zip(cos.iter_mut()) {
        let (a, b) = sin_cos_wide(x);
        (*s, *c) = (a as f32, b as f32);
    }
    for ((&x, s), c) in xs.iter().zip(sin.iter_mut()).zip(cos.iter_mut()) {
        if !reduced(x) {
            (*s, *c) = (x.sin(), x.cos());
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Whether `wide` (within a unit in its last place of the true value) rounds to float as the
    /// true value does: it lies more than two units of double from a point halfway between two
    /// floats.
    fn decided(wide: f64) -> bool {
        let f = wide as f32;
        if !f.is_finite() || f == 0.0 {
            return true;
        }
        let up = f64::from(f32::from_bits(f.to_bits() + 1));
        let down = f64::from(f32::from_bits(f.to_bits() - 1));
        let fd = f64::from(f);
        let ulp = f64::EPSILON * wide.abs();
        [(fd + up) / 2.0, (fd + down) / 2.0].iter().all(|&m| (wide - m).abs() > 2.0 * ulp)
    }

    /// Checks `x`: the scalar functions give the correctly rounded float where the double
    /// library's value decides it, and the block gives the scalar functions' bits, with and
    /// without AVX2.
    fn check(xs: &[f32]) -> usize {
        let (mut sin, mut cos) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
        sin_cos_block(xs, &mut sin, &mut cos);
        // The path without AVX2 too, whatever this CPU has.
        let (mut sin2, mut cos2) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
        sin_cos_lanes(xs, &mut sin2, &mut cos2);
        assert!(sin.iter().zip(&sin2).chain(cos.iter().zip(&cos2)).all(|(a, b)| a.to_bits() == b.to_bits()));
        let mut undecided = 0;
        for (k, &x) in xs.iter().enumerate() {
            assert_eq!(sin[k].to_bits(), sinf(x).to_bits(), "block sin of {x:e}");
            assert_eq!(cos[k].to_bits(), cosf(x).to_bits(), "block cos of {x:e}");
            if !reduced(x) {
                continue;
            }
            for (ours, wide, name) in
                [(sinf(x), f64::from(x).sin(), "sin"), (cosf(x), f64::from(x).cos(), "cos")]
            {
                if decided(wide) {
                    assert_eq!(
                        ours.to_bits(),
                        (wide as f32).to_bits(),
                        "{name} of {x:e}: {ours:e} against {wide:e}"
                    );
                } else {
                    undecided += 1;
                }
            }
        }
        undecided
    }

    #[test]
    fn special_values_are_the_c_library_s_or_exact() {
        assert_eq!(sinf(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(sinf(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(cosf(-0.0), 1.0);
        assert!(sinf(f32::INFINITY).is_nan() && cosf(f32::NEG_INFINITY).is_nan() && sinf(f32::NAN).is_nan());
        let tiny = f32::from_bits(1);
        assert_eq!(sinf(tiny), tiny);
        assert_eq!(sinf(-tiny), -tiny);
        assert_eq!(check(&[0.0, -0.0, tiny, -tiny, f32::MIN_POSITIVE, 1e-20, 1.0, -1.0]), 0);
    }

    /// The 18 arguments below [`REDUCED`] whose sine or cosine the double library cannot decide
    /// (its value within two units of double of halfway between two floats), with the correctly
    /// rounded results that mpmath gives at 60 digits.
    #[test]
    fn the_arguments_the_double_library_cannot_decide_are_correctly_rounded() {
        let cases: [(bool, u32, u32); 9] = [
            (false, 0x3980_0000, 0x3f80_0000),
            (false, 0x3a54_4395, 0x3f7f_fffb),
            (false, 0x3c10_7fe6, 0x3f7f_fd74),
            (true, 0x3dcf_5597, 0x3dce_faf9),
            (true, 0x3ef3_830f, 0x3eea_6f45),
            (false, 0x4247_90ce, 0x3f6e_4c01),
            (true, 0x4371_ade3, 0x3e62_da56),
            (true, 0x45a8_abb3, 0x3e51_ade2),
            (true, 0x4619_9998, 0xbeb1_fa5d),
        ];
        for (is_sin, x, want) in cases {
            for x in [f32::from_bits(x), -f32::from_bits(x)] {
                let want = f32::from_bits(want);
                let (got, want) = if is_sin { (sinf(x), want.copysign(x)) } else { (cosf(x), want) };
                assert_eq!(got.to_bits(), want.to_bits(), "sin {is_sin} of {x:e}: {got:e} against {want:e}");
                assert_eq!(check(&[x]), 1, "{x:e} is one the double library cannot decide");
            }
        }
    }

    /// Random floats of every size up to 2^22 (the C library's range included), multiples of π/2
    /// and their neighbours, the edges of the reduction.
    #[test]
    fn sines_and_cosines_are_correctly_rounded_and_every_path_agrees() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut xs: Vec<f32> = (0..1 << 20)
            .map(|_| {
                let bits: u64 = rng.random();
                let e = (bits % 170) as i32 - 149; // 2^-149 to 2^21
                let m = 1.0 + ((bits >> 8) & 0x7F_FFFF) as f32 / 8_388_608.0;
                let x = m * 2f32.powi(e);
                if bits >> 63 == 1 { -x } else { x }
            })
            .collect();
        for k in 1..20_000 {
            let near = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
            for d in -2i32..=2 {
                xs.push(f32::from_bits(near.to_bits().wrapping_add_signed(d)));
            }
        }
        let edge = REDUCED.to_bits();
        xs.extend((edge - 3..edge + 3).flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)]));
        let undecided = check(&xs);
        assert!(undecided < 8, "{undecided} undecided of {}", 2 * xs.len());
    }

    /// The same, on every float below [`REDUCED`] (about 2.4 billion): run with
    /// `cargo test --release -p gpfarm-gp -- --ignored every_float`.
    #[test]
    #[ignore = "minutes: every float below 2^19"]
    fn every_float_below_the_reduction_s_bound() {
        let top = REDUCED.to_bits();
        let chunk = 1 << 22;
        let undecided: usize = (0..top.div_ceil(chunk))
            .map(|c| {
                let xs: Vec<f32> = (c * chunk..((c + 1) * chunk).min(top))
                    .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
                    .collect();
                check(&xs)
            })
            .sum();
        println!("every float below 2^19: {undecided} sines and cosines undecided by the double library");
    }
}
