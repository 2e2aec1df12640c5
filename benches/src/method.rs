//! The methods compared: nvcc, in-process NVRTC, threads, the farm, and the paper's PTX + JIT path.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use anyhow::{Result, bail};
use gpfarm_client::{CompileOptions, Compiler, Farm, FarmConfig, InProcess, Nvcc, Threads};
use gpfarm_toolchain::Toolchain;

use crate::BenchConfig;

/// One way of compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `nvcc -cubin`, one process per unit.
    Nvcc,
    /// NVRTC in this process.
    InProcess,
    /// NVRTC from k threads.
    Threads(usize),
    /// k daemons, NVRTC to CUBIN.
    Farm(usize),
    /// k daemons, NVRTC to PTX then the driver's JIT (needs a GPU).
    FarmJit(usize),
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Nvcc => write!(f, "nvcc"),
            Method::InProcess => write!(f, "inprocess"),
            Method::Threads(k) => write!(f, "threads:{k}"),
            Method::Farm(k) => write!(f, "farm:{k}"),
            Method::FarmJit(k) => write!(f, "farm-jit:{k}"),
        }
    }
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, k) = match s.split_once(':') {
            Some((n, k)) => (n, Some(k.parse::<usize>().map_err(|_| format!("bad worker count in {s:?}"))?)),
            None => (s, None),
        };
        match (name, k) {
            ("nvcc", None) => Ok(Method::Nvcc),
            ("inprocess", None) => Ok(Method::InProcess),
            ("threads", Some(k)) if k > 0 => Ok(Method::Threads(k)),
            ("farm", Some(k)) if k > 0 => Ok(Method::Farm(k)),
            ("farm-jit", Some(k)) if k > 0 => Ok(Method::FarmJit(k)),
            _ => Err(format!("unknown method {s:?}: use nvcc, inprocess, threads:K, farm:K or farm-jit:K")),
        }
    }
}

impl Method {
    /// Workers it uses (1 for nvcc and in-process).
    pub fn workers(&self) -> usize {
        match self {
            Method::Nvcc | Method::InProcess => 1,
            Method::Threads(k) | Method::Farm(k) | Method::FarmJit(k) => *k,
        }
    }

    /// Builds the compiler, warm.
    pub fn build(&self, config: &BenchConfig, options: &CompileOptions) -> Result<Box<dyn Compiler>> {
        let toolchain = || Toolchain::discover(config.cuda.as_deref());
        Ok(match self {
            Method::Nvcc => Box::new(Nvcc::new(&toolchain()?)?),
            Method::InProcess => {
                gpfarm_toolchain::tune_allocator();
                Box::new(InProcess::new(&toolchain()?, options)?)
            }
            Method::Threads(k) => {
                gpfarm_toolchain::tune_allocator();
                Box::new(Threads::new(&toolchain()?, options, *k)?)
            }
            Method::Farm(k) | Method::FarmJit(k) => {
                if matches!(self, Method::FarmJit(_)) && gpfarm_kernels::gpu::probe().is_err() {
                    bail!("the PTX + JIT path needs a GPU");
                }
                let farm = Farm::spawn(FarmConfig {
                    daemons: *k,
                    cuda: config.cuda.as_deref().map(Path::to_path_buf),
                    warmup_arch: options.arch,
                    gpu_context: matches!(self, Method::FarmJit(_)),
                    ..FarmConfig::default()
                })?;
                Box::new(farm)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_round_trip() {
        for m in [Method::Nvcc, Method::InProcess, Method::Threads(4), Method::Farm(16), Method::FarmJit(8)] {
            assert_eq!(m.to_string().parse::<Method>(), Ok(m));
        }
        assert!("farm:0".parse::<Method>().is_err());
        assert!("farm".parse::<Method>().is_err());
    }
}
