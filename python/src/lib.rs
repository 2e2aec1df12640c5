//! `gpfarm._gpfarm`: the native half of the Python package. It binds the engine's own Rust API:
//! `EvolveConfig` is a typed run configuration that becomes the engine's
//! [`Options`] and [`CompilerRequest`], the run is planned and run by
//! [`gpfarm_evolve::plan`] (as `gpfarm evolve` runs it), and each generation's record reaches
//! Python as a dict built from its serde serialisation (the same keys `gpfarm evolve --json`
//! prints). No command line is parsed and no JSON text is passed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpfarm_client::{
    BuildConfig, CompileOptions, Compiler, CompilerSpec, FailureKind, SmArch, Unit, UnitOutcome, Workers,
};
use gpfarm_entry::stderr::one_line as stderr_line;
use gpfarm_evolve::plan::{self, CompilerRequest, build_compiler};
use gpfarm_evolve::{
    CallbackError, CasesFile, EvolveError, GenerationRecord, LoadProblem, Options, ProblemFiles, ProblemRef,
    RunSpec,
};
use gpfarm_protocol::FarmName;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// A run's configuration: the problem (`problem`, `problem_dir` or `memory_problem`), a warm
/// start's individuals (`start`), the CUDA directory (`cuda`), and the run's options: the
/// engine's [`RunSpec`], with `gpfarm evolve`'s names and defaults (`flag` and `link_flag` are
/// lists, `route="auto"`), read and set as attributes. Keywords are deserialised into the spec
/// (serde), so each option is named, typed and defaulted once, in the engine: an unknown keyword
/// raises `TypeError`, a value of the wrong type `TypeError`, a value out of its set
/// (`route="teleport"`) `ValueError`, and a value out of its range (`max_steps=0`) `ValueError`
/// when the run starts. `EvolveConfig.OPTIONS` lists the options' names.
#[pyclass(module = "gpfarm._gpfarm", from_py_object)]
#[derive(Debug, Clone)]
struct EvolveConfig {
    problem: Option<String>,
    problem_dir: Option<PathBuf>,
    memory_problem: Option<MemoryProblem>,
    start: Vec<(Vec<u32>, Vec<f32>)>,
    cuda: Option<PathBuf>,
    spec: RunSpec,
}

/// `value` with the text of a path for a path-like object (`pathlib.Path`), as the spec reads
/// paths as text.
fn plain<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if value.hasattr("__fspath__")? {
        return value.py().import("os")?.call_method1("fspath", (value,));
    }
    Ok(value.clone())
}

/// The spec `spec` with the options of `options` set: `TypeError` for an unknown option or a
/// value of the wrong type, `ValueError` for a value out of its set, naming the option.
fn set_options(py: Python<'_>, spec: &RunSpec, options: &Bound<'_, PyDict>) -> PyResult<RunSpec> {
    let fields = pythonize::pythonize(py, spec).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let fields = fields.cast_into::<PyDict>().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    for (name, value) in options.iter() {
        let name: String = name.extract()?;
        if !fields.contains(&name)? {
            return Err(PyTypeError::new_err(format!(
                "{name} is not an option of a run (the options are gpfarm evolve's: {})",
                RunSpec::names().join(", ")
            )));
        }
        fields.set_item(&name, plain(&value)?)?;
    }
    if let Ok(spec) = pythonize::depythonize::<RunSpec>(&fields) {
        return Ok(spec);
    }
    // Which value was refused, and why: each given alone.
    for name in options.keys() {
        let name: String = name.extract()?;
        let one = PyDict::new(py);
        one.set_item(&name, fields.get_item(&name)?)?;
        if let Err(e) = pythonize::depythonize::<RunSpec>(&one) {
            // A Python exception raised while reading the value comes as "TypeError: why".
            let text = e.to_string();
            let (kind, why) = match text.split_once(": ") {
                Some((kind, why)) if kind.ends_with("Error") && !kind.contains(' ') => (kind, why),
                _ => ("", text.as_str()),
            };
            return Err(match kind == "TypeError" || why.contains("invalid type") {
                true => PyTypeError::new_err(format!("{name}: {why}")),
                false => PyValueError::new_err(format!("{name}: {why}")),
            });
        }
    }
    pythonize::depythonize::<RunSpec>(&fields).map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pymethods]
