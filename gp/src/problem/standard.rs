//! The standard harness: the `template.cu` a problem's `problem.toml` implies when the kernel
//! does nothing but load the case's inputs, start locals and outputs at zero, run the
//! phenotype and store the outputs. Code generators that write the harness themselves (the
//! PTX route) can run a problem only if its template is this one, which
//! [`compare_with_standard`] decides. Must never accept a template that computes anything
//! the standard one does not: the comparison is token for token, ignoring only comments and
//! spacing.

use std::fmt;

use super::spec::{InputType, Kind, ProblemSpec, ScalarType};
use super::template::{KERNEL_MARKER, KERNEL_PLACEHOLDER, PHENOTYPE_PLACEHOLDER, Template, kernel_params};

/// The preamble of problems with `int[]` inputs: the wrapped-index reader.
const WRAPPED_INTS: &str = "\
struct gp_wrapped_ints {
    const int* data;
    int len;
    __device__ int operator[](int k) const {
        if (len <= 0) return 0;
        int m = k % len;
        if (m < 0) m += len;
        return data[m];
    }
};
";

/// The standard `template.cu` for `spec`: the preamble (the `gp_wrapped_ints` reader when
/// there is an `int[]` input), the `//@kernel` line, and the kernel. In the kernel, in this
/// order: the case index `c` and the `c >= NCASES` return; each input in declaration order
/// (`int[]` inputs as their length, then a `gp_wrapped_ints` over the case's `max_len`
/// slots); each case bit; each local at zero; then for an expression problem
/// `out_<y>[c] = (T)(phenotype);`, for a statement problem each output at zero, the
/// phenotype, and one store per output.
pub fn standard_template(spec: &ProblemSpec) -> String {
    let mut s = String::new();
    if spec.inputs.iter().any(|i| i.ty == InputType::IntArray) {
        s.push_str(WRAPPED_INTS);
    }
    s.push_str(KERNEL_MARKER);
    s.push('\n');
    let head = format!("extern \"C\" __global__ void {KERNEL_PLACEHOLDER}(");
    let indent = " ".repeat(head.len());
    let params: Vec<String> = kernel_params(spec)
        .iter()
        .map(|p| match p.c_type {
            "int" => format!("int {}", p.name),
            t => format!("{t} __restrict__ {}", p.name),
        })
        .collect();
    s.push_str(&head);
    s.push_str(&params.join(&format!(",\n{indent}")));
    s.push_str(")\n{\n");
    s.push_str("    int c = blockIdx.x * blockDim.x + threadIdx.x;\n");
    s.push_str("    if (c >= NCASES) return;\n");
    for input in &spec.inputs {
        let name = &input.name;
        match input.ty {
            InputType::Int => s.push_str(&format!("    const int {name} = in_{name}[c];\n")),
            InputType::Float => s.push_str(&format!("    const float {name} = in_{name}[c];\n")),
            InputType::IntArray => {
                // `length_name` and `max_len` are required for `int[]` by the spec's checks.
                let len = input.length_name.as_deref().unwrap_or("len");
                let max = input.max_len.unwrap_or(0);
                s.push_str(&format!("    const int {len} = in_{len}[c];\n"));
                s.push_str(&format!(
                    "    const gp_wrapped_ints {name} = {{ in_{name} + c * {max}, {len} }};\n"
                ));
            }
        }
    }
    for b in &spec.case_bits {
        if b.bit == 0 {
            s.push_str(&format!("    const int {} = c & 0x1;\n", b.name));
        } else {
            s.push_str(&format!("    const int {} = (c & {:#x}) >> {};\n", b.name, 1u64 << b.bit, b.bit));
        }
    }
    for l in &spec.locals {
        s.push_str(&format!("    {} {} = {};\n", l.ty.c_name(), l.name, zero(l.ty)));
    }
    match spec.kind {
        Kind::Expression => {
            for o in &spec.outputs {
                s.push_str(&format!(
                    "    out_{}[c] = ({})({PHENOTYPE_PLACEHOLDER});\n",
                    o.name,
                    o.ty.c_name()
                ));
            }
        }
        Kind::Statements => {
            for o in &spec.outputs {
                s.push_str(&format!("    {} {} = {};\n", o.ty.c_name(), o.name, zero(o.ty)));
            }
            s.push_str(&format!("    {PHENOTYPE_PLACEHOLDER}\n"));
            for o in &spec.outputs {
                s.push_str(&format!("    out_{0}[c] = {0};\n", o.name));
            }
        }
    }
    s.push_str("}\n");
    s
}

fn zero(t: ScalarType) -> &'static str {
    match t {
        ScalarType::Int => "0",
        ScalarType::Float => "0.0f",
    }
}

/// Where a template first differs from the standard harness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateDifference {
    /// 1-based line of `template.cu` (the line after the last when the template ends early).
    pub line: usize,
    /// That line, trimmed (empty past the end).
    pub found: String,
    /// The standard harness's line at the same place, trimmed (empty past its end).
    pub standard: String,
}

