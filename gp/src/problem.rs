//! Problems as data: a directory holding `problem.toml`, `grammar.bnf`, `cases.json` (or
//! `cases.npy`, NumPy's array, for scalar inputs) and `template.cu`, loaded and cross-checked
//! into one [`Problem`], and the scoring of outputs against its targets. The three benchmarks of the paper are built in. Must never
//! evaluate programs or know how a GPU is driven (it only states the kernel convention):
//! the evaluator (`interp`) builds on problems, never the other way round.

pub mod builtin;
pub mod cases;
pub mod scoring;
pub mod spec;
pub mod standard;
pub mod template;

use std::path::Path;

use crate::fitness::{Direction, Fitness};
use crate::grammar::{Grammar, GrammarError};

pub use cases::{Cases, Column, InputColumn};
pub use scoring::{ScoreError, score};
pub use spec::{
    CaseBitSpec, InputSpec, InputType, Kind, MATH_FUNCTIONS, ProblemSpec, ScalarType, TargetSpec, VarSpec,
    is_math_function,
};
pub use standard::{TemplateDifference, compare_with_standard, standard_template};
pub use template::{KernelName, KernelParam, ParamRole, Template};

/// The four files of a problem, as text.
#[derive(Clone, Debug)]
pub struct ProblemSources<'a> {
    /// `problem.toml`.
    pub toml: &'a str,
    /// `grammar.bnf`.
    pub grammar: &'a str,
    /// `cases.json`.
    pub cases: &'a str,
    /// `template.cu`.
    pub template: &'a str,
}

/// A loaded, consistent problem.
#[derive(Clone, Debug)]
pub struct Problem {
    spec: ProblemSpec,
    grammar: Grammar,
    grammar_text: String,
    cases: Cases,
    template: Template,
}

/// Why a problem could not be loaded. `file` names the file (a path, or
/// `builtin:<name>/<file>` for the built-ins).
#[derive(Debug, thiserror::Error)]
pub enum ProblemError {
    /// A file of the problem is not a regular file (a FIFO, a device, a directory).
    #[error("{file}: not a regular file: a problem's files must be regular files")]
    NotAFile { file: String },
    /// A file could not be read.
    #[error("{file}: cannot read it")]
    Read { file: String, source: std::io::Error },
    /// `problem.toml` is not valid TOML or has unknown or missing fields. The TOML parser's
    /// diagnostic is kept as where and what, on one line (its own rendering spans several).
    #[error("{file}: line {line}, column {column}: {message}")]
    Toml { file: String, line: usize, column: usize, message: String },
    /// A field of `problem.toml` breaks a rule.
    #[error("{file}: field `{field}`: {message}")]
    Field { file: String, field: String, message: String },
    /// `grammar.bnf` does not parse.
    #[error("{file}: not a valid grammar")]
    Grammar { file: String, source: GrammarError },
    /// `grammar.bnf` parses, but its start rule has no finite derivation.
    #[error(
        "{file}: start rule `<{rule}>` can never finish deriving: give it (or a rule it uses) a non-recursive alternative"
    )]
    NonTerminating { file: String, rule: String },
    /// `grammar.bnf` parses, but no program it writes parses as the problem's C: a slip in
    /// the grammar's syntax. `program` is one of them, `message` the parser's complaint.
    #[error(
        "{file}: the grammar writes no program that parses, e.g. `{program}` ({message}): check its alternatives' C"
    )]
    Programs { file: String, program: String, message: String },
    /// `cases.json` as a whole is wrong.
    #[error("{file}: {message}")]
    Cases { file: String, message: String },
    /// One case of `cases.json` is wrong (`case` is 0-based).
    #[error("{file}: case {case}: {message}")]
    Case { file: String, case: usize, message: String },
    /// `template.cu` breaks the convention.
    #[error("{file}: {message}")]
    Template { file: String, message: String },
    /// No built-in problem has this name.
    #[error("no built-in problem named `{name}`: the built-ins are {known}")]
    UnknownBuiltin { name: String, known: String },
}