impl EvolveConfig {
    #[new]
    #[pyo3(signature = (
        problem = Some("keijzer6".to_owned()), *, problem_dir = None, memory_problem = None, start = Vec::new(),
        cuda = None, **options
    ))]
    fn new(
        py: Python<'_>,
        problem: Option<String>,
        problem_dir: Option<PathBuf>,
        memory_problem: Option<MemoryProblem>,
        start: Vec<(Vec<u32>, Vec<f32>)>,
        cuda: Option<PathBuf>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<EvolveConfig> {
        let spec = match options {
            Some(options) => set_options(py, &RunSpec::default(), options)?,
            None => RunSpec::default(),
        };
        Ok(EvolveConfig { problem, problem_dir, memory_problem, start, cuda, spec })
    }

    /// The names of the run's options (the keywords besides the problem, `start` and `cuda`).
    #[classattr]
    #[allow(non_snake_case)]
    fn OPTIONS() -> Vec<String> {
        RunSpec::names()
    }

    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        use pyo3::IntoPyObjectExt;
        match name {
            "problem" => self.problem.clone().into_py_any(py),
            "problem_dir" => self.problem_dir.clone().into_py_any(py),
            "memory_problem" => self.memory_problem.clone().into_py_any(py),
            "start" => self.start.clone().into_py_any(py),
            "cuda" => self.cuda.clone().into_py_any(py),
            _ => {
                let fields = to_python(py, &self.spec)?;
                match fields.bind(py).cast::<PyDict>()?.get_item(name)? {
                    Some(value) => Ok(value.unbind()),
                    None => Err(pyo3::exceptions::PyAttributeError::new_err(format!(
                        "EvolveConfig has no attribute {name:?}"
                    ))),
                }
            }
        }
    }

    fn __setattr__(&mut self, py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        match name {
            "problem" => self.problem = value.extract()?,
            "problem_dir" => self.problem_dir = value.extract()?,
            "memory_problem" => self.memory_problem = value.extract()?,
            "start" => self.start = value.extract()?,
            "cuda" => self.cuda = value.extract()?,
            _ => {
                let one = PyDict::new(py);
                one.set_item(name, value)?;
                self.spec = set_options(py, &self.spec, &one)?;
            }
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("{self:?}")
    }
}

/// A problem held in memory: the text of its `problem.toml`, `grammar.bnf` and `template.cu`
/// and its cases as a `cases.npy` file's bytes, loaded and checked once, when made (a
/// `ValueError` says what is wrong). `evolve(None, memory_problem=...)` runs it on every route,
/// the GPU's included, and `outputs` computes a program on its cases: no file is written.
#[pyclass(module = "gpfarm._gpfarm", frozen, from_py_object)]
#[derive(Clone)]
struct MemoryProblem {
    files: Arc<ProblemFiles>,
    problem: Arc<gpfarm_gp::Problem>,
}

impl std::fmt::Debug for MemoryProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryProblem({:?}, {} cases)", self.problem.name(), self.problem.cases().len())
    }
}

#[pymethods]
impl MemoryProblem {
    /// `name` names the problem in error messages (`memory:<name>/cases.npy: case 3: ...`).
    #[new]
    #[pyo3(signature = (name, toml, grammar, template, cases_npy))]
    fn new(
        py: Python<'_>,
        name: &str,
        toml: String,
        grammar: String,
        template: String,
        cases_npy: &[u8],
    ) -> PyResult<MemoryProblem> {
        let files = Arc::new(ProblemFiles {
            origin: format!("memory:{name}"),
            toml,
            grammar,
            template,
            cases: CasesFile::Npy(cases_npy.to_vec()),
        });
        let source = ProblemRef::Memory(files.clone());
        let problem = py
            .detach(|| source.load().and_then(|p| gpfarm_gp::program::check_problem(&p).map(|()| p)))
            .map_err(|e| PyValueError::new_err(stderr_line(&anyhow::Error::new(e))))?;
        Ok(MemoryProblem { files, problem: Arc::new(problem) })
    }

