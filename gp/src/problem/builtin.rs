//! The paper's three benchmarks, embedded from `gp/problems/` so the binary needs no
//! files, and the generators that wrote their `cases.json`. Must never hold problem
//! logic: everything a built-in means is in its four files.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ProblemSources;

/// Names of the built-in problems.
pub const NAMES: &[&str] = &["search", "keijzer6", "multiplier5"];

/// Seed the shipped search cases were generated with.
pub const SEARCH_CASES_SEED: u64 = 0x5EA8C4;

macro_rules! embedded {
    ($name:literal) => {
        ProblemSources {
            toml: include_str!(concat!("../../problems/", $name, "/problem.toml")),
            grammar: include_str!(concat!("../../problems/", $name, "/grammar.bnf")),
            cases: include_str!(concat!("../../problems/", $name, "/cases.json")),
            template: include_str!(concat!("../../problems/", $name, "/template.cu")),
        }
    };
}

/// The four files of built-in `name`.
pub fn sources(name: &str) -> Option<ProblemSources<'static>> {
    match name {
        "search" => Some(embedded!("search")),
        "keijzer6" => Some(embedded!("keijzer6")),
        "multiplier5" => Some(embedded!("multiplier5")),
        _ => None,
    }
}

/// Writes one JSON object per line, so the files diff well.
fn json_lines(objects: &[String]) -> String {
    format!("[\n  {}\n]\n", objects.join(",\n  "))
}

/// Search cases: 32 lists of 3..=20 ints in 0..=50; the first 16 drawn contain the
/// searched value (target: index of its first occurrence), the other 16 do not (target
/// -1); the order is then shuffled.
#[doc(hidden)]
pub fn generate_search_cases(seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut cases = Vec::with_capacity(32);
    for k in 0..32 {
        let len = rng.random_range(3..=20usize);
        let list: Vec<i32> = (0..len).map(|_| rng.random_range(0..=50)).collect();
        let (search, target) = if k < 16 {
            let s = list[rng.random_range(0..len)];
            let first = list.iter().position(|&v| v == s).unwrap_or(0);
            (s, first as i32)
        } else {
            // A list holds at most 20 of the 51 values, so this ends quickly.
            loop {
                let s = rng.random_range(0..=50);
                if !list.contains(&s) {
                    break (s, -1);
                }
            }
        };
        let items: Vec<String> = list.iter().map(i32::to_string).collect();
        cases.push(format!(
            "{{\"INPUT\": [{}], \"SEARCH\": {search}, \"target\": {target}}}",
            items.join(", ")
        ));
    }
    cases.shuffle(&mut rng);
    json_lines(&cases)
}

/// Keijzer-6 cases: x = 1..=64 as floats, target H(x) = sum of 1/i for i = 1..=x,
/// summed in f64 and rounded once to f32.
#[doc(hidden)]
pub fn generate_keijzer6_cases() -> String {
    let mut h = 0.0f64;
    let cases: Vec<String> = (1..=64)
        .map(|x| {
            h += 1.0 / f64::from(x);
            // Debug prints the shortest text that reads back as the same f32.
            format!("{{\"x\": {:?}, \"target\": {:?}}}", x as f32, h as f32)
        })
        .collect();
    json_lines(&cases)
}

/// 5-bit multiplier cases: case c multiplies a = bits 0-4 by b = bits 5-9 of c; the
/// operands come from the case index, so a case is only its target.
#[doc(hidden)]
pub fn generate_multiplier5_cases() -> String {
    let cases: Vec<String> =
        (0..1024).map(|c: i32| format!("{{\"target\": {}}}", (c & 31) * ((c >> 5) & 31))).collect();
    json_lines(&cases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn cases(name: &str) -> Vec<Value> {
        let text = sources(name).unwrap().cases;
        match serde_json::from_str(text).unwrap() {
            Value::Array(v) => v,
            _ => panic!("cases.json of {name} is not an array"),
        }
    }

    #[test]
    fn shipped_cases_are_what_the_generators_write() {
        assert_eq!(sources("search").unwrap().cases, generate_search_cases(SEARCH_CASES_SEED));
        assert_eq!(sources("keijzer6").unwrap().cases, generate_keijzer6_cases());
        assert_eq!(sources("multiplier5").unwrap().cases, generate_multiplier5_cases());
    }

    #[test]
    fn search_cases_have_the_stated_properties_and_right_answers() {
        let cases = cases("search");
        assert_eq!(cases.len(), 32);
        let mut absent = 0;
        for case in &cases {
            let list: Vec<i64> =
                case["INPUT"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            let search = case["SEARCH"].as_i64().unwrap();
            let target = case["target"].as_i64().unwrap();
            assert!((3..=20).contains(&list.len()));
            assert!(list.iter().all(|v| (0..=50).contains(v)));
            assert!((0..=50).contains(&search));
            let mut expected = -1;
            for (i, v) in list.iter().enumerate().rev() {
                if *v == search {
                    expected = i as i64;
                }
            }
            assert_eq!(target, expected, "case {case}");
            if expected == -1 {
                absent += 1;
            }
        }
        assert_eq!(absent, 16);
    }

    #[test]
    fn keijzer6_targets_are_harmonic_numbers_of_real_x() {
        let cases = cases("keijzer6");
        assert_eq!(cases.len(), 64);
        for (k, case) in cases.iter().enumerate() {
            let x = case["x"].as_f64().unwrap();
            assert_eq!(x, (k + 1) as f64);
            // Summed smallest-first, an independent route to the same number.
            let h: f64 = (1..=k + 1).rev().map(|i| 1.0 / i as f64).sum();
            let t = case["target"].as_f64().unwrap() as f32;
            assert!((f64::from(t) - h).abs() <= h * 1e-7, "x = {x}: {t} vs {h}");
        }
    }

    #[test]
    fn multiplier5_targets_multiply_five_bit_fields_of_the_index() {
        let cases = cases("multiplier5");
        assert_eq!(cases.len(), 1024);
        for (c, case) in cases.iter().enumerate() {
            let a = (c % 32) as i64;
            let b = (c / 32) as i64;
            assert_eq!(case["target"].as_i64().unwrap(), a * b);
        }
    }

    /// Rewrites the shipped cases from the generators:
    /// `cargo test -p gpfarm-gp regenerate_builtin_cases -- --ignored`.
    #[test]
    #[ignore = "rewrites the shipped cases: run by hand after changing a generator"]
    fn regenerate_builtin_cases() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("problems");
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name).join("cases.json"), text).unwrap();
        };
        write("search", generate_search_cases(SEARCH_CASES_SEED));
        write("keijzer6", generate_keijzer6_cases());
        write("multiplier5", generate_multiplier5_cases());
    }
}
