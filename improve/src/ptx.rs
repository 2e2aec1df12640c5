//! A kernel's PTX as an instruction stream that edits can change, and the edits themselves.
//!
//! The original is parsed once ([`Kernel::parse`]): the body of one `.entry` is split into lines,
//! and each instruction at the body's top level gets a stable number, its *id*. An individual is a
//! list of [`Edit`]s naming ids of the original (GEVO's patches on LLVM-IR, here on PTX: delete,
//! copy-insert, move, swap, replace an operand), applied in order by [`Kernel::apply`]. An edit
//! whose instruction an earlier edit deleted does nothing; so does an operand edit whose operand
//! is not of the kind it names. Nothing here checks that a variant is valid PTX: the assembler
//! (nvJitLink on the compile farm) rejects the invalid ones in milliseconds, and they are counted.
//!
//! Registers are typed by their declaration (`.reg .f32 %f<12>;`): an operand is only ever
//! replaced by a register of the same declaration, or an integer immediate by another, so most
//! operand edits assemble. Declarations, labels, comments and the call sequences' nested blocks
//! are never edited.

use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One edit of the original's instruction stream, by the ids of the original's instructions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Edit {
    /// Removes instruction `at`.
    Delete {
        /// The instruction.
        at: u32,
    },
    /// Inserts a copy of instruction `from` before instruction `before`.
    Copy {
        /// The instruction copied.
        from: u32,
        /// Where the copy goes.
        before: u32,
    },
    /// Moves instruction `from` before instruction `before`.
    Move {
        /// The instruction moved.
        from: u32,
        /// Where it goes.
        before: u32,
    },
    /// Swaps instructions `a` and `b`.
    Swap {
        /// One instruction.
        a: u32,
        /// The other.
        b: u32,
    },
    /// Replaces operand `operand` of instruction `at` (0 is the first after the opcode) by
    /// `with`: a register of the same declaration, or an integer immediate for one.
    Operand {
        /// The instruction.
        at: u32,
        /// Which operand.
        operand: u8,
        /// What takes its place.
        with: String,
    },
}

impl std::fmt::Display for Edit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Edit::Delete { at } => write!(f, "delete {at}"),
            Edit::Copy { from, before } => write!(f, "copy {from} before {before}"),
            Edit::Move { from, before } => write!(f, "move {from} before {before}"),
            Edit::Swap { a, b } => write!(f, "swap {a} {b}"),
            Edit::Operand { at, operand, with } => write!(f, "operand {operand} of {at} := {with}"),
        }
    }
}

/// Why PTX could not be taken as an original.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PtxError {
    /// No `.entry` of that name.
    #[error("the PTX has no kernel (.entry) named {0:?}; it has: {1}")]
    NoEntry(String, String),
    /// The entry's body never closes, or has no body.
    #[error("the body of kernel {0:?} is not closed")]
    Unclosed(String),
    /// Nothing to edit.
    #[error("kernel {0:?} has no instructions to edit")]
    Empty(String),
}

/// One line of the kernel's body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    text: String,
    /// The original instruction's id, for an editable instruction (a copy has none).
    id: Option<u32>,
}

/// What an operand is, for operand edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand<'a> {
    /// `%PREFIX N` of a declared register class.
    Register(&'a str),
    /// An integer literal.
    Integer,
    /// Anything else (addresses, special registers, labels, vectors, float literals).
    Other,
}

/// The original PTX of one kernel, parsed for editing.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The kernel's name.
    pub entry: String,
    /// Everything before the body's first line (header, other kernels, the entry's parameters).
    head: String,
    /// The body's lines, between its braces.
    body: Vec<Line>,
    /// Everything from the body's closing brace on.
    tail: String,
    /// Declared register classes: prefix (`%f`) to count (`%f<12>` declares `%f0..%f11`).
    registers: BTreeMap<String, u32>,
    /// Per instruction id: (operand index, register prefix or `None` for an integer) of each
    /// operand an edit may replace.
    replaceable: Vec<Vec<(u8, Option<String>)>>,
}