    /// The problem's name (`problem.toml`'s).
    #[getter]
    fn name(&self) -> String {
        self.problem.name().to_owned()
    }

    /// How many cases it has.
    #[getter]
    fn cases(&self) -> usize {
        self.problem.cases().len()
    }

    fn __repr__(&self) -> String {
        format!("{self:?}")
    }
}

/// `ValueError` naming the option whose value is out of its set.
fn bad(option: &str, why: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{option}: {why}"))
}

impl EvolveConfig {
    /// The problem, the engine's options and the compiler request.
    fn plan(&self) -> PyResult<(ProblemRef, Options, CompilerRequest)> {
        let problem = match (&self.memory_problem, &self.problem_dir, &self.problem) {
            (Some(_), Some(_), _) => return Err(bad("memory_problem", "give it or problem_dir, not both")),
            (Some(memory), None, _) => ProblemRef::Memory(memory.files.clone()),
            (None, Some(dir), _) => ProblemRef::Dir(dir.clone()),
            (None, None, Some(name)) => ProblemRef::Builtin(name.clone()),
            (None, None, None) => {
                return Err(bad("problem", "give a built-in problem's name, problem_dir or memory_problem"));
            }
        };
        let start = self
            .start
            .iter()
            .map(|(genome, params)| match genome.is_empty() {
                true => Err(bad("start", "a genome has no codons")),
                false => Ok(gpfarm_gp::Seed { genome: genome.clone(), params: params.clone() }),
            })
            .collect::<PyResult<_>>()?;
        let spec_error = |e: gpfarm_evolve::OptionError| bad(e.option, e.why);
        // Loading the problem and starting the evaluator count.
        let options = self.spec.options(start, Some(std::time::Instant::now())).map_err(spec_error)?;
        let request = self.spec.compiler_request(self.cuda.as_deref()).map_err(spec_error)?;
        Ok((problem, options, request))
    }
}

/// What a run gave back to Python: each generation's record and the summary, as dicts.
type Records = (Vec<Py<PyAny>>, Py<PyAny>);

/// A record or summary as a Python dict, with the keys of its serde serialisation.
fn to_python<T: serde::Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    Ok(pythonize::pythonize(py, value).map_err(|e| PyRuntimeError::new_err(e.to_string()))?.unbind())
}

