//! A kernel directory: the user's CUDA C and `kernel.toml`, the harness that says how to run it.
//!
//! ```toml
//! source = "kernel.cu"            # default
//! kernel = "matmul"               # the extern "C" __global__ to improve
//! flags = ["--use_fast_math"]     # NVRTC options for the original (optional)
//!
//! [sizes]
//! search = 128                    # the size n the search runs at
//! validate = [256]                # held-out sizes the best variants are checked at
//!
//! [launch]
//! grid = ["(n + 15) / 16", "(n + 15) / 16"]   # up to 3 dimensions; integers or expressions in n
//! block = [16, 16]
//! shared_bytes = 0                # dynamic shared memory (optional)
//!
//! [[arg]]                         # the kernel's arguments, in its order
//! name = "a"
//! type = "f32"                    # f32 f64 i32 u32 i64 u8
//! len = "n * n"                   # a buffer of that many elements
//! fill = { uniform = [-1.0, 1.0] }   # zero (default), uniform, int, expr = "i % n", file = "a.bin"
//!
//! [[arg]]
//! name = "c"
//! type = "f32"
//! len = "n * n"
//! output = true                   # compared with the original's
//!
//! [[arg]]
//! name = "n"
//! type = "i32"
//! value = "n"                     # a scalar: an expression in n
//!
//! [error]
//! measure = "max_rel"             # exact, max_abs, max_rel
//! tolerance = 1e-5                # the most a variant may differ and still count
//!
//! [timing]
//! repeats = 20                    # timed launches of each variant, each beside the original's
//! loop_limit = 65536              # loop iterations a thread may run in the search (the default)
//! ```
//!
//! Expressions are integer arithmetic (`+ - * / %`, parentheses) over `n` (and `i`, the element's
//! index, in `fill.expr`). Every rule is checked when the directory is loaded, with one line
//! that names the file, the field and the fault.

use std::path::{Path, PathBuf};

use evalexpr::{ContextWithMutableVariables, HashMapContext, Node, Value};
use gpfarm_protocol::worker::{ElemType, ErrorMeasure, KernelJob, WireArg};
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use thiserror::Error;

/// The harness file's name in a kernel directory.
pub const HARNESS: &str = "kernel.toml";
/// The most elements one buffer may have.
pub const MAX_ELEMENTS: u64 = 1 << 28;

/// What is wrong with a kernel directory.
#[derive(Debug, Error)]
pub enum HarnessError {
    /// A file could not be read.
    #[error("{file}: cannot read it: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// `kernel.toml` does not parse or has unknown or missing fields.
    #[error("{file}: {message}")]
    Toml {
        /// The file.
        file: String,
        /// The parser's message, on one line.
        message: String,
    },
    /// A field breaks a rule.
    #[error("{file}: `{field}`: {message}")]
    Field {
        /// The file.
        file: String,
        /// The field.
        field: String,
        /// The rule.
        message: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default = "default_source")]
    source: PathBuf,
    kernel: String,
    #[serde(default)]
    flags: Vec<String>,
    sizes: RawSizes,
    launch: RawLaunch,
    #[serde(rename = "arg")]
    args: Vec<RawArg>,
    error: RawError,
    #[serde(default)]
    timing: RawTiming,
}

