//! `template.cu`: the CUDA C text individuals are rendered into, split into a unit
//! preamble and a per-individual kernel with `{{KERNEL}}` and `{{PHENOTYPE}}`
//! placeholders, and the kernel-parameter convention it must follow. Must never compile
//! or run anything: it is text substitution and a signature check.

use super::spec::{InputType, ProblemSpec, ScalarType, is_identifier};
use crate::mapping::Phenotype;

/// The line that separates the preamble from the kernel template.
pub const KERNEL_MARKER: &str = "//@kernel";
/// Placeholder for the kernel's name.
pub const KERNEL_PLACEHOLDER: &str = "{{KERNEL}}";
/// Placeholder for the phenotype.
pub const PHENOTYPE_PLACEHOLDER: &str = "{{PHENOTYPE}}";

/// A parsed `template.cu`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    preamble: String,
    kernel: String,
    segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Text(String),
    Kernel,
    Phenotype,
}

/// A kernel name: a C identifier, checked once so rendering cannot fail.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelName(String);

impl KernelName {
    /// Accepts `name` if it is a C identifier.
    pub fn new(name: impl Into<String>) -> Option<Self> {
        let name = name.into();
        is_identifier(&name).then_some(Self(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a kernel parameter carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamRole {
    /// Input `index` (into the problem's inputs): one value per case, or for `int[]`
    /// inputs `max_len` ints per case, case after case.
    Input(usize),
    /// The per-case lengths of `int[]` input `index`.
    Lengths(usize),
    /// Output `index`: the kernel writes one value per case.
    Output(usize),
    /// The number of cases, `int NCASES`.
    NumCases,
}

/// One kernel parameter, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParam {
    /// Its name in the kernel.
    pub name: String,
    /// Its C type without `__restrict__`, e.g. `const float*`.
    pub c_type: &'static str,
    /// What it carries.
    pub role: ParamRole,
}

/// The kernel parameters `spec` implies: for each input `in_<name>` (`int[]` inputs add
/// `in_<length_name>` right after), then `out_<name>` per output, then `int NCASES`.
pub fn kernel_params(spec: &ProblemSpec) -> Vec<KernelParam> {
    let mut params = Vec::new();
    for (i, input) in spec.inputs.iter().enumerate() {
        let c_type = match input.ty {
            InputType::Int | InputType::IntArray => "const int*",
            InputType::Float => "const float*",
        };
        params.push(KernelParam { name: format!("in_{}", input.name), c_type, role: ParamRole::Input(i) });
        if let (InputType::IntArray, Some(len)) = (input.ty, &input.length_name) {
            params.push(KernelParam {
                name: format!("in_{len}"),
                c_type: "const int*",
                role: ParamRole::Lengths(i),
            });
        }
    }
    for (i, out) in spec.outputs.iter().enumerate() {
        params.push(KernelParam {
            name: format!("out_{}", out.name),
            c_type: match out.ty {
                ScalarType::Int => "int*",
                ScalarType::Float => "float*",
            },
            role: ParamRole::Output(i),
        });
    }
    params.push(KernelParam { name: "NCASES".into(), c_type: "int", role: ParamRole::NumCases });
    params
}

impl Template {
    /// Splits `text` at the `//@kernel` line and checks the placeholders.
    pub(crate) fn parse(text: &str) -> Result<Template, String> {
        let mut preamble = String::new();
        let mut kernel = String::new();
        let mut seen = false;
        for line in text.split_inclusive('\n') {
            if !seen && line.trim() == KERNEL_MARKER {
                seen = true;
            } else if seen {
                kernel.push_str(line);
            } else {
                preamble.push_str(line);
            }
        }
        if !seen {
            return Err(format!(
                "no `{KERNEL_MARKER}` line: put it between the unit preamble and the kernel template"
            ));
        }
        for p in [KERNEL_PLACEHOLDER, PHENOTYPE_PLACEHOLDER] {
            if preamble.contains(p) {
                return Err(format!(
                    "`{p}` appears before `{KERNEL_MARKER}`: the preamble is shared by all kernels of a unit"
                ));
            }
        }
        if kernel.matches(KERNEL_PLACEHOLDER).count() != 1 {
            return Err(format!("the kernel template must contain `{KERNEL_PLACEHOLDER}` exactly once"));
        }
        if kernel.matches(PHENOTYPE_PLACEHOLDER).count() != 1 {
            return Err(format!("the kernel template must contain `{PHENOTYPE_PLACEHOLDER}` exactly once"));
        }
        // Placeholders are located once here, so a phenotype that happens to contain
        // placeholder text is never substituted again.
        let mut segments = Vec::new();
        let mut rest = kernel.as_str();
        while !rest.is_empty() {
            let k = rest.find(KERNEL_PLACEHOLDER);
            let p = rest.find(PHENOTYPE_PLACEHOLDER);
            let (at, seg, len) = match (k, p) {
                (Some(k), Some(p)) if k < p => (k, Segment::Kernel, KERNEL_PLACEHOLDER.len()),
                (_, Some(p)) => (p, Segment::Phenotype, PHENOTYPE_PLACEHOLDER.len()),
                (Some(k), None) => (k, Segment::Kernel, KERNEL_PLACEHOLDER.len()),
                (None, None) => {
                    segments.push(Segment::Text(rest.to_string()));
                    break;
                }
            };
            if at > 0 {
                segments.push(Segment::Text(rest[..at].to_string()));
            }
            segments.push(seg);
            rest = &rest[at + len..];
        }
        Ok(Template { preamble, kernel, segments })
    }

    /// Text emitted once per translation unit, before any kernel.
    pub fn preamble(&self) -> &str {
        &self.preamble
    }

    /// The kernel template with its placeholders.
    pub fn kernel_template(&self) -> &str {
        &self.kernel
    }

    /// One individual's kernel.
    pub fn render_kernel(&self, name: &KernelName, phenotype: &Phenotype) -> String {
        self.render(name, phenotype, false, None)
    }

    /// One individual's kernel with `extra` (a declaration such as `const float* p`) added
    /// as its last parameter: free parameters (`p[k]`) come in as a kernel argument, so one
    /// compiled structure runs with any values.
    pub fn render_kernel_with(&self, name: &KernelName, phenotype: &Phenotype, extra: &str) -> String {
        self.render(name, phenotype, false, Some(extra))
    }

    /// The kernel text: as a device function when `device` (see
    /// [`render_device_function`](Self::render_device_function)), with `extra` declared after
    /// the template's parameters. The parameter list is the first `(...)` after the kernel's
    /// name, which [`check_against`](Self::check_against) made sure of.
    fn render(&self, name: &KernelName, phenotype: &Phenotype, device: bool, extra: Option<&str>) -> String {
        let mut out = String::with_capacity(self.kernel.len() + phenotype.as_str().len() + 64);
        let mut named = false;
        let mut extended = extra.is_none();
        for s in &self.segments {
            match s {
                Segment::Text(t) if device && !named => {
                    out.push_str(&t.replacen("extern \"C\"", "", 1).replacen(
                        "__global__",
                        "static __device__ __forceinline__",
                        1,
                    ))
                }
                Segment::Text(t) if named && !extended => {
                    match (extra, t.find('(').and_then(|o| t[o..].find(')').map(|c| o + c))) {
                        (Some(extra), Some(close)) => {
                            extended = true;
                            let empty = t[..close].trim_end().ends_with('(');
                            out.push_str(&t[..close]);
                            out.push_str(if empty { "" } else { ", " });
                            out.push_str(extra);
                            out.push_str(&t[close..]);
                        }
                        _ => out.push_str(t),
                    }
                }
                Segment::Text(t) => out.push_str(t),
                Segment::Kernel => {
                    named = true;
                    out.push_str(name.as_str());
                }
                Segment::Phenotype => out.push_str(phenotype.as_str()),
            }
        }
        out
    }

    /// Whether individuals can be rendered as device functions for a unit's switch kernel
    /// ([`render_device_function`](Self::render_device_function)): the switch takes the block
    /// row for itself, so the kernel template must not read `blockIdx.y` or `gridDim.y`.
    pub fn switch_ready(&self) -> Result<(), String> {
        for word in ["blockIdx.y", "gridDim.y", "blockIdx.z", "gridDim.z"] {
            if self.kernel.contains(word) {
                return Err(format!(
                    "its kernel template reads `{word}`, which a unit's switch kernel uses to pick the individual"
                ));
            }
        }
        Ok(())
    }

    /// One individual's kernel as a `static __device__ __forceinline__` function of the same
    /// name and parameters, for a unit's switch kernel to call: the kernel rendered as by
    /// [`render_kernel`](Self::render_kernel), with `extern "C"` and `__global__` before its
    /// name replaced.
    pub fn render_device_function(&self, name: &KernelName, phenotype: &Phenotype) -> String {
        self.render(name, phenotype, true, None)
    }

    /// [`render_device_function`](Self::render_device_function) with `extra` as its last
    /// parameter ([`render_kernel_with`](Self::render_kernel_with)).
    pub fn render_device_function_with(
        &self,
        name: &KernelName,
        phenotype: &Phenotype,
        extra: &str,
    ) -> String {
        self.render(name, phenotype, true, Some(extra))
    }

    /// Checks that the kernel is `extern "C" __global__` with exactly `params`, and that
    /// it mentions every variable name a phenotype may use.
    pub(crate) fn check_against(&self, params: &[KernelParam], visible: &[&str]) -> Result<(), String> {
        let Some(at) = self.kernel.find(KERNEL_PLACEHOLDER) else {
            return Err(format!("no `{KERNEL_PLACEHOLDER}`"));
        };
        let head = &self.kernel[..at];
        if !head.contains("extern \"C\"") || !head.contains("__global__") {
            return Err(format!(
                "the kernel must be declared `extern \"C\" __global__ void {KERNEL_PLACEHOLDER}(...)`"
            ));
        }
        let after = &self.kernel[at + KERNEL_PLACEHOLDER.len()..];
        let Some(open) = after.find('(') else {
            return Err(format!("no parameter list after `{KERNEL_PLACEHOLDER}`"));
        };
        let Some(close) = after[open..].find(')') else {
            return Err("unclosed kernel parameter list".into());
        };
        let found: Vec<Vec<String>> = after[open + 1..open + close].split(',').map(param_tokens).collect();
        let expected: Vec<Vec<String>> =
            params.iter().map(|p| param_tokens(&format!("{} {}", p.c_type, p.name))).collect();
        if found != expected {
            let show = |v: &[Vec<String>]| v.iter().map(|t| t.join(" ")).collect::<Vec<_>>().join(", ");
            return Err(format!(
                "kernel parameters are ({}) but problem.toml implies ({}): one `const T* in_<input>` per input (int[] inputs add `const int* in_<length_name>`), one `T* out_<output>` per output, then `int NCASES`",
                show(&found),
                show(&expected)
            ));
        }
        let body = &self.kernel[at..];
        for name in visible {
            if !mentions(body, name) {
                return Err(format!(
                    "the kernel never mentions `{name}`: declare every input, case bit, local and output the phenotype may use"
                ));
            }
        }
        Ok(())
    }
}

impl Template {
    /// Checks that the kernel reads each `int[]` input's case at the stride `problem.toml`
    /// declares: where it writes `in_<name> + c * N` (or `N * c`, spacing aside), `N` must be the
    /// input's `max_len`, or each case would read past its own ints (the last ones past the end
    /// of the buffer). A template that indexes otherwise is not judged.
    pub(crate) fn check_strides(&self, spec: &ProblemSpec) -> Result<(), String> {
        let text: String = self.kernel.chars().filter(|c| !c.is_whitespace()).collect();
        for input in spec.inputs.iter().filter(|i| i.ty == InputType::IntArray) {
            let Some(max) = input.max_len else { continue };
            let base = format!("in_{}+", input.name);
            for (at, _) in text.match_indices(&base) {
                let rest = &text[at + base.len()..];
                let digits = |t: &str| t.chars().take_while(char::is_ascii_digit).collect::<String>();
                let stride = if let Some(t) = rest.strip_prefix("c*") {
                    digits(t)
                } else {
                    let d = digits(rest);
                    if rest[d.len()..].starts_with("*c") && !d.is_empty() { d } else { String::new() }
                };
                if let Ok(n) = stride.parse::<u64>()
                    && n != max as u64
                {
                    return Err(format!(
                        "the kernel reads `{}` at a stride of {n} ints per case, but problem.toml declares max_len = {max}: \
                         use `in_{} + c * {max}`",
                        input.name, input.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Tokens of one parameter declaration, ignoring `__restrict__` and spacing.
fn param_tokens(decl: &str) -> Vec<String> {
    decl.replace('*', " * ").split_whitespace().filter(|t| *t != "__restrict__").map(str::to_string).collect()
}

/// True if `text` contains `name` as a whole identifier.
fn mentions(text: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_splits_at_marker_and_substitutes_once() {
        let t = Template::parse("struct S {};\n//@kernel\nvoid {{KERNEL}}() { {{PHENOTYPE}} }\n").unwrap();
        assert_eq!(t.preamble(), "struct S {};\n");
        let name = KernelName::new("k7").unwrap();
        let out = t.render_kernel(&name, &Phenotype::new("x = 1; /* {{KERNEL}} */"));
        assert_eq!(out, "void k7() { x = 1; /* {{KERNEL}} */ }\n");
    }

    #[test]
    fn template_without_marker_or_placeholder_is_rejected() {
        assert!(Template::parse("void {{KERNEL}}() { {{PHENOTYPE}} }").is_err());
        assert!(Template::parse("//@kernel\nvoid k() { {{PHENOTYPE}} }").is_err());
        assert!(Template::parse("{{KERNEL}}\n//@kernel\n{{KERNEL}} {{PHENOTYPE}}").is_err());
    }

    #[test]
    fn kernel_names_must_be_identifiers() {
        assert!(KernelName::new("gp_3").is_some());
        assert!(KernelName::new("3gp").is_none());
        assert!(KernelName::new("a-b").is_none());
    }

    #[test]
    fn whole_identifier_mentions_only() {
        assert!(mentions("int tmp = 0;", "tmp"));
        assert!(!mentions("int tmp2 = 0;", "tmp"));
        assert!(!mentions("in_x[c]", "x"));
    }

    #[test]
    fn an_extra_parameter_goes_last_in_the_kernel_and_its_device_function() {
        let t = Template::parse(
            "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(int* o,\n int NCASES)\n{ o[0] = {{PHENOTYPE}}; f(a, b); }\n",
        )
        .unwrap();
        let name = KernelName::new("k7").unwrap();
        let k = t.render_kernel_with(&name, &Phenotype::new("p[0] + 1"), "const float* p");
        assert_eq!(
            k,
            "extern \"C\" __global__ void k7(int* o,\n int NCASES, const float* p)\n{ o[0] = p[0] + 1; f(a, b); }\n"
        );
        let f = t.render_device_function_with(&name, &Phenotype::new("(p)"), "const float* p");
        assert_eq!(
            f,
            " static __device__ __forceinline__ void k7(int* o,\n int NCASES, const float* p)\n{ o[0] = (p); f(a, b); }\n"
        );
        let bare =
            Template::parse("//@kernel\nextern \"C\" __global__ void {{KERNEL}}( ) { {{PHENOTYPE}} }\n")
                .unwrap();
        assert_eq!(
            bare.render_kernel_with(&name, &Phenotype::new("x;"), "const float* p"),
            "extern \"C\" __global__ void k7( const float* p) { x; }\n"
        );
    }

    #[test]
    fn a_device_function_replaces_only_the_kernel_qualifiers() {
        let t = Template::parse(
            "#define A 1\n//@kernel\nextern \"C\" __global__ void {{KERNEL}}(int* o, int NCASES)\n{ o[0] = {{PHENOTYPE}}; /* __global__ */ }\n",
        )
        .unwrap();
        let f = t.render_device_function(&KernelName::new("k7").unwrap(), &Phenotype::new("A + 1"));
        assert_eq!(
            f,
            " static __device__ __forceinline__ void k7(int* o, int NCASES)\n{ o[0] = A + 1; /* __global__ */ }\n"
        );
        assert!(t.switch_ready().is_ok());
        let y = Template::parse(
            "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(int* o, int NCASES)\n{ o[blockIdx.y] = {{PHENOTYPE}}; }\n",
        )
        .unwrap();
        assert!(y.switch_ready().unwrap_err().contains("blockIdx.y"));
    }
}
