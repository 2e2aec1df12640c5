//! Prints the interpreter kernel's CUDA C for a built-in problem: `cargo run -p gpfarm-kernels
//! --example interpreter_source -- keijzer6 [tuning]` (a tuning as `gpfarm bench --tunings` takes
//! it, e.g. `4b6`). For reading the kernel and for `nvcc --ptxas-options=-v` (registers, stack
//! frame, spills).

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "keijzer6".into());
    let tuning = args.next().map_or_else(Default::default, |t| t.parse().expect("a tuning"));
    let problem = gpfarm_gp::Problem::builtin(&name).expect("a built-in problem");
    print!(
        "{}",
        gpfarm_kernels::interpreter::interpreter_source_with(&problem, tuning)
            .expect("the interpreter's source")
    );
}