/// Immediates an integer operand may become.
const INTEGERS: [i64; 9] = [0, 1, 2, -1, 3, 4, 8, 16, 32];

impl Kernel {
    /// Parses the PTX module `ptx` and takes kernel `entry` for editing.
    pub fn parse(ptx: &str, entry: &str) -> Result<Kernel, PtxError> {
        let lines: Vec<&str> = ptx.split_inclusive('\n').collect();
        let is_entry = |l: &str| {
            let t = l.trim_start();
            (t.starts_with(".entry ") || t.contains(" .entry ")) && entry_name(t) == Some(entry)
        };
        let Some(start) = lines.iter().position(|l| is_entry(l)) else {
            let names: Vec<&str> = lines
                .iter()
                .filter(|l| l.contains(".entry "))
                .filter_map(|l| entry_name(l.trim_start()))
                .collect();
            return Err(PtxError::NoEntry(entry.to_string(), names.join(", ")));
        };
        let open = (start..lines.len())
            .find(|&k| lines[k].trim() == "{")
            .ok_or_else(|| PtxError::Unclosed(entry.to_string()))?;
        let mut depth = 1usize;
        let mut close = None;
        for (k, l) in lines.iter().enumerate().skip(open + 1) {
            let t = l.trim();
            depth += t.starts_with('{') as usize;
            if t.starts_with('}') {
                depth -= 1;
                if depth == 0 {
                    close = Some(k);
                    break;
                }
            }
        }
        let close = close.ok_or_else(|| PtxError::Unclosed(entry.to_string()))?;
        let mut body = Vec::new();
        let mut registers = BTreeMap::new();
        let mut depth = 0usize;
        let mut next = 0u32;
        for l in &lines[open + 1..close] {
            let t = l.trim();
            if let Some((prefix, count)) = register_declaration(t) {
                registers.insert(prefix, count);
            }
            let editable = depth == 0 && is_instruction(t);
            if t.starts_with('{') {
                depth += 1;
            }
            if t.starts_with('}') {
                depth = depth.saturating_sub(1);
            }
            let id = editable.then(|| {
                next += 1;
                next - 1
            });
            body.push(Line { text: l.to_string(), id });
        }
        if next == 0 {
            return Err(PtxError::Empty(entry.to_string()));
        }
        let mut kernel = Kernel {
            entry: entry.to_string(),
            head: lines[..=open].concat(),
            body,
            tail: lines[close..].concat(),
            registers,
            replaceable: Vec::new(),
        };
        kernel.replaceable = kernel
            .body
            .iter()
            .filter(|l| l.id.is_some())
            .map(|l| {
                operands(&l.text)
                    .1
                    .iter()
                    .enumerate()
                    .filter_map(|(k, o)| match kernel.classify(o) {
                        Operand::Register(p) if kernel.registers.get(p).is_some_and(|&n| n > 2) => {
                            Some((k as u8, Some(p.to_string())))
                        }
                        Operand::Integer => Some((k as u8, None)),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        Ok(kernel)
    }

    /// How many instructions may be edited.
    pub fn instructions(&self) -> u32 {
        self.replaceable.len() as u32
    }

    /// The original PTX, as parsed.
    pub fn original(&self) -> String {
        self.apply(&[]).0
    }

    /// The PTX with `edits` applied in order, and how many of them changed something.
    pub fn apply(&self, edits: &[Edit]) -> (String, usize) {
        let mut body = self.body.clone();
        let mut applied = 0;
        let find = |body: &[Line], id: u32| body.iter().position(|l| l.id == Some(id));
        for e in edits {
            let done = match *e {
                Edit::Delete { at } => find(&body, at).map(|k| body.remove(k)).is_some(),
                Edit::Copy { from, before } => match (find(&body, from), find(&body, before)) {
                    (Some(f), Some(b)) => {
                        let text = body[f].text.clone();
                        body.insert(b, Line { text, id: None });
                        true
                    }
                    _ => false,
                },
                Edit::Move { from, before } if from != before => {
                    match (find(&body, from), find(&body, before)) {
                        (Some(f), Some(_)) => {
                            let line = body.remove(f);
                            let b = find(&body, before).expect("only `from` was removed");
                            body.insert(b, line);
                            true
                        }
                        _ => false,
                    }
                }
                Edit::Move { .. } => false,
                Edit::Swap { a, b } if a != b => match (find(&body, a), find(&body, b)) {
                    (Some(x), Some(y)) => {
                        body.swap(x, y);
                        true
                    }
                    _ => false,
                },
                Edit::Swap { .. } => false,
                Edit::Operand { at, operand, ref with } => find(&body, at).is_some_and(|k| {
                    match self.replace_operand(&body[k].text, operand, with) {
                        Some(text) => {
                            body[k].text = text;
                            true
                        }
                        None => false,
                    }
                }),
            };
            applied += done as usize;
        }
        let mut out = String::with_capacity(self.head.len() + self.tail.len() + body.len() * 32);
        out.push_str(&self.head);
        for l in &body {
            out.push_str(&l.text);
        }
        out.push_str(&self.tail);
        (out, applied)
    }

    /// A random edit of the original: each kind equally likely, operand edits among the
    /// operands that may be replaced (another kind where there are none).
    pub fn random_edit(&self, rng: &mut impl Rng) -> Edit {
        let n = self.instructions();
        let any = |rng: &mut dyn rand::RngCore| rng.random_range(0..n);
        loop {
            match rng.random_range(0..5) {
                0 => return Edit::Delete { at: any(rng) },
                1 => return Edit::Copy { from: any(rng), before: any(rng) },
                2 => return Edit::Move { from: any(rng), before: any(rng) },
                3 => return Edit::Swap { a: any(rng), b: any(rng) },
                _ => {
                    let at = any(rng);
                    let choices = &self.replaceable[at as usize];
                    if choices.is_empty() {
                        continue;
                    }
                    let (operand, class) = &choices[rng.random_range(0..choices.len())];
                    let with = match class {
                        Some(prefix) => {
                            let count = self.registers[prefix];
                            format!("{prefix}{}", rng.random_range(1..count))
                        }
                        None => INTEGERS[rng.random_range(0..INTEGERS.len())].to_string(),
                    };
                    return Edit::Operand { at, operand: *operand, with };
                }
            }
        }
    }

    fn classify<'a>(&self, operand: &'a str) -> Operand<'a> {
        if operand.parse::<i64>().is_ok() {
            return Operand::Integer;
        }
        let Some(rest) = operand.strip_prefix('%') else { return Operand::Other };
        let digits = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        let prefix_len = 1 + rest.len() - digits.len();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Operand::Other;
        }
        let prefix = &operand[..prefix_len];
        if self.registers.contains_key(prefix) { Operand::Register(prefix) } else { Operand::Other }
    }

    /// `text` with operand `k` replaced by `with`, when both are of one kind (registers of one
    /// declaration, or integers).
    fn replace_operand(&self, text: &str, k: u8, with: &str) -> Option<String> {
        let (prefix, mut ops, suffix) = operands(text);
        let old = ops.get(k as usize)?;
        let fits = match (self.classify(old), self.classify(with)) {
            (Operand::Register(a), Operand::Register(b)) => a == b,
            (Operand::Integer, Operand::Integer) => true,
            _ => false,
        };
        if !fits || old == with {
            return None;
        }
        ops[k as usize] = with.to_string();
        Some(format!("{prefix}{}{suffix}", ops.join(", ")))
    }
}

/// The name of the kernel a `.entry` line declares.
fn entry_name(line: &str) -> Option<&str> {
    let at = line.find(".entry ")? + ".entry ".len();
    let rest = line[at..].trim_start();
    let end = rest.find(|c: char| c == '(' || c.is_whitespace()).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|n| !n.is_empty())
}

