//! The methods compared are compiler specs ([`CompilerSpec`]: nvcc, in-process NVRTC, threads,
//! the farm, and the paper's PTX + JIT path), always with an explicit worker count, so that a
//! row's method name means the same on every machine. Building one is the client's
//! [`CompilerSpec::build`]; this file must never build a compiler itself.

use gpfarm_client::{CompilerSpec, SpecError, Workers};
use thiserror::Error;

/// One way of compiling, as a benchmark row names it.
pub type Method = CompilerSpec;

/// A method name that does not parse, or leaves its worker count open.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MethodError {
    /// Not a compiler spec.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// `farm` or `threads` without `:K`.
    #[error("{0:?}: give the worker count ({0}:K), so the results say what was measured")]
    OpenCount(String),
}

/// Parses a method: a compiler spec whose threads and farms say how many workers they have.
pub fn parse(s: &str) -> Result<Method, MethodError> {
    let spec: CompilerSpec = s.parse()?;
    if spec.workers() == Some(Workers::PerCore) {
        return Err(MethodError::OpenCount(s.to_owned()));
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use super::*;

    #[test]
    fn method_names_round_trip() {
        let k = |n| Workers::Exactly(NonZeroUsize::new(n).expect("n > 0"));
        for m in [
            Method::Nvcc,
            Method::InProcess,
            Method::Threads(k(4)),
            Method::Farm(k(16)),
            Method::FarmJit(k(8)),
        ] {
            assert_eq!(parse(&m.to_string()), Ok(m));
        }
        assert!(parse("farm:0").is_err());
        assert!(parse("farm").is_err());
    }
}
