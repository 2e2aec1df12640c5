//! The entry points of the processes gpfarm starts besides itself, and what every gpfarm process
//! writes on stderr: the `gpfarmd` and `gpfarm-gpu-worker` binaries and the Python package's
//! commands of those names all run [`daemon::main`] and [`gpu_worker::main`], so that the
//! package needs neither the command line nor a build of the checkout to start them.

pub mod daemon;
pub mod gpu_worker;
pub mod stderr;