/// Runs the engine on `config`, calling `on_record(record)` with each generation's record (a
/// dict) as it completes. The run works on a thread of its own, without the interpreter lock;
/// this thread takes the lock to call `on_record` and, at least every 100 ms, to let Python
/// handle signals: Ctrl-C stops the run within a step of it (a unit compiled, a generation
/// evaluated) and raises `KeyboardInterrupt`. Returns every generation's record and the summary.
/// A value out of its set raises `ValueError`, as do settings that contradict each other; a run
/// that cannot start or fails raises `RuntimeError`; an exception raised by `on_record` ends the
/// run and propagates as it is. Daemons and segments the run started are gone when it returns,
/// in every case.
#[pyfunction]
#[pyo3(signature = (config, on_record=None))]
fn evolve(py: Python<'_>, config: EvolveConfig, on_record: Option<Py<PyAny>>) -> PyResult<Records> {
    let (problem, options, request) = config.plan()?;
    let (engine, mut compilers) =
        py.detach(|| plan::prepare(problem, options, &request)).map_err(start_error)?;
    let stop = engine.stopper();
    let (tx, rx) = crossbeam_channel::unbounded::<GenerationRecord>();
    let mut records = Vec::new();
    let mut raised: Option<PyErr> = None;
    let summary = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            let tx = tx;
            let summary = plan::run(&engine, &mut compilers, |record| {
                tx.send(record.clone()).map_err(|_| Box::new(EvolveError::Stopped) as CallbackError)
            });
            // The farm (daemons, segments) ends here, whatever the run's outcome.
            compilers.clear();
            summary
        });
        loop {
            match py.detach(|| rx.recv_timeout(Duration::from_millis(100))) {
                Ok(record) => match to_python(py, &record) {
                    Ok(dict) => {
                        if raised.is_none()
                            && let Some(f) = &on_record
                            && let Err(e) = f.call1(py, (dict.clone_ref(py),))
                        {
                            raised = Some(e);
                            stop.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        records.push(dict);
                    }
                    Err(e) => {
                        raised.get_or_insert(e);
                        stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                },
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
            if raised.is_none()
                && let Err(e) = py.check_signals()
            {
                raised = Some(e);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        py.detach(|| running.join())
    });
    if let Some(e) = raised {
        return Err(e);
    }
    let summary = match summary {
        Ok(Ok(summary)) => summary,
        Ok(Err(e)) => return Err(PyRuntimeError::new_err(stderr_line(&e.into()))),
        Err(_) => return Err(PyRuntimeError::new_err("the run panicked")),
    };
    Ok((records, to_python(py, &summary)?))
}

/// The exception for a run that could not start: `ValueError` for settings that contradict
/// each other, else `RuntimeError`.
fn start_error(e: EvolveError) -> PyErr {
    match e {
        EvolveError::Usage(why) => PyValueError::new_err(why),
        e => PyRuntimeError::new_err(stderr_line(&e.into())),
    }
}

/// The standard `template.cu` for the problem that `problem_toml` (a `problem.toml`'s text)
/// declares: the harness the interpreter and the PTX route run. `ValueError` if the TOML is
/// not a problem.
#[pyfunction]
fn standard_template(problem_toml: &str) -> PyResult<String> {
    let spec: gpfarm_gp::problem::ProblemSpec =
        toml::from_str(problem_toml).map_err(|e| PyValueError::new_err(format!("problem.toml: {e}")))?;
    Ok(gpfarm_gp::problem::standard_template(&spec))
}

/// Loads the problem in `directory` (as `gpfarm evolve --problem-dir` does) and returns its
/// name; `ValueError` saying which file and what is wrong otherwise.
#[pyfunction]
fn check_problem(directory: std::path::PathBuf) -> PyResult<String> {
    let problem = gpfarm_gp::Problem::load(&directory)
        .and_then(|p| gpfarm_gp::program::check_problem(&p).map(|()| p))
        .map_err(|e| PyValueError::new_err(stderr_line(&anyhow::Error::new(e))))?;
    Ok(problem.name().to_owned())
}

/// A problem as Python names it: a [`MemoryProblem`] or a problem directory.
#[derive(FromPyObject)]
enum ProblemArg {
    Memory(MemoryProblem),
    Dir(PathBuf),
}

/// The first output of `phenotype` on every case of `problem` (a `MemoryProblem` or a problem
/// directory), computed by the CPU evaluator (the reference every GPU route agrees with to 1e-4
/// or better). `ValueError` if the phenotype does not compile or fails to run.
#[pyfunction]
fn outputs(py: Python<'_>, problem: ProblemArg, phenotype: &str) -> PyResult<Vec<f64>> {
    let problem = match problem {
        ProblemArg::Memory(memory) => memory.problem,
        ProblemArg::Dir(directory) => Arc::new(
            gpfarm_gp::Problem::load(&directory)
                .map_err(|e| PyValueError::new_err(stderr_line(&anyhow::Error::new(e))))?,
        ),
    };
    let phenotype = gpfarm_gp::Phenotype::new(phenotype);
    let evaluation = py.detach(|| gpfarm_gp::evaluate_phenotype(&problem, &phenotype));
    let failure = evaluation.failure.map(|f| f.to_string());
    match evaluation.outputs.as_ref().and_then(|o| o.first()) {
        Some(gpfarm_gp::Column::Float(v)) => Ok(v.iter().map(|&x| f64::from(x)).collect()),
        Some(gpfarm_gp::Column::Int(v)) => Ok(v.iter().map(|&x| f64::from(x)).collect()),
        None => Err(PyValueError::new_err(format!(
            "`{}` gives no output: {}",
            phenotype.as_str(),
            failure.unwrap_or_else(|| "the problem declares none".into())
        ))),
    }
}

/// The steps of `phenotype`, an expression over float inputs named `names` (and free parameters
/// `p[k]`), in postfix order with C's types, for NumPy to compute in memory as the CPU
/// evaluator does: `(op, type, value)` where op is `const` (value the literal), `input`
/// (value the column), `param` (value k), `convert` (to the type), `neg`, `+ - * /`, or a math
/// function (`sin`, ... `pow`, `fmin`, `fmax`, `pdiv`), computed in the type (`float`, `double` or
/// `int`). `None` when the program uses anything else (ints beyond literals, comparisons, `?:`,
/// statements); `ValueError` when it does not parse.
#[pyfunction]
#[pyo3(signature = (names, phenotype, functions = Vec::new()))]
fn postfix(
    names: Vec<String>,
    phenotype: &str,
    functions: Vec<(String, Vec<String>, String)>,
) -> PyResult<Option<Vec<(String, String, f64)>>> {
    use gpfarm_gp::program::tree::{ArithOp, Bin, Body, Expr, Source, Ty, Value};
    let spec = model_spec(&names, functions)?;
    let program = gpfarm_gp::Program::parse_for(&spec, &gpfarm_gp::Phenotype::new(phenotype))
        .map_err(|e| PyValueError::new_err(format!("`{phenotype}` does not parse: {e}")))?;
    let Body::Expression(e) = program.body() else { return Ok(None) };
    let ty = |t: Ty| match t {
        Ty::Int => "int",
        Ty::Float => "float",
        Ty::Double => "double",
    };
    fn walk(
        e: &Expr,
        program: &gpfarm_gp::Program,
        ty: &dyn Fn(Ty) -> &'static str,
        out: &mut Vec<(String, String, f64)>,
    ) -> Option<()> {
        let types = program.slot_types();
        let mut push = |op: &str, t: Ty, v: f64| out.push((op.to_owned(), ty(t).to_owned(), v));
        match e {
            Expr::Const(Value::Int(v)) => push("const", Ty::Int, f64::from(*v)),
            Expr::Const(Value::Float(v)) => push("const", Ty::Float, f64::from(*v)),
            Expr::Const(Value::Double(v)) => push("const", Ty::Double, *v),
            Expr::Var(slot) => match program.slots()[*slot] {
                Source::Input(i) => push("input", Ty::Float, i as f64),
                Source::Param(k) => push("param", Ty::Float, k as f64),
                _ => return None,
            },
            Expr::Convert(t, a) => {
                walk(a, program, ty, out)?;
                out.push(("convert".into(), ty(*t).into(), 0.0));
            }
            Expr::Neg(a) => {
                walk(a, program, ty, out)?;
                out.push(("neg".into(), ty(a.ty(types)).into(), 0.0));
            }
            Expr::Chain(first, rest) => {
                walk(first, program, ty, out)?;
                let mut t = first.ty(types);
                for (op, b) in rest {
                    let Bin::Arith(op) = op else { return None };
                    walk(b, program, ty, out)?;
                    t = Ty::usual(t, b.ty(types));
                    if t == Ty::Int && *op == ArithOp::Div {
                        return None;
                    }
                    let sign = match op {
                        ArithOp::Add => "+",
                        ArithOp::Sub => "-",
                        ArithOp::Mul => "*",
                        ArithOp::Div => "/",
                    };
                    out.push((sign.into(), ty(t).into(), 0.0));
                }
            }
            Expr::Call1(f, t, a) => {
                walk(a, program, ty, out)?;
                out.push((f.c_name().into(), ty(*t).into(), 0.0));
            }
            Expr::Call2(f, t, a, b) => {
                walk(a, program, ty, out)?;
                walk(b, program, ty, out)?;
                out.push((f.c_name().into(), ty(*t).into(), 0.0));
            }
            _ => return None,
        }
        Some(())
    }
    let mut out = Vec::new();
    Ok(walk(e, &program, &ty, &mut out).map(|()| out))
}

/// `phenotype`, an expression over float inputs named `names`, simplified as a run's front is
/// ([`gpfarm_gp::simplify::readable`]): `(formula, code, size)`, the plain-text formula, the
/// simplified CUDA C and its size; `None` when it is not an arithmetic float expression or does
/// not parse.
#[pyfunction]
#[pyo3(signature = (names, phenotype, functions = Vec::new()))]
fn readable(
    names: Vec<String>,
    phenotype: &str,
    functions: Vec<(String, Vec<String>, String)>,
) -> PyResult<Option<(String, String, usize)>> {
    let spec = model_spec(&names, functions)?;
    Ok(gpfarm_gp::simplify::readable(&spec, &gpfarm_gp::Phenotype::new(phenotype))
        .map(|r| (r.formula, r.code.as_str().to_owned(), r.size)))
}

/// The specification of a regression model over float inputs `names`, with declared
/// `functions` (name, parameters, body), checked as `problem.toml` is: `ValueError` saying what
/// is wrong otherwise.
fn model_spec(
    names: &[String],
    functions: Vec<(String, Vec<String>, String)>,
) -> PyResult<gpfarm_gp::problem::ProblemSpec> {
    let inputs: String =
        names.iter().map(|n| format!("[[inputs]]\nname = {n:?}\ntype = \"float\"\n")).collect();
    let toml = format!(
        "name = \"model\"\nstart = \"e\"\nkind = \"expression\"\nfitness = \"rmse\"\n{inputs}\
         [[outputs]]\nname = \"y\"\ntype = \"float\"\n[target]\ntype = \"float\"\n"
    );
    let mut spec: gpfarm_gp::problem::ProblemSpec =
        toml::from_str(&toml).map_err(|e| PyValueError::new_err(format!("names: {e}")))?;
    spec.functions = functions
        .into_iter()
        .map(|(name, params, body)| gpfarm_gp::problem::spec::FunctionSpec { name, params, body })
        .collect();
    gpfarm_gp::program::check_spec(&spec).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(spec)
}

/// Checks operators of the user's own, as `[[functions]]` of a problem over float inputs
/// `names`: `ValueError` naming the function and what is wrong otherwise.
#[pyfunction]
fn check_functions(names: Vec<String>, functions: Vec<(String, Vec<String>, String)>) -> PyResult<()> {
    model_spec(&names, functions).map(|_| ())
}

/// A compiler from Python: by default a farm of `gpfarmd` daemons, one per core, started when it
/// is made and ended (daemons stopped, segments removed) by `close()` or at the end of a
/// `with` block, also when the block raises.
#[pyclass(module = "gpfarm._gpfarm")]
struct Farm {
    compiler: Mutex<Option<Box<dyn Compiler + Send>>>,
    options: CompileOptions,
    name: String,
}

#[pymethods]
impl Farm {
    /// `compiler`: `farm` (daemons), `farm:N`, `threads:N`, `inprocess` or `nvcc`; `workers`
    /// fills a count it leaves open (default one per core). `arch` (`sm_90`, ...) and `flags`
    /// (NVRTC options) apply to every unit. `attach` compiles on resident daemons started by
    /// `gpfarm daemons start` ("" for the default farm, or its name) instead of starting any.
    #[new]
    #[pyo3(signature = (compiler="farm", workers=None, arch="sm_90", flags=Vec::new(), cuda=None, attach=None))]
    fn new(
        py: Python<'_>,
        compiler: &str,
        workers: Option<usize>,
        arch: &str,
        flags: Vec<String>,
        cuda: Option<PathBuf>,
        attach: Option<String>,
    ) -> PyResult<Farm> {
        let spec: CompilerSpec =
            compiler.parse().map_err(|e| PyValueError::new_err(format!("compiler: {e}")))?;
        let arch: SmArch = arch.parse().map_err(|e| PyValueError::new_err(format!("arch: {e}")))?;
        let attach = match attach.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(name) => Some(Some(
                name.parse::<FarmName>().map_err(|e| PyValueError::new_err(format!("attach: {e}")))?,
            )),
        };
        let options = CompileOptions { flags, ..CompileOptions::cubin(arch) };
        let workers = match workers {
            None => None,
            Some(n) => Some(Workers::exactly(n).map_err(|e| bad("workers", e))?.count()),
        };
        let config = BuildConfig { cuda, attach, ..BuildConfig::default() };
        let built = py
            .detach(|| build_compiler(spec, workers, &options, &config))
            .map_err(|e| PyRuntimeError::new_err(stderr_line(&e.into())))?;
        let name = built.name();
        Ok(Farm { compiler: Mutex::new(Some(built)), options, name })
    }

    /// Compiles `units`, a list of CUDA C sources (named `unit0`, `unit1`, ...) or a dict of
    /// name to source, without the interpreter lock. Returns one dict per unit, in order:
    /// `name`, `ok`, `cubin` (bytes, or None), `failure` (None, or its kind: `compilation`,
    /// `invalid_source`, `internal`, `jit`, `lost`), `message`, `log`, and the times
    /// `compile_us`, `extract_us`, `jit_us`.
    fn compile(&self, py: Python<'_>, units: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyDict>>> {
        let named: Vec<(String, String)> = if let Ok(map) = units.cast::<PyDict>() {
            map.iter()
                .map(|(k, v)| Ok((k.extract::<String>()?, v.extract::<String>()?)))
                .collect::<PyResult<_>>()?
        } else {
            let list: Vec<String> = units.extract().map_err(|_| {
                PyTypeError::new_err("units must be a list of CUDA C sources or a dict of name to source")
            })?;
            list.into_iter().enumerate().map(|(k, s)| (format!("unit{k}"), s)).collect()
        };
        let wire: Vec<Unit> = named.iter().map(|(n, s)| Unit::new(n.clone(), s.clone())).collect();
        let batch = py.detach(|| {
            let mut guard = self.compiler.lock().unwrap_or_else(|p| p.into_inner());
            let compiler = guard.as_mut().ok_or_else(|| "the farm is closed".to_owned())?;
            compiler.compile(&wire, &self.options).map_err(|e| e.to_string())
        });
        let batch = batch.map_err(PyRuntimeError::new_err)?;
        let mut out = Vec::with_capacity(named.len());
        for ((name, _), r) in named.iter().zip(&batch.results) {
            let d = PyDict::new(py);
            d.set_item("name", name)?;
            d.set_item("ok", r.cubin().is_some())?;
            d.set_item("cubin", r.cubin().map(|c| PyBytes::new(py, c)))?;
            let (kind, message) = match &r.outcome {
                UnitOutcome::Cubin(_) => (None, String::new()),
                UnitOutcome::Failed(f) => (Some(failure_kind(f.kind)), f.message.clone()),
            };
            d.set_item("failure", kind)?;
            d.set_item("message", message)?;
            d.set_item("log", &r.log)?;
            d.set_item("compile_us", r.timings.compile_us)?;
            d.set_item("extract_us", r.timings.extract_us)?;
            d.set_item("jit_us", r.timings.jit_us)?;
            out.push(d.unbind());
        }
        py.check_signals()?;
        Ok(out)
    }

    /// Ends the compiler: its daemons are stopped and their segments removed. Idempotent.
    fn close(&self, py: Python<'_>) {
        let taken = self.compiler.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(|| drop(taken));
    }

    /// Whether `close()` has run.
    #[getter]
    fn closed(&self) -> bool {
        self.compiler.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// What the compiler is, e.g. `farm:16`.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("Farm({:?}{})", self.name, if self.closed() { ", closed" } else { "" })
    }
}

fn failure_kind(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Compilation => "compilation",
        FailureKind::InvalidSource => "invalid_source",
        FailureKind::Internal => "internal",
        FailureKind::Jit => "jit",
        FailureKind::Lost => "lost",
    }
}