fn default_source() -> PathBuf {
    PathBuf::from("kernel.cu")
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSizes {
    search: u64,
    #[serde(default)]
    validate: Vec<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Expr {
    Int(i64),
    Text(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    grid: Vec<Expr>,
    block: Vec<Expr>,
    #[serde(default)]
    shared_bytes: Option<Expr>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArg {
    name: String,
    #[serde(rename = "type")]
    elem: ElemType,
    len: Option<Expr>,
    value: Option<Expr>,
    #[serde(default)]
    fill: Fill,
    #[serde(default)]
    output: bool,
}

/// How a buffer is filled before every launch.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Fill {
    /// Zeros.
    #[default]
    Zero,
    /// Uniform random reals in `[lo, hi)` (seeded), converted to the buffer's type.
    Uniform([f64; 2]),
    /// Uniform random integers in `[lo, hi]` (seeded).
    Int([i64; 2]),
    /// An integer expression in `i` (the element's index) and `n`.
    Expr(String),
    /// A file of raw little-endian elements, in the kernel directory; at least `len` of them.
    File(PathBuf),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawError {
    measure: ErrorMeasure,
    #[serde(default)]
    tolerance: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTiming {
    #[serde(default = "default_repeats")]
    repeats: u32,
    #[serde(default = "default_loop_limit")]
    loop_limit: u32,
}

impl Default for RawTiming {
    fn default() -> Self {
        RawTiming { repeats: default_repeats(), loop_limit: default_loop_limit() }
    }
}

fn default_loop_limit() -> u32 {
    1 << 16
}

fn default_repeats() -> u32 {
    20
}

/// One argument of the kernel.
#[derive(Debug, Clone)]
pub enum Arg {
    /// A buffer of `len` elements.
    Buffer {
        /// Its name.
        name: String,
        /// Its elements' type.
        elem: ElemType,
        /// Its length, in `n`.
        len: Node,
        /// Its contents.
        fill: Fill,
        /// Whether it is compared.
        output: bool,
    },
    /// A scalar.
    Scalar {
        /// Its name.
        name: String,
        /// Its type.
        elem: ElemType,
        /// Its value, in `n`.
        value: Node,
    },
}

/// Grid, block, dynamic shared bytes and each buffer's length, at one size.
type Shape = ([u32; 3], [u32; 3], u32, Vec<u64>);

/// A loaded, checked kernel directory.
#[derive(Debug, Clone)]
pub struct KernelDir {
    /// The directory.
    pub dir: PathBuf,
    /// The CUDA C.
    pub source: String,
    /// The source file's name (for messages).
    pub source_name: String,
    /// The kernel to improve.
    pub kernel: String,
    /// NVRTC options for the original.
    pub flags: Vec<String>,
    /// The search size.
    pub search: u64,
    /// Held-out sizes.
    pub validate: Vec<u64>,
    grid: Vec<Node>,
    block: Vec<Node>,
    shared_bytes: Option<Node>,
    /// The arguments, in the kernel's order.
    pub args: Vec<Arg>,
    /// How outputs are compared.
    pub measure: ErrorMeasure,
    /// The most error a variant may have and count as correct.
    pub tolerance: f64,
    /// Timed launches per variant.
    pub repeats: u32,
    /// Loop iterations (back edges taken) one thread of a variant may run during the search
    /// before it traps ([`crate::ptx::bound_loops`]).
    pub loop_limit: u32,
}

impl KernelDir {
    /// Loads and checks `dir`.
    pub fn load(dir: &Path) -> Result<KernelDir, HarnessError> {
        let path = dir.join(HARNESS);
        let file = path.display().to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|source| HarnessError::Read { file: file.clone(), source })?;
        let raw: Raw = toml::from_str(&text).map_err(|e| HarnessError::Toml {
            file: file.clone(),
            message: e.to_string().lines().filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join(" "),
        })?;
        let field = |field: &str, message: String| HarnessError::Field {
            file: file.clone(),
            field: field.into(),
            message,
        };
        let source_path = dir.join(&raw.source);
        let source = std::fs::read_to_string(&source_path)
            .map_err(|source| HarnessError::Read { file: source_path.display().to_string(), source })?;
        if raw.kernel.is_empty() || !raw.kernel.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(field("kernel", format!("{:?} is not a C identifier", raw.kernel)));
        }
        if !source.contains(&raw.kernel) {
            return Err(field(
                "kernel",
                format!("{} does not mention {:?}", raw.source.display(), raw.kernel),
            ));
        }
        if raw.sizes.search == 0 || raw.sizes.validate.contains(&0) {
            return Err(field("sizes", "sizes are at least 1".into()));
        }
        let compile = |name: &str, e: &Expr| -> Result<Node, HarnessError> {
            let text = match e {
                Expr::Int(v) => v.to_string(),
                Expr::Text(t) => t.clone(),
            };
            evalexpr::build_operator_tree::<evalexpr::DefaultNumericTypes>(&text)
                .map_err(|err| field(name, format!("{text:?}: {err}")))
        };
        let dims = |name: &str, v: &[Expr]| -> Result<Vec<Node>, HarnessError> {
            if v.is_empty() || v.len() > 3 {
                return Err(field(name, format!("{} dimensions: give 1 to 3", v.len())));
            }
            v.iter().map(|e| compile(name, e)).collect()
        };
        let grid = dims("launch.grid", &raw.launch.grid)?;
        let block = dims("launch.block", &raw.launch.block)?;
        let shared_bytes =
            raw.launch.shared_bytes.as_ref().map(|e| compile("launch.shared_bytes", e)).transpose()?;
        if raw.args.is_empty() {
            return Err(field("arg", "the kernel has no arguments: nothing to compare".into()));
        }
        let mut args = Vec::with_capacity(raw.args.len());
        for (k, a) in raw.args.iter().enumerate() {
            let at = format!("arg[{k}] ({})", a.name);
            if raw.args[..k].iter().any(|b| b.name == a.name) {
                return Err(field(&at, "a second argument of this name".into()));
            }
            args.push(match (&a.len, &a.value) {
                (Some(len), None) => {
                    if let Fill::File(f) = &a.fill
                        && !dir.join(f).is_file()
                    {
                        return Err(field(&at, format!("fill file {} is not there", f.display())));
                    }
                    if let Fill::Expr(e) = &a.fill {
                        evalexpr::build_operator_tree::<evalexpr::DefaultNumericTypes>(e)
                            .map_err(|err| field(&at, format!("fill {e:?}: {err}")))?;
                    }
                    Arg::Buffer {
                        name: a.name.clone(),
                        elem: a.elem,
                        len: compile(&at, len)?,
                        fill: a.fill.clone(),
                        output: a.output,
                    }
                }
                (None, Some(value)) => {
                    if a.output || a.fill != Fill::Zero {
                        return Err(field(&at, "a scalar (`value`) has no `fill` and is no `output`".into()));
                    }
                    Arg::Scalar { name: a.name.clone(), elem: a.elem, value: compile(&at, value)? }
                }
                _ => return Err(field(&at, "give either `len` (a buffer) or `value` (a scalar)".into())),
            });
        }
        if !raw.args.iter().any(|a| a.output) {
            return Err(field("arg", "no argument is an `output`: nothing to compare".into()));
        }
        if raw.error.tolerance.is_nan() || raw.error.tolerance < 0.0 {
            return Err(field("error.tolerance", "at least 0".into()));
        }
        if raw.timing.repeats == 0 || raw.timing.repeats > 10_000 {
            return Err(field("timing.repeats", "1 to 10,000".into()));
        }
        let kernel_dir = KernelDir {
            dir: dir.to_path_buf(),
            source,
            source_name: raw.source.display().to_string(),
            kernel: raw.kernel,
            flags: raw.flags,
            search: raw.sizes.search,
            validate: raw.sizes.validate,
            grid,
            block,
            shared_bytes,
            args,
            measure: raw.error.measure,
            tolerance: raw.error.tolerance,
            repeats: raw.timing.repeats,
            loop_limit: raw.timing.loop_limit,
        };
        // Every size must give a launch and buffers that make sense.
        for &n in std::iter::once(&kernel_dir.search).chain(&kernel_dir.validate) {
            kernel_dir.shape(n).map_err(|m| field("sizes", format!("at n = {n}: {m}")))?;
        }
        Ok(kernel_dir)
    }

    /// Grid, block, shared bytes and each buffer's length at size `n`.
    fn shape(&self, n: u64) -> Result<Shape, String> {
        let dim = |nodes: &[Node], what: &str| -> Result<[u32; 3], String> {
            let mut out = [1u32; 3];
            for (k, node) in nodes.iter().enumerate() {
                let v = eval(node, n, None)?;
                out[k] = u32::try_from(v).ok().filter(|&v| v >= 1).ok_or(format!("{what}[{k}] is {v}"))?;
            }
            Ok(out)
        };
        let grid = dim(&self.grid, "grid")?;
        let block = dim(&self.block, "block")?;
        if block.iter().map(|&b| b as u64).product::<u64>() > 1024 {
            return Err(format!("a block of {block:?} threads is over 1024"));
        }
        let shared = match &self.shared_bytes {
            Some(node) => {
                u32::try_from(eval(node, n, None)?).map_err(|_| "shared_bytes is out of range".to_string())?
            }
            None => 0,
        };
        let mut lens = Vec::new();
        for a in &self.args {
            if let Arg::Scalar { name, value, .. } = a {
                value.eval_with_context(&context(n, None)).map_err(|e| format!("scalar {name}: {e}"))?;
            }
            if let Arg::Buffer { name, len, .. } = a {
                let v = eval(len, n, None)?;
                let v = u64::try_from(v).ok().filter(|&v| (1..=MAX_ELEMENTS).contains(&v));
                lens.push(v.ok_or(format!("buffer {name} would have {v:?} elements (1 to {MAX_ELEMENTS})"))?);
            }
        }
        Ok((grid, block, shared, lens))
    }

    /// The job at size `n`, inputs drawn from `seed`, with the original's CUBIN `original`.
    pub fn job(&self, n: u64, seed: u64, original: Vec<u8>) -> Result<KernelJob, String> {
        let (grid, block, shared_bytes, lens) = self.shape(n)?;
        let mut lens = lens.into_iter();
        let mut args = Vec::with_capacity(self.args.len());
        for (k, a) in self.args.iter().enumerate() {
            args.push(match a {
                Arg::Buffer { elem, fill, output, name, .. } => {
                    let len = lens.next().expect("one per buffer") as usize;
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                        seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    );
                    let data = self
                        .fill(*elem, fill, len, n, &mut rng)
                        .map_err(|e| format!("buffer {name}: {e}"))?;
                    WireArg::Buffer { elem: *elem, data, output: *output }
                }
                Arg::Scalar { elem, value, .. } => {
                    let v = value.eval_with_context(&context(n, None)).map_err(|e| e.to_string())?;
                    WireArg::Scalar { elem: *elem, bits: scalar_bits(*elem, &v)? }
                }
            });
        }
        Ok(KernelJob {
            original,
            entry: self.kernel.clone(),
            args,
            grid,
            block,
            shared_bytes,
            measure: self.measure,
            repeats: self.repeats,
        })
    }

    fn fill(
        &self,
        elem: ElemType,
        fill: &Fill,
        len: usize,
        n: u64,
        rng: &mut impl Rng,
    ) -> Result<Vec<u8>, String> {
        let size = elem.size();
        let mut out = Vec::with_capacity(len * size);
        match fill {
            Fill::Zero => out.resize(len * size, 0),
            Fill::Uniform([lo, hi]) => {
                for _ in 0..len {
                    push(&mut out, elem, *lo + (*hi - *lo) * rng.random::<f64>());
                }
            }
            Fill::Int([lo, hi]) => {
                for _ in 0..len {
                    push(&mut out, elem, rng.random_range(*lo..=*hi) as f64);
                }
            }
            Fill::Expr(e) => {
                let node = evalexpr::build_operator_tree::<evalexpr::DefaultNumericTypes>(e)
                    .map_err(|err| err.to_string())?;
                let mut ctx = context(n, Some(0));
                for i in 0..len {
                    ctx.set_value("i".into(), Value::Int(i as i64)).map_err(|e| e.to_string())?;
                    let v = node.eval_with_context(&ctx).map_err(|e| e.to_string())?;
                    push(&mut out, elem, v.as_number().map_err(|e| e.to_string())?);
                }
            }
            Fill::File(f) => {
                let path = self.dir.join(f);
                let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                if bytes.len() < len * size {
                    return Err(format!(
                        "{} has {} bytes, {} needed",
                        path.display(),
                        bytes.len(),
                        len * size
                    ));
                }
                out.extend_from_slice(&bytes[..len * size]);
            }
        }
        Ok(out)
    }
}

fn context(n: u64, i: Option<i64>) -> HashMapContext {
    let mut ctx = HashMapContext::new();
    let _ = ctx.set_value("n".into(), Value::Int(n as i64));
    if let Some(i) = i {
        let _ = ctx.set_value("i".into(), Value::Int(i));
    }
    ctx
}

fn eval(node: &Node, n: u64, i: Option<i64>) -> Result<i64, String> {
    match node.eval_with_context(&context(n, i)).map_err(|e| e.to_string())? {
        Value::Int(v) => Ok(v),
        Value::Float(v) if v.fract() == 0.0 => Ok(v as i64),
        v => Err(format!("{node} is {v}, not an integer")),
    }
}

/// One element, converted to `elem`, appended little-endian.
fn push(out: &mut Vec<u8>, elem: ElemType, v: f64) {
    match elem {
        ElemType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        ElemType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        ElemType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        ElemType::U32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
        ElemType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        ElemType::U8 => out.push(v as u8),
    }
}

fn scalar_bits(elem: ElemType, v: &Value) -> Result<u64, String> {
    let x = v.as_number().map_err(|e| e.to_string())?;
    Ok(match elem {
        ElemType::F32 => (x as f32).to_bits() as u64,
        ElemType::F64 => x.to_bits(),
        ElemType::I32 => (x as i32) as u32 as u64,
        ElemType::U32 => (x as u32) as u64,
        ElemType::I64 => (x as i64) as u64,
        ElemType::U8 => (x as u8) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(toml: &str) -> (tempfile::TempDir, Result<KernelDir, HarnessError>) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("kernel.cu"), "extern \"C\" __global__ void k(float* a, int n) {}")
            .unwrap();
        std::fs::write(d.path().join(HARNESS), toml).unwrap();
        let r = KernelDir::load(d.path());
        (d, r)
    }

    const GOOD: &str = r#"
kernel = "k"
[sizes]
search = 100
validate = [300]
[launch]
grid = ["(n + 63) / 64"]
block = [64]
[[arg]]
name = "a"
type = "f32"
len = "n"
fill = { expr = "i % 7" }
output = true
[[arg]]
name = "n"
type = "i32"
value = "n"
[error]
measure = "exact"
"#;

    #[test]
    fn a_harness_gives_a_job_at_any_size() {
        let (_d, k) = dir(GOOD);
        let k = k.unwrap();
        let job = k.job(100, 1, vec![1, 2]).unwrap();
        assert_eq!(job.grid, [2, 1, 1]);
        assert_eq!(job.block, [64, 1, 1]);
        let WireArg::Buffer { data, output, .. } = &job.args[0] else { panic!() };
        assert!(output);
        assert_eq!(data.len(), 400);
        assert_eq!(f32::from_le_bytes(data[36..40].try_into().unwrap()), 2.0, "element 9 is 9 % 7");
        assert_eq!(job.args[1], WireArg::Scalar { elem: ElemType::I32, bits: 100 });
        assert_eq!(k.job(300, 1, vec![]).unwrap().grid, [5, 1, 1]);
        assert_eq!(k.repeats, 20);
    }

    #[test]
    fn each_broken_rule_is_one_line_naming_its_field() {
        let cases = [
            (GOOD.replace("kernel = \"k\"", "kernel = \"q\""), "`kernel`"),
            (GOOD.replace("block = [64]", "block = [2048]"), "over 1024"),
            (GOOD.replace("output = true", ""), "no argument is an `output`"),
            (GOOD.replace("value = \"n\"", "value = \"n +\""), "scalar n"),
            (GOOD.replace("measure = \"exact\"", "measure = \"close\""), "kernel.toml"),
            (GOOD.replace("len = \"n\"", "len = \"n - 100\""), "at n = 100"),
            (GOOD.replace("search = 100", "search = 0"), "`sizes`"),
        ];
        for (toml, want) in cases {
            let (_d, r) = dir(&toml);
            let e = r.unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{want}: {e}");
        }
    }

    #[test]
    fn random_fills_follow_the_seed() {
        let (_d, k) = dir(&GOOD.replace("fill = { expr = \"i % 7\" }", "fill = { uniform = [-1.0, 1.0] }"));
        let k = k.unwrap();
        let a = k.job(100, 1, vec![]).unwrap();
        assert_eq!(a, k.job(100, 1, vec![]).unwrap());
        assert_ne!(a.args[0], k.job(100, 2, vec![]).unwrap().args[0]);
    }
}
