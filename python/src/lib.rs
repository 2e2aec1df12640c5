//! `gpfarm._gpfarm`: the native half of the Python package. It takes `gpfarm evolve`'s options
//! as the command line spells them, so the package and the CLI parse them with one definition
//! (`gpfarm::cli::evolve::EvolveArgs`); `gpfarm/__init__.py` turns keyword arguments into them.

use clap::Parser;
use gpfarm::cli::UsageError;
use gpfarm::cli::evolve::{EvolveArgs, prepare};
use gpfarm::stderr::one_line as stderr_line;
use gpfarm_evolve::{CallbackError, EvolveError};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

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
/// `on_record(json)` after each generation (the interpreter lock is taken for it and released
/// again; Ctrl-C is noticed there). Returns every generation's record and the summary, each as
/// JSON text. Options the command line refuses raise `TypeError` (an unknown option) or
/// `ValueError`; a run that cannot start or fails raises `RuntimeError`; an exception raised by
/// `on_record`, `KeyboardInterrupt` included, ends the run and propagates as it is. Daemons and
/// segments the run started are gone when it returns, in every case.
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
    let outcome = py.detach(|| -> Result<Records, Failure> {
        let cuda = cuda.as_deref().map(std::path::Path::new);
        let (engine, mut compiler) = prepare(&args, cuda).map_err(Failure::Start)?;
        let mut records = Vec::new();
        let summary = engine.run_with(compiler.as_deref_mut(), |record| {
            let text = serde_json::to_string(record)?;
            Python::attach(|py| -> PyResult<()> {
                py.check_signals()?;
                if let Some(f) = &on_record {
                    f.call1(py, (text.clone(),))?;
                }
                Ok(())
            })
            .map_err(|e| Box::new(e) as CallbackError)?;
            records.push(text);
            Ok(())
        });
        // The farm (daemons, segments) ends here, whatever the run's outcome.
        drop(compiler);
        let summary = summary.map_err(Failure::Run)?;
        let summary = serde_json::to_string(&summary).map_err(|e| Failure::Start(e.into()))?;
        Ok((records, summary))
    });
    outcome.map_err(|f| match f {
        Failure::Start(e) if e.chain().any(|c| c.is::<UsageError>()) => {
            PyValueError::new_err(stderr_line(&e))
        }
        Failure::Start(e) => PyRuntimeError::new_err(stderr_line(&e)),
        Failure::Run(EvolveError::Callback(source)) => match source.downcast::<PyErr>() {
            Ok(e) => *e,
            Err(other) => PyRuntimeError::new_err(format!("the generation callback failed: {other}")),
        },
        Failure::Run(e) => PyRuntimeError::new_err(stderr_line(&e.into())),
    })
}

/// Why a run did not end well.
enum Failure {
    /// The engine or its compiler could not start.
    Start(anyhow::Error),
    /// The run stopped.
    Run(EvolveError),
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
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