/// Runs `gpfarmd` in this process with `argv` (its options) and returns its exit status: the
/// package's `gpfarmd` command, so that a farm started from Python finds a daemon beside the
/// interpreter without a build of the checkout. Only for that command's fresh process.
#[pyfunction]
fn daemon_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    let args: Vec<String> = std::iter::once("gpfarmd".to_owned()).chain(argv).collect();
    py.detach(|| gpfarm_entry::daemon::main(args))
}

/// Runs `gpfarm-gpu-worker` in this process with `argv` (its options) and returns its exit
/// status: the package's `gpfarm-gpu-worker` command. Only for that command's fresh process.
#[pyfunction]
fn gpu_worker_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    let args: Vec<String> = std::iter::once("gpfarm-gpu-worker".to_owned()).chain(argv).collect();
    py.detach(|| gpfarm_entry::gpu_worker::main(args))
}

/// Improves the kernel of the kernel directory `directory` (as `gpfarm improve` does) and returns
/// what it found as a dict: the front, the best variant and its held-out checks, one record per
/// generation. `ValueError` for a directory that breaks a rule; `RuntimeError` when the search
/// cannot run (no GPU, no CUDA toolchain, a source that does not compile).
#[pyfunction]
#[pyo3(signature = (directory, population = 64, generations = 20, time_limit = None, seed = 1, out = None, daemons = None))]
#[allow(clippy::too_many_arguments)]
fn improve(
    py: Python<'_>,
    directory: std::path::PathBuf,
    population: usize,
    generations: usize,
    time_limit: Option<f64>,
    seed: u64,
    out: Option<std::path::PathBuf>,
    daemons: Option<usize>,
) -> PyResult<Py<PyAny>> {
    let dir = gpfarm_improve::KernelDir::load(&directory)
        .map_err(|e| PyValueError::new_err(stderr_line(&anyhow::Error::new(e))))?;
    if population < 2 {
        return Err(PyValueError::new_err("population is at least 2"));
    }
    let mut config = gpfarm_improve::ImproveConfig {
        population,
        generations,
        time_limit: time_limit.map(std::time::Duration::from_secs_f64),
        seed,
        out,
        ..gpfarm_improve::ImproveConfig::default()
    };
    if let Some(n) = daemons {
        let n = gpfarm_client::Workers::exactly(n).map_err(|e| PyValueError::new_err(e.to_string()))?;
        config.compiler = config.compiler.or_workers(n.count());
    }
    let outcome = py
        .detach(|| gpfarm_improve::improve(&dir, &config, |_| {}))
        .map_err(|e| PyRuntimeError::new_err(stderr_line(&anyhow::Error::new(e))))?;
    to_python(py, &outcome)
}

/// The names of the built-in problems.
#[pyfunction]
fn builtin_problems() -> Vec<String> {
    gpfarm_gp::Problem::builtin_names().iter().map(|s| s.to_string()).collect()
}

#[pymodule]
fn _gpfarm(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(evolve, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_problems, m)?)?;
    m.add_function(wrap_pyfunction!(improve, m)?)?;
    m.add_function(wrap_pyfunction!(standard_template, m)?)?;
    m.add_function(wrap_pyfunction!(check_problem, m)?)?;
    m.add_function(wrap_pyfunction!(outputs, m)?)?;
    m.add_function(wrap_pyfunction!(postfix, m)?)?;
    m.add_function(wrap_pyfunction!(readable, m)?)?;
    m.add_function(wrap_pyfunction!(check_functions, m)?)?;
    m.add_class::<Farm>()?;
    m.add_class::<EvolveConfig>()?;
    m.add_class::<MemoryProblem>()?;
    m.add_function(wrap_pyfunction!(daemon_main, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_worker_main, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
