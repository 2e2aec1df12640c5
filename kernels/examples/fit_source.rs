//! Prints the interpreter's fitting kernels' CUDA C for a problem directory: `cargo run -p
//! gpfarm-kernels --example fit_source -- examples/friedman1`. For reading the kernels and for
//! `nvcc --ptxas-options=-v` (registers, stack frame, spills per kernel).

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "examples/friedman1".into());
    let problem = gpfarm_gp::Problem::load(std::path::Path::new(&dir)).expect("a problem directory");
    print!("{}", gpfarm_kernels::interpreter::fit_source(&problem).expect("the fitting kernels' source"));
}
