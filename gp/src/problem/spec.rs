//! The contents of `problem.toml` and the rules that make one consistent. Must never
//! read files or look at the cases: it is the declaration every other part trusts.

use serde::{Deserialize, Serialize};

use crate::fitness::FitnessKind;

/// What a phenotype is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One C expression; its value, converted to the output's type, is the single output.
    Expression,
    /// A block of C statements that assign the outputs.
    Statements,
}

/// Type of a scalar variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScalarType {
    /// 32-bit signed int.
    Int,
    /// 32-bit float.
    Float,
}

impl ScalarType {
    /// The C spelling.
    pub fn c_name(self) -> &'static str {
        match self {
            ScalarType::Int => "int",
            ScalarType::Float => "float",
        }
    }
}

/// Type of a per-case input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputType {
    /// 32-bit signed int.
    #[serde(rename = "int")]
    Int,
    /// 32-bit float.
    #[serde(rename = "float")]
    Float,
    /// Array of ints of per-case length (at most `max_len`), exposed with its length.
    #[serde(rename = "int[]")]
    IntArray,
}

/// One `[[inputs]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Name the phenotype uses.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: InputType,
    /// For `int[]`: the name of the int variable holding the case's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_name: Option<String>,
    /// For `int[]`: the most elements any case may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_len: Option<usize>,
}

/// One `[[case_bits]]` entry: a read-only int equal to `(case_index >> bit) & 1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseBitSpec {
    /// Name the phenotype uses.
    pub name: String,
    /// Bit of the case index, 0..=30.
    pub bit: u32,
}

/// One `[[locals]]` or `[[outputs]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VarSpec {
    /// Name the phenotype uses.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: ScalarType,
}

/// The `[target]` table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// Type of the target values in `cases.json`.
    #[serde(rename = "type")]
    pub ty: ScalarType,
    /// For `bit_errors`: how many low bits of the target count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits: Option<u32>,
}

/// `problem.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemSpec {
    /// Short name.
    pub name: String,
    /// One paragraph for people.
    #[serde(default)]
    pub description: String,
    /// Start rule of the grammar; the first rule when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// What a phenotype is.
    pub kind: Kind,
    /// How outputs are scored.
    pub fitness: FitnessKind,
    /// Per-case inputs, in kernel-parameter order.
    #[serde(default)]
    pub inputs: Vec<InputSpec>,
    /// Ints derived from bits of the case index (not kernel parameters).
    #[serde(default)]
    pub case_bits: Vec<CaseBitSpec>,
    /// Variables the phenotype may use freely; zero before it runs.
    #[serde(default)]
    pub locals: Vec<VarSpec>,
    /// Values the phenotype produces, in kernel-parameter order.
    pub outputs: Vec<VarSpec>,
    /// What outputs are compared with.
    pub target: TargetSpec,
    /// Loop iterations a program may take in one case (tests of a loop's condition) before it
    /// fails with the worst fitness, on every route; `gpfarm evolve --max-steps` overrides it.
    #[serde(default = "default_max_steps")]
    pub max_steps: u64,
    /// Functions of floats the grammar may call beside the math functions (operators of the
    /// user's own): each call is the body with the arguments in place of the parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<FunctionSpec>,
}

/// `[[functions]]`: `name(params...)` is `body`, an expression over the parameters (floats),
/// constants, the math functions and the functions declared before it; its value is converted
/// to float. The compiled routes see it as a `__device__` function in the unit's preamble, the
/// interpreter, PTX route and CPU evaluator inline it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    /// The name calls use.
    pub name: String,
    /// Its parameters' names, one per argument (1 to 4).
    pub params: Vec<String>,
    /// Its value: a C expression over `params`.
    pub body: String,
}

/// The most parameters a declared function may take.
pub const MAX_FUNCTION_PARAMS: usize = 4;

impl FunctionSpec {
    /// Its CUDA C definition, for a unit's preamble.
    pub fn definition(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|p| format!("float {p}")).collect();
        format!(
            "__device__ __forceinline__ float {}({}) {{ return (float)({}); }}\n",
            self.name,
            params.join(", "),
            self.body
        )
    }
}

