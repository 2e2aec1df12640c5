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

/// The names of the built-in problems.
#[pyfunction]
fn builtin_problems() -> Vec<String> {
    gpfarm_gp::Problem::builtin_names().iter().map(|s| s.to_string()).collect()
}

#[pymodule]
fn _gpfarm(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(evolve, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_problems, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