/// `(prefix, count)` of a register declaration `.reg .TYPE %PREFIX<COUNT>;`.
fn register_declaration(t: &str) -> Option<(String, u32)> {
    let rest = t.strip_prefix(".reg")?;
    let open = rest.find('<')?;
    let close = rest.find('>')?;
    let name = rest[..open].split_whitespace().last()?;
    if !name.starts_with('%') {
        return None;
    }
    Some((name.to_string(), rest[open + 1..close].trim().parse().ok()?))
}

/// Whether a trimmed body line is an instruction (not a declaration, label, comment or brace).
fn is_instruction(t: &str) -> bool {
    !(t.is_empty()
        || t.starts_with('.')
        || t.starts_with("//")
        || t.starts_with('{')
        || t.starts_with('}')
        || t.ends_with(':'))
        && t.contains(';')
}

/// An instruction line split into what comes before its operands (indent, guard, opcode and
/// the whitespace after it), its operands, and what follows them (`;` and the line's end).
fn operands(line: &str) -> (String, Vec<String>, String) {
    let Some(semi) = line.find(';') else { return (line.to_string(), Vec::new(), String::new()) };
    let (code, suffix) = line.split_at(semi);
    // Past one word and the whitespace after it.
    let word_end = |from: usize| {
        let w = code[from..].find(char::is_whitespace).map_or(code.len(), |k| from + k);
        w + (code[w..].len() - code[w..].trim_start().len())
    };
    let mut ops_at = code.len() - code.trim_start().len();
    if code[ops_at..].starts_with('@') {
        ops_at = word_end(ops_at);
    }
    let ops_at = word_end(ops_at);
    let prefix = code[..ops_at].to_string();
    let list = &code[ops_at..];
    let mut ops = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (k, c) in list.char_indices() {
        match c {
            '[' | '{' | '(' => depth += 1,
            ']' | '}' | ')' => depth -= 1,
            ',' if depth == 0 => {
                ops.push(list[start..k].trim().to_string());
                start = k + 1;
            }
            _ => {}
        }
    }
    if !list[start..].trim().is_empty() {
        ops.push(list[start..].trim().to_string());
    }
    (prefix, ops, suffix.to_string())
}