/// Loop iterations allowed per case before a program is declared runaway, unless
/// `problem.toml` says otherwise (`max_steps`).
pub const DEFAULT_MAX_STEPS: u64 = 1_000_000;

fn default_max_steps() -> u64 {
    DEFAULT_MAX_STEPS
}

/// The math functions a phenotype may call, each also in its float form (the name followed by
/// `f`, as `sinf`). The CPU evaluator's parser knows exactly these; no variable may take their
/// names. All are CUDA's but `pdiv` (protected division), which every NVRTC unit defines
/// ([`crate::program::MATH_HELPERS`]).
pub const MATH_FUNCTIONS: &[&str] =
    &["sin", "cos", "exp", "log", "sqrt", "fabs", "tanh", "pow", "fmin", "fmax", "pdiv"];

/// True for the name of a math function a phenotype may call, in either form.
pub fn is_math_function(name: &str) -> bool {
    MATH_FUNCTIONS.contains(&name.strip_suffix('f').unwrap_or(name))
}

/// Names a phenotype can never use: the kernel's own identifiers and C/C++ words.
const RESERVED: &[&str] = &[
    "c",
    "NCASES",
    "blockIdx",
    "blockDim",
    "threadIdx",
    "gridDim",
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "int",
    "long",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "class",
    "new",
    "delete",
    "this",
    "template",
    "namespace",
];

/// A problem in `spec`: the field path and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecIssue {
    /// The field, as `functions[1].body`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for SpecIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn issue(field: impl Into<String>, message: impl Into<String>) -> SpecIssue {
    SpecIssue { field: field.into(), message: message.into() }
}

/// True for a C identifier.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