impl fmt::Display for TemplateDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |s: &str| if s.is_empty() { "the end of the file".to_owned() } else { format!("`{s}`") };
        write!(
            f,
            "template.cu line {} ({}) is not the standard harness, which has {} there",
            self.line,
            show(&self.found),
            show(&self.standard)
        )
    }
}

/// Compares `template` with [`standard_template`] of `spec` token by token, ignoring comments
/// and spacing: `Ok` when they are the same C, else where they first differ.
pub fn compare_with_standard(template: &Template, spec: &ProblemSpec) -> Result<(), TemplateDifference> {
    let text = format!("{}{KERNEL_MARKER}\n{}", template.preamble(), template.kernel_template());
    let standard = standard_template(spec);
    let found = tokens(&text);
    let expected = tokens(&standard);
    let differs = (0..found.len().max(expected.len()))
        .find(|&k| found.get(k).map(|t| &t.text) != expected.get(k).map(|t| &t.text));
    let Some(k) = differs else {
        return Ok(());
    };
    let line_of = |text: &str, toks: &[Token]| match toks.get(k) {
        Some(t) => (t.line, text.lines().nth(t.line - 1).unwrap_or_default().trim().to_owned()),
        None => (text.lines().count() + 1, String::new()),
    };
    let (line, found_line) = line_of(&text, &found);
    let (_, standard_line) = line_of(&standard, &expected);
    Err(TemplateDifference { line, found: found_line, standard: standard_line })
}

/// A C token and its 1-based line.
#[derive(Debug)]
struct Token {
    text: String,
    line: usize,
}

/// Operators of more than one character, longest first, so that `a++b` and `a+ +b` differ.
const PUNCT: &[&str] = &[
    "<<=", ">>=", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=", "^=", "::",
];

/// C tokens of `text` without comments; placeholders are single tokens.
fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < b.len() {
        let rest = &text[i..];
        let start_line = line;
        let len = if b[i] == b'\n' {
            line += 1;
            i += 1;
            continue;
        } else if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        } else if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
            continue;
        } else if let Some(comment) = rest.strip_prefix("/*") {
            let end = comment.find("*/").map_or(rest.len(), |e| e + 4);
            line += rest[..end].matches('\n').count();
            i += end;
            continue;
        } else if let Some(p) =
            [KERNEL_PLACEHOLDER, PHENOTYPE_PLACEHOLDER].iter().find(|p| rest.starts_with(**p))
        {
            p.len()
        } else if b[i] == b'"' {
            rest[1..].find('"').map_or(rest.len(), |e| e + 2)
        } else if b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.' {
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(rest.len())
        } else if let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) {
            p.len()
        } else {
            rest.chars().next().map_or(1, char::len_utf8)
        };
        out.push(Token { text: rest[..len].to_owned(), line: start_line });
        i += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Problem;

    #[test]
    fn the_built_in_templates_are_the_standard_harness() {
        for name in Problem::builtin_names() {
            let p = Problem::builtin(name).unwrap();
            assert_eq!(compare_with_standard(p.template(), p.spec()), Ok(()), "{name}");
        }
    }

    #[test]
    fn the_standard_template_is_a_valid_template_for_its_problem() {
        for name in Problem::builtin_names() {
            let p = Problem::builtin(name).unwrap();
            let t = Template::parse(&standard_template(p.spec())).unwrap();
            assert_eq!(compare_with_standard(&t, p.spec()), Ok(()), "{name}");
        }
    }

    #[test]
    fn a_changed_store_is_found_with_its_line() {
        let p = Problem::builtin("keijzer6").unwrap();
        let text = format!("{}//@kernel\n{}", p.template().preamble(), p.template().kernel_template())
            .replace("out_y[c] = (float)({{PHENOTYPE}});", "out_y[c] = (float)({{PHENOTYPE}}) * 2.0f;");
        let t = Template::parse(&text).unwrap();
        let d = compare_with_standard(&t, p.spec()).unwrap_err();
        let line = text.lines().position(|l| l.contains("* 2.0f")).unwrap() + 1;
        assert_eq!(d.line, line);
        assert_eq!(d.found, "out_y[c] = (float)({{PHENOTYPE}}) * 2.0f;");
        assert_eq!(d.standard, "out_y[c] = (float)({{PHENOTYPE}});");
        assert!(d.to_string().contains(&format!("line {line}")), "{d}");
    }

    #[test]
    fn comments_and_spacing_do_not_count_but_tokens_do() {
        let p = Problem::builtin("search").unwrap();
        let standard = standard_template(p.spec());
        let spaced = standard.replace("c * 20", "c*20 /* slots */").replace("return;", "return; // done");
        assert_eq!(compare_with_standard(&Template::parse(&spaced).unwrap(), p.spec()), Ok(()));
        let changed = standard.replace("if (m < 0) m += len;", "if (m < 0) m = m + len;");
        let d = compare_with_standard(&Template::parse(&changed).unwrap(), p.spec()).unwrap_err();
        assert_eq!(d.found, "if (m < 0) m = m + len;");
        assert_eq!(d.standard, "if (m < 0) m += len;");
        assert_eq!(d.line, 7);
    }
}