/// `ptx` with every loop of kernel `entry` bounded: before each branch to a label above it (a
/// back edge) a per-thread counter is stepped, and a thread that takes more than `limit` of them
/// traps. A variant whose loop never ends then faults within milliseconds instead of holding the
/// GPU until its worker is killed (a context whose kernel spins takes the driver long to tear
/// down, and slows every other context meanwhile). The search runs the original and every
/// variant bounded alike; what it writes out and checks on held-out sizes is not bounded. PTX
/// without that kernel is returned as it is.
pub fn bound_loops(ptx: &str, entry: &str, limit: u32) -> String {
    let Ok(kernel) = Kernel::parse(ptx, entry) else { return ptx.to_string() };
    let labels: Vec<(usize, &str)> = kernel
        .body
        .iter()
        .enumerate()
        .filter_map(|(k, l)| l.text.trim().strip_suffix(':').map(|name| (k, name)))
        .collect();
    let mut out = String::with_capacity(ptx.len() + 1024);
    out.push_str(&kernel.head);
    out.push_str(
        "\t.reg .b32 \t%gpfarm_steps;\n\t.reg .pred \t%gpfarm_over;\n\tmov.u32 \t%gpfarm_steps, 0;\n",
    );
    for (k, l) in kernel.body.iter().enumerate() {
        let t = l.text.trim();
        let target = t
            .split_whitespace()
            .skip_while(|w| !w.starts_with("bra"))
            .nth(1)
            .map(|w| w.trim_end_matches(';'));
        let back = target.is_some_and(|name| labels.iter().any(|&(at, label)| label == name && at < k));
        if back {
            out.push_str(&format!(
                "\tadd.u32 \t%gpfarm_steps, %gpfarm_steps, 1;\n\tsetp.gt.u32 \t%gpfarm_over, %gpfarm_steps, {limit};\n\t@%gpfarm_over trap;\n"
            ));
        }
        out.push_str(&l.text);
    }
    out.push_str(&kernel.tail);
    out
}