impl ProblemSpec {
    /// Checks the rules README.md states; the first broken one is reported.
    pub(crate) fn validate(&self) -> Result<(), SpecIssue> {
        if self.name.trim().is_empty() {
            return Err(issue("name", "must not be empty"));
        }
        if self.max_steps == 0 {
            return Err(issue("max_steps", "must be at least 1"));
        }
        let mut names: Vec<(String, String)> = Vec::new();
        for (i, input) in self.inputs.iter().enumerate() {
            let field = format!("inputs[{i}]");
            names.push((input.name.clone(), format!("{field}.name")));
            match input.ty {
                InputType::IntArray => {
                    let Some(len_name) = &input.length_name else {
                        return Err(issue(
                            format!("{field}.length_name"),
                            "an `int[]` input needs `length_name`, the variable holding its length",
                        ));
                    };
                    names.push((len_name.clone(), format!("{field}.length_name")));
                    match input.max_len {
                        Some(n) if n > i32::MAX as usize => {
                            return Err(issue(
                                format!("{field}.max_len"),
                                format!("{n} is more than the {} elements a kernel can index", i32::MAX),
                            ));
                        }
                        Some(n) if n >= 1 => {}
                        _ => {
                            return Err(issue(
                                format!("{field}.max_len"),
                                "an `int[]` input needs `max_len` >= 1",
                            ));
                        }
                    }
                }
                InputType::Int | InputType::Float => {
                    if input.length_name.is_some() || input.max_len.is_some() {
                        return Err(issue(
                            field,
                            "`length_name` and `max_len` belong to `int[]` inputs only",
                        ));
                    }
                }
            }
        }
        for (i, b) in self.case_bits.iter().enumerate() {
            names.push((b.name.clone(), format!("case_bits[{i}].name")));
            if b.bit > 30 {
                return Err(issue(format!("case_bits[{i}].bit"), "must be in 0..=30"));
            }
        }
        for (i, v) in self.locals.iter().enumerate() {
            names.push((v.name.clone(), format!("locals[{i}].name")));
        }
        for (i, v) in self.outputs.iter().enumerate() {
            names.push((v.name.clone(), format!("outputs[{i}].name")));
        }
        for (i, f) in self.functions.iter().enumerate() {
            names.push((f.name.clone(), format!("functions[{i}].name")));
            let field = format!("functions[{i}].params");
            if f.params.is_empty() || f.params.len() > MAX_FUNCTION_PARAMS {
                return Err(issue(field, format!("a function takes 1 to {MAX_FUNCTION_PARAMS} parameters")));
            }
            for (k, p) in f.params.iter().enumerate() {
                if !is_identifier(p) || RESERVED.contains(&p.as_str()) || is_math_function(p) {
                    return Err(issue(&field, format!("`{p}` cannot be a parameter's name")));
                }
                if f.params[..k].contains(p) {
                    return Err(issue(&field, format!("`{p}` is named twice")));
                }
            }
        }
        for (k, (name, field)) in names.iter().enumerate() {
            if !is_identifier(name) {
                return Err(issue(field, format!("`{name}` is not a C identifier")));
            }
            if RESERVED.contains(&name.as_str())
                || name.starts_with("in_")
                || name.starts_with("out_")
                || name.starts_with("gp_")
                || is_math_function(name)
            {
                return Err(issue(
                    field,
                    format!(
                        "`{name}` is reserved (kernel identifiers, C keywords, math functions, and the prefixes in_, out_, gp_): rename it"
                    ),
                ));
            }
            if let Some((_, other)) = names[..k].iter().find(|(n, _)| n == name) {
                return Err(issue(
                    field,
                    format!("`{name}` is already declared by {other}: names must be unique"),
                ));
            }
        }
        if self.outputs.is_empty() {
            return Err(issue("outputs", "declare at least one output"));
        }
        if self.kind == Kind::Expression && self.outputs.len() != 1 {
            return Err(issue(
                "outputs",
                "an `expression` problem has exactly one output, which receives the expression's value",
            ));
        }
        match self.fitness {
            FitnessKind::BitErrors => {
                if self.target.ty != ScalarType::Int {
                    return Err(issue("target.type", "`bit_errors` needs an int target"));
                }
                let Some(bits) = self.target.bits else {
                    return Err(issue(
                        "target.bits",
                        "`bit_errors` needs `bits`, the number of target bits compared",
                    ));
                };
                if bits as usize != self.outputs.len() || !(1..=32).contains(&bits) {
                    return Err(issue(
                        "target.bits",
                        format!(
                            "must equal the number of outputs ({}), each giving one bit, and be in 1..=32",
                            self.outputs.len()
                        ),
                    ));
                }
                if let Some(i) = self.outputs.iter().position(|o| o.ty != ScalarType::Int) {
                    return Err(issue(format!("outputs[{i}].type"), "`bit_errors` outputs must be int"));
                }
            }
            FitnessKind::Rmse | FitnessKind::Correct => {
                if self.target.bits.is_some() {
                    return Err(issue("target.bits", "only `bit_errors` uses `bits`"));
                }
                if self.outputs.len() != 1 {
                    return Err(issue(
                        "outputs",
                        "`rmse` and `correct` compare exactly one output with the target",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Mask of the target bits `bit_errors` compares (all ones for other kinds).
    pub fn bit_mask(&self) -> u32 {
        match self.target.bits {
            Some(b) if b < 32 => (1u32 << b) - 1,
            _ => u32::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_in_the_readme_uses_the_real_field_names() {
        let readme = include_str!("../../problems/README.md");
        let start = readme.find("```toml\n").expect("README has a toml block") + 8;
        let len = readme[start..].find("```").expect("toml block is closed");
        let spec: ProblemSpec = toml::from_str(&readme[start..start + len]).unwrap();
        assert_eq!(spec.inputs.len(), 2);
        assert_eq!(spec.inputs[1].ty, InputType::IntArray);
        assert_eq!(spec.case_bits.len(), 1);
        assert_eq!(spec.target.bits, Some(10));
    }

    #[test]
    fn bit_mask_covers_the_declared_bits() {
        let spec: ProblemSpec = toml::from_str(
            "name = \"m\"\nkind = \"statements\"\nfitness = \"bit_errors\"\noutputs = []\n[target]\ntype = \"int\"\nbits = 10\n",
        )
        .unwrap();
        assert_eq!(spec.bit_mask(), 0x3FF);
    }

    #[test]
    fn identifiers_follow_c() {
        assert!(is_identifier("_a1"));
        assert!(!is_identifier("1a"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("a-b"));
    }
}
