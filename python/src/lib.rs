//! `gpfarm._gpfarm`: the native half of the Python package. It takes `gpfarm evolve`'s options
//! as the command line spells them, so the package and the CLI parse them with one definition
//! (`gpfarm::cli::evolve::EvolveArgs`); `gpfarm/__init__.py` turns keyword arguments into them.

use std::sync::Mutex;

use clap::Parser;
use gpfarm::cli::UsageError;
use gpfarm::cli::compilers::{FarmSource, build};
use gpfarm::cli::evolve::{EvolveArgs, prepare};
use gpfarm::stderr::one_line as stderr_line;
use gpfarm_client::{CompileOptions, Compiler, CompilerSpec, FailureKind, SmArch, Unit, UnitOutcome};
use gpfarm_evolve::plan::run as run_engine;
use gpfarm_evolve::{CallbackError, EvolveError};
use gpfarm_protocol::FarmName;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// `gpfarm evolve`'s arguments, parsed on their own.
#[derive(Debug, Parser)]
#[command(name = "evolve", no_binary_name = true, disable_help_flag = true, disable_version_flag = true)]
struct Evolve {
    #[command(flatten)]
    args: EvolveArgs,
}

/// What a run gave back to Python: each generation's record and the summary, as JSON.
type Records = (Vec<String>, String);

/// Runs `gpfarm evolve` with `argv` (its options, without the subcommand), calling
/// `on_record(json)` after each generation. The run works on a thread of its own, without the
/// interpreter lock; this thread takes the lock to call `on_record` and, at least every 100 ms,
/// to let Python handle signals: Ctrl-C stops the run within a step of it (a unit compiled, a
/// generation evaluated) and raises `KeyboardInterrupt`. Returns every generation's record and
/// the summary, each as JSON text. Options the command line refuses raise `TypeError` (an
/// unknown option) or `ValueError`; a run that cannot start or fails raises `RuntimeError`; an
/// exception raised by `on_record` ends the run and propagates as it is. Daemons and segments
/// the run started are gone when it returns, in every case.
#[pyfunction]
#[pyo3(signature = (argv, on_record=None, cuda=None))]
fn evolve(
    py: Python<'_>,
    argv: Vec<String>,
    on_record: Option<Py<PyAny>>,
    cuda: Option<String>,
) -> PyResult<Records> {
    let Evolve { args } = Evolve::try_parse_from(&argv).map_err(|e| {
        let text = e.render().to_string();
        let text = text.trim_end().trim_start_matches("error: ");
        match e.kind() {
            clap::error::ErrorKind::UnknownArgument => PyTypeError::new_err(text.to_owned()),
            _ => PyValueError::new_err(text.to_owned()),
        }
    })?;
    let cuda = cuda.as_deref().map(std::path::Path::new);
    let (engine, mut compilers) = py.detach(|| prepare(&args, cuda)).map_err(|e| start_error(&e))?;
    let stop = engine.stopper();
    let (tx, rx) = crossbeam_channel::unbounded::<String>();
    let mut records = Vec::new();
    let mut raised: Option<PyErr> = None;
    let summary = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            let tx = tx;
            let summary = run_engine(&engine, &mut compilers, |record| {
                tx.send(serde_json::to_string(record)?)
                    .map_err(|_| Box::new(EvolveError::Stopped) as CallbackError)
            });
            // The farm (daemons, segments) ends here, whatever the run's outcome.
            compilers.clear();
            summary
        });
        loop {
            match py.detach(|| rx.recv_timeout(std::time::Duration::from_millis(100))) {
                Ok(text) => {
                    if raised.is_none()
                        && let Some(f) = &on_record
                        && let Err(e) = f.call1(py, (text.clone(),))
                    {
                        raised = Some(e);
                        stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    records.push(text);
                }
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
    let summary = serde_json::to_string(&summary).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok((records, summary))
}

/// The exception for a run that could not start: `ValueError` for a usage error, else
/// `RuntimeError`.
fn start_error(e: &anyhow::Error) -> PyErr {
    if e.chain().any(|c| c.is::<UsageError>()) {
        PyValueError::new_err(stderr_line(e))
    } else {
        PyRuntimeError::new_err(stderr_line(e))
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
        .map_err(|e| PyValueError::new_err(stderr_line(&anyhow::Error::new(e))))?;
    Ok(problem.name().to_owned())
}

/// The first output of `phenotype` on every case of the problem in `directory`, computed by the
/// CPU evaluator (the reference every GPU route agrees with to 1e-4 or better). `ValueError` if
/// the phenotype does not compile or fails to run.
#[pyfunction]
fn outputs(py: Python<'_>, directory: std::path::PathBuf, phenotype: &str) -> PyResult<Vec<f64>> {
    let problem = gpfarm_gp::Problem::load(&directory)
        .map_err(|e| PyValueError::new_err(stderr_line(&anyhow::Error::new(e))))?;
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
        cuda: Option<std::path::PathBuf>,
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
        let source = FarmSource { attach, deadline_s: None };
        let built = py
            .detach(|| build(spec, workers, cuda.as_deref(), &options, &source))
            .map_err(|e| PyRuntimeError::new_err(stderr_line(&e)))?;
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
    py.detach(|| gpfarm::cli::daemon::main(args))
}

/// Runs `gpfarm-gpu-worker` in this process with `argv` (its options) and returns its exit
/// status: the package's `gpfarm-gpu-worker` command. Only for that command's fresh process.
#[pyfunction]
fn gpu_worker_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    let args: Vec<String> = std::iter::once("gpfarm-gpu-worker".to_owned()).chain(argv).collect();
    py.detach(|| gpfarm::cli::gpu_worker::main(args))
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
    m.add_function(wrap_pyfunction!(standard_template, m)?)?;
    m.add_function(wrap_pyfunction!(check_problem, m)?)?;
    m.add_function(wrap_pyfunction!(outputs, m)?)?;
    m.add_class::<Farm>()?;
    m.add_function(wrap_pyfunction!(daemon_main, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_worker_main, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