/// A unified diff of two PTX texts (`original` and `variant`), three lines of context.
pub fn diff(original: &str, variant: &str) -> String {
    similar::TextDiff::from_lines(original, variant)
        .unified_diff()
        .context_radius(3)
        .header("original.ptx", "variant.ptx")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    pub(crate) const PTX: &str = "//
// Generated by NVIDIA NVVM Compiler
.version 9.0
.target sm_90
.address_size 64

\t// .globl\tscale

.visible .entry scale(
\t.param .u64 scale_param_0,
\t.param .u32 scale_param_1
)
{
\t.reg .pred \t%p<2>;
\t.reg .b32 \t%r<6>;
\t.reg .f32 \t%f<3>;
\t.reg .b64 \t%rd<5>;

\tld.param.u64 \t%rd1, [scale_param_0];
\tld.param.u32 \t%r2, [scale_param_1];
\tmov.u32 \t%r3, %ctaid.x;
\tmov.u32 \t%r4, %ntid.x;
\tmad.lo.s32 \t%r1, %r3, %r4, 0;
\tsetp.ge.s32 \t%p1, %r1, %r2;
\t@%p1 bra \t$L__BB0_2;
\tcvta.to.global.u64 \t%rd2, %rd1;
\tmul.wide.s32 \t%rd3, %r1, 4;
\tadd.s64 \t%rd4, %rd2, %rd3;
\tld.global.f32 \t%f1, [%rd4];
\tadd.f32 \t%f2, %f1, %f1;
\tst.global.f32 \t[%rd4], %f2;
\t{ // callseq 0, 0
\tbar.sync \t0;
\t} // callseq 0
$L__BB0_2:
\tret;

}
";

    fn kernel() -> Kernel {
        Kernel::parse(PTX, "scale").unwrap()
    }

    #[test]
    fn the_body_s_top_level_instructions_are_numbered_and_nothing_else() {
        let k = kernel();
        assert_eq!(k.instructions(), 14, "13 before the call sequence, ret after it");
        assert_eq!(k.original(), PTX, "no edits give the original back byte for byte");
        assert_eq!(k.registers.get("%f"), Some(&3));
        assert_eq!(k.registers.get("%rd"), Some(&5));
    }

    #[test]
    fn edits_change_the_instructions_they_name_and_skip_what_is_gone() {
        let k = kernel();
        let (ptx, n) = k.apply(&[Edit::Delete { at: 11 }, Edit::Delete { at: 11 }]);
        assert_eq!(n, 1, "the second delete finds nothing");
        assert!(!ptx.contains("add.f32"));
        let (ptx, n) = k.apply(&[Edit::Swap { a: 10, b: 11 }]);
        assert_eq!(n, 1);
        assert!(ptx.find("add.f32").unwrap() < ptx.find("ld.global.f32").unwrap());
        let (ptx, _) = k.apply(&[Edit::Copy { from: 11, before: 12 }]);
        assert_eq!(ptx.matches("add.f32").count(), 2);
        let (ptx, _) = k.apply(&[Edit::Move { from: 13, before: 0 }]);
        let first = ptx.lines().find(|l| is_instruction(l.trim())).unwrap();
        assert_eq!(first.trim(), "ret;");
        let (ptx, n) = k.apply(&[Edit::Operand { at: 11, operand: 2, with: "%f2".into() }]);
        assert_eq!(n, 1);
        assert!(ptx.contains("\tadd.f32 \t%f2, %f1, %f2;\n"), "{ptx}");
        // A register of another declaration, or an operand that is no register, is left alone.
        let (_, n) = k.apply(&[Edit::Operand { at: 11, operand: 2, with: "%r2".into() }]);
        assert_eq!(n, 0);
        let (_, n) = k.apply(&[Edit::Operand { at: 0, operand: 1, with: "%rd2".into() }]);
        assert_eq!(n, 0, "an address is not replaced");
        let (ptx, n) = k.apply(&[Edit::Operand { at: 4, operand: 3, with: "8".into() }]);
        assert_eq!(n, 1);
        assert!(ptx.contains("mad.lo.s32 \t%r1, %r3, %r4, 8;"));
    }

    #[test]
    fn a_guarded_instruction_keeps_its_guard_and_its_operands_are_found() {
        let (prefix, ops, suffix) = operands("\t@!%p1 bra.uni \t$L__BB0_2;\n");
        assert_eq!(prefix, "\t@!%p1 bra.uni \t");
        assert_eq!(ops, vec!["$L__BB0_2"]);
        assert_eq!(suffix, ";\n");
        let (_, ops, _) = operands("\tst.global.v2.f32 \t[%rd4+8], {%f1, %f2};\n");
        assert_eq!(ops, vec!["[%rd4+8]", "{%f1, %f2}"]);
    }

    #[test]
    fn random_edits_are_of_every_kind_and_name_existing_instructions() {
        let k = kernel();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut kinds = std::collections::HashSet::new();
        let (mut operand_edits, mut applied) = (0, 0);
        for _ in 0..500 {
            let e = k.random_edit(&mut rng);
            kinds.insert(std::mem::discriminant(&e));
            let named = match &e {
                Edit::Delete { at } | Edit::Operand { at, .. } => vec![*at],
                Edit::Copy { from, before } | Edit::Move { from, before } => vec![*from, *before],
                Edit::Swap { a, b } => vec![*a, *b],
            };
            assert!(named.iter().all(|&id| id < k.instructions()), "{e}");
            if matches!(e, Edit::Operand { .. }) {
                operand_edits += 1;
                applied += k.apply(std::slice::from_ref(&e)).1;
            }
        }
        // An operand edit misses only when it draws the operand it replaces.
        assert!(applied * 10 >= operand_edits * 6, "{applied} of {operand_edits} operand edits applied");
        assert_eq!(kinds.len(), 5);
    }

    #[test]
    fn only_back_edges_are_bounded() {
        let looped = PTX.replace("$L__BB0_2:\n\tret;", "$L__BB0_2:\n\t@%p1 bra \t$L__BB0_2;\n\tret;");
        let bounded = bound_loops(&looped, "scale", 1000);
        assert_eq!(bounded.matches("trap;").count(), 1, "the forward branch is left alone");
        let at = bounded.find("@%gpfarm_over trap;").unwrap();
        assert!(at < bounded.rfind("bra \t$L__BB0_2").unwrap() && at > bounded.find("$L__BB0_2:").unwrap());
        assert!(bounded.contains("setp.gt.u32 \t%gpfarm_over, %gpfarm_steps, 1000;"));
        assert_eq!(bound_loops(PTX, "scale", 10).matches("trap;").count(), 0);
        assert_eq!(bound_loops(PTX, "nope", 10), PTX);
    }

    #[test]
    fn a_missing_kernel_is_named_with_the_ones_there_are() {
        let e = Kernel::parse(PTX, "nope").unwrap_err();
        assert_eq!(e, PtxError::NoEntry("nope".into(), "scale".into()));
        assert!(diff(PTX, &kernel().apply(&[Edit::Delete { at: 11 }]).0).contains("-\tadd.f32"));
    }
}