impl Problem {
    /// Loads the problem in directory `dir`: its cases from `cases.npy` when it has one (see
    /// `cases::parse_cases_npy` for the layout), else from `cases.json`; both is an error.
    pub fn load(dir: &Path) -> Result<Problem, ProblemError> {
        // A file's bytes, read only if it is a regular file: a FIFO or a device would block
        // the read, or never end it.
        let bytes = |name: &str| {
            let path = dir.join(name);
            let file = path.display().to_string();
            match std::fs::metadata(&path) {
                Ok(m) if !m.is_file() => return Err(ProblemError::NotAFile { file }),
                Err(source) => return Err(ProblemError::Read { file, source }),
                Ok(_) => {}
            }
            std::fs::read(&path).map_err(|source| ProblemError::Read { file, source })
        };
        let read = |name: &str| {
            String::from_utf8(bytes(name)?).map_err(|e| ProblemError::Read {
                file: dir.join(name).display().to_string(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
        };
        let (toml, grammar, template) = (read("problem.toml")?, read("grammar.bnf")?, read("template.cu")?);
        let origin = dir.display().to_string();
        // The cases as NumPy's array (what a Python fit writes), or as JSON: one of the two.
        let exists = |name: &str| std::fs::symlink_metadata(dir.join(name)).is_ok();
        if !exists("cases.npy") {
            let cases = read("cases.json")?;
            let sources =
                ProblemSources { toml: &toml, grammar: &grammar, cases: &cases, template: &template };
            return Self::build(&origin, &sources, None);
        }
        if exists("cases.json") {
            let file = dir.join("cases.npy").display().to_string();
            let message = "there is a cases.json too: keep one of the two".to_owned();
            return Err(ProblemError::Cases { file, message });
        }
        let npy = bytes("cases.npy")?;
        let sources = ProblemSources { toml: &toml, grammar: &grammar, cases: "", template: &template };
        Self::build(&origin, &sources, Some(&npy))
    }

    /// A built-in problem by name (see [`Problem::builtin_names`]).
    pub fn builtin(name: &str) -> Result<Problem, ProblemError> {
        let Some(sources) = builtin::sources(name) else {
            return Err(ProblemError::UnknownBuiltin {
                name: name.to_string(),
                known: builtin::NAMES.join(", "),
            });
        };
        Self::from_sources(&format!("builtin:{name}"), &sources)
    }

    /// Names of the built-in problems.
    pub fn builtin_names() -> &'static [&'static str] {
        builtin::NAMES
    }

    /// Builds a problem from the text of its four files; `origin` prefixes file names in
    /// error messages (a directory path, or `builtin:<name>`).
    pub fn from_sources(origin: &str, src: &ProblemSources<'_>) -> Result<Problem, ProblemError> {
        Self::build(origin, src, None)
    }

    /// [`Problem::from_sources`], the cases read from `npy` (a `cases.npy` file's bytes) instead
    /// of `src.cases`: what [`Problem::load`] builds from a directory with a `cases.npy`.
    pub fn from_sources_npy(
        origin: &str,
        src: &ProblemSources<'_>,
        npy: &[u8],
    ) -> Result<Problem, ProblemError> {
        Self::build(origin, src, Some(npy))
    }

    /// [`Problem::from_sources`], the cases read from `npy` (a `cases.npy` file's bytes) instead
    /// of `src.cases` when given.
    fn build(origin: &str, src: &ProblemSources<'_>, npy: Option<&[u8]>) -> Result<Problem, ProblemError> {
        let file = |name: &str| format!("{origin}/{name}");
        let spec: ProblemSpec =
            toml::from_str(src.toml).map_err(|e| toml_error(file("problem.toml"), src.toml, &e))?;
        spec.validate().map_err(|i| ProblemError::Field {
            file: file("problem.toml"),
            field: i.field,
            message: i.message,
        })?;
        let grammar =
            Grammar::parse_with_start(src.grammar, spec.start.as_deref()).map_err(|source| match source {
                GrammarError::UnknownStart { name } => ProblemError::Field {
                    file: file("problem.toml"),
                    field: "start".into(),
                    message: format!("grammar.bnf has no rule `<{name}>`"),
                },
                source => ProblemError::Grammar { file: file("grammar.bnf"), source },
            })?;
        let start = grammar.rule(grammar.start());
        if !start.can_terminate() {
            return Err(ProblemError::NonTerminating {
                file: file("grammar.bnf"),
                rule: start.name().to_string(),
            });
        }
        let (cases, name) = match npy {
            None => (cases::parse_cases(src.cases, &spec), "cases.json"),
            Some(bytes) => (cases::parse_cases_npy(bytes, &spec), "cases.npy"),
        };
        let cases = cases.map_err(|i| match i {
            cases::CasesIssue::Whole(message) => ProblemError::Cases { file: file(name), message },
            cases::CasesIssue::Case { case, message } => {
                ProblemError::Case { file: file(name), case, message }
            }
        })?;
        let template_err = |message: String| ProblemError::Template { file: file("template.cu"), message };
        // Declared functions open every unit, so that the compiled routes can call them.
        let definitions: String = spec.functions.iter().map(|f| f.definition()).collect();
        let template = Template::parse(&format!("{definitions}{}", src.template)).map_err(template_err)?;
        let problem = Problem { spec, grammar, grammar_text: src.grammar.to_string(), cases, template };
        let visible = problem.visible_names();
        problem.template.check_against(&problem.kernel_params(), &visible).map_err(template_err)?;
        problem.template.check_strides(&problem.spec).map_err(template_err)?;
        Ok(problem)
    }

    /// The declaration from `problem.toml`.
    pub fn spec(&self) -> &ProblemSpec {
        &self.spec
    }

    /// Loop iterations a program may take in one case before it fails (`max_steps`).
    pub fn max_steps(&self) -> u64 {
        self.spec.max_steps
    }

    /// This problem with another step limit (`gpfarm evolve --max-steps`); `None` for 0.
    pub fn with_max_steps(mut self, max_steps: u64) -> Option<Problem> {
        (max_steps >= 1).then(|| {
            self.spec.max_steps = max_steps;
            self
        })
    }

    /// The same problem on at most `max` of its cases, evenly spaced ([`Cases::strided`]).
    pub fn strided(&self, max: usize) -> Problem {
        Problem { cases: self.cases.strided(max), ..self.clone() }
    }

    /// Short name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The parsed grammar, with the start rule `problem.toml` names.
    pub fn grammar(&self) -> &Grammar {
        &self.grammar
    }

    /// The text of `grammar.bnf`.
    pub fn grammar_text(&self) -> &str {
        &self.grammar_text
    }

    /// The test cases.
    pub fn cases(&self) -> &Cases {
        &self.cases
    }

    /// The CUDA C template.
    pub fn template(&self) -> &Template {
        &self.template
    }

    /// Which way fitness is better.
    pub fn direction(&self) -> Direction {
        self.spec.fitness.direction()
    }

    /// The kernel's parameters in order (see problems/README.md for the convention).
    pub fn kernel_params(&self) -> Vec<KernelParam> {
        template::kernel_params(&self.spec)
    }

    /// Scores outputs, one column per declared output with one value per case — the
    /// same function whether the outputs come from the CPU evaluator or a GPU.
    pub fn score(&self, outputs: &[Column]) -> Result<Fitness, ScoreError> {
        if outputs.len() != self.spec.outputs.len() {
            return Err(ScoreError::ColumnCount { expected: self.spec.outputs.len(), found: outputs.len() });
        }
        score(self.spec.fitness, self.spec.bit_mask(), self.cases.targets(), outputs)
    }

    /// Every variable name a phenotype may read.
    fn visible_names(&self) -> Vec<&str> {
        let s = &self.spec;
        let mut v: Vec<&str> = Vec::new();
        for i in &s.inputs {
            v.push(&i.name);
            if let Some(l) = &i.length_name {
                v.push(l);
            }
        }
        v.extend(s.case_bits.iter().map(|b| b.name.as_str()));
        v.extend(s.locals.iter().map(|l| l.name.as_str()));
        if s.kind == Kind::Statements {
            v.extend(s.outputs.iter().map(|o| o.name.as_str()));
        }
        v
    }
}

/// The TOML parser's `error` in `text` as a one-line [`ProblemError::Toml`] (1-based line and
/// column; the start of the file when the parser gives no position).
fn toml_error(file: String, text: &str, error: &toml::de::Error) -> ProblemError {
    let at = error.span().map_or(0, |span| span.start.min(text.len()));
    let before = text.get(..at).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let message = error.message().trim().lines().map(str::trim).collect::<Vec<_>>().join("; ");
    ProblemError::Toml { file, line, column, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
name = "t"
kind = "expression"
fitness = "rmse"
[[inputs]]
name = "x"
type = "float"
[[outputs]]
name = "y"
type = "float"
[target]
type = "float"
"#;
    const GRAMMAR: &str = "<e> ::= x | x + x";
    const CASES: &str = r#"[{"x": 1.0, "target": 2.0}]"#;
    const TEMPLATE: &str = "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(const float* __restrict__ in_x, float* __restrict__ out_y, int NCASES)\n{\n int c = blockIdx.x * blockDim.x + threadIdx.x;\n if (c >= NCASES) return;\n const float x = in_x[c];\n out_y[c] = (float)({{PHENOTYPE}});\n}\n";

    fn load(toml: &str, grammar: &str, cases: &str, template: &str) -> Result<Problem, ProblemError> {
        Problem::from_sources("dir", &ProblemSources { toml, grammar, cases, template })
    }

    #[test]
    fn a_minimal_problem_loads() {
        let p = load(TOML, GRAMMAR, CASES, TEMPLATE).unwrap();
        assert_eq!(p.cases().len(), 1);
        assert_eq!(p.direction(), Direction::Lower);
        let names: Vec<_> = p.kernel_params().into_iter().map(|k| k.name).collect();
        assert_eq!(names, ["in_x", "out_y", "NCASES"]);
    }

    #[test]
    fn unknown_toml_field_names_the_file() {
        let err = load(&format!("{TOML}\nbogus = 1"), GRAMMAR, CASES, TEMPLATE).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("dir/problem.toml"), "{msg}");
        assert!(msg.contains("bogus"), "{msg}");
    }

    #[test]
    fn a_toml_error_is_one_line_that_says_where() {
        let err = load("name = \"t\"\nkind = = 1\n", GRAMMAR, CASES, TEMPLATE).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("dir/problem.toml: line 2, column "), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn an_error_never_repeats_its_source_in_its_own_message() {
        use std::error::Error;
        let read = Problem::load(Path::new("/nonexistent-gpfarm-problem")).unwrap_err();
        let grammar = load(TOML, "<e> ::= <f>", CASES, TEMPLATE).unwrap_err();
        assert!(matches!(grammar, ProblemError::Grammar { .. }), "{grammar}");
        for err in [read, grammar] {
            let source = err.source().expect("the cause is kept as a source").to_string();
            assert!(!err.to_string().contains(&source), "{err} repeats {source}");
        }
    }

    #[test]
    fn reserved_variable_names_are_refused() {
        let toml = TOML.replace("name = \"x\"", "name = \"c\"");
        let err = load(&toml, GRAMMAR, CASES, TEMPLATE).unwrap_err();
        assert!(matches!(err, ProblemError::Field { ref field, .. } if field == "inputs[0].name"), "{err}");
    }

    #[test]
    fn a_case_missing_an_input_names_the_case() {
        let err = load(TOML, GRAMMAR, r#"[{"x": 1, "target": 1}, {"target": 1}]"#, TEMPLATE).unwrap_err();
        assert!(matches!(err, ProblemError::Case { case: 1, .. }), "{err}");
    }

    #[test]
    fn kernel_signature_must_follow_the_convention() {
        let template = TEMPLATE.replace("const float* __restrict__ in_x, ", "");
        let err = load(TOML, GRAMMAR, CASES, &template).unwrap_err();
        assert!(matches!(err, ProblemError::Template { .. }), "{err}");
    }

    #[test]
    fn a_start_rule_that_cannot_finish_is_refused() {
        let err = load(TOML, "<e> ::= x + <e>", CASES, TEMPLATE).unwrap_err();
        assert!(matches!(err, ProblemError::NonTerminating { .. }), "{err}");
    }

    #[test]
    fn unknown_builtin_lists_the_known_ones() {
        let err = Problem::builtin("nope").unwrap_err().to_string();
        for name in Problem::builtin_names() {
            assert!(err.contains(name), "{err}");
        }
    }

    /// A `.npy` file of float64 `rows` (NumPy's format 1.0, C order).
    fn npy(rows: &[&[f64]], descr: &str) -> Vec<u8> {
        let cols = rows.first().map_or(0, |r| r.len());
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({}, {cols}), }}", rows.len());
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        for v in rows.iter().flat_map(|r| r.iter()) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    fn problem_dir(cases: Option<&str>, npy_bytes: Option<&[u8]>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("problem.toml"), TOML).unwrap();
        std::fs::write(dir.path().join("grammar.bnf"), GRAMMAR).unwrap();
        std::fs::write(dir.path().join("template.cu"), TEMPLATE).unwrap();
        if let Some(c) = cases {
            std::fs::write(dir.path().join("cases.json"), c).unwrap();
        }
        if let Some(b) = npy_bytes {
            std::fs::write(dir.path().join("cases.npy"), b).unwrap();
        }
        dir
    }

    #[test]
    fn cases_as_numpy_s_array_load_as_the_same_numbers_in_json_do() {
        // Values a float cannot hold exactly round as JSON's do.
        let rows: &[&[f64]] = &[&[0.1, 2.0], &[1e-40, -3.3], &[123456789.123, 1.0 / 3.0]];
        let json = r#"[{"x": 0.1, "target": 2.0}, {"x": 1e-40, "target": -3.3},
                       {"x": 123456789.123, "target": 0.3333333333333333}]"#;
        let from_json = Problem::load(problem_dir(Some(json), None).path()).unwrap();
        let from_npy = Problem::load(problem_dir(None, Some(&npy(rows, "<f8"))).path()).unwrap();
        assert_eq!(from_npy.cases(), from_json.cases());
    }

    #[test]
    fn a_wrong_cases_npy_is_one_error_naming_the_file() {
        let two: &[&[f64]] = &[&[1.0, 2.0]];
        let cases =
            |bytes: &[u8]| Problem::load(problem_dir(None, Some(bytes)).path()).unwrap_err().to_string();
        let e = cases(&npy(&[&[1.0, 2.0, 3.0]], "<f8"));
        assert!(e.contains("cases.npy") && e.contains("3 columns") && e.contains("2 columns"), "{e}");
        let e = cases(&npy(&[&[1e39, 2.0]], "<f8"));
        assert!(
            e.contains("cases.npy") && e.contains("case 0") && e.contains("beyond the range of a float"),
            "{e}"
        );
        let e = cases(&npy(&[&[f64::NAN, 2.0]], "<f8"));
        assert!(e.contains("NaN is not a number a case can hold"), "{e}");
        let e = cases(&npy(two, "<c16"));
        assert!(e.contains("cases.npy") && e.contains("float64, float32, int32 or int64"), "{e}");
        let e = cases(b"not numpy");
        assert!(e.contains("not a NumPy .npy file") && !e.contains('\n'), "{e}");
        let both =
            Problem::load(problem_dir(Some(CASES), Some(&npy(two, "<f8"))).path()).unwrap_err().to_string();
        assert!(both.contains("keep one of the two"), "{both}");
    }
}
