//! gpfarm-gpu-worker: the GPU evaluation worker, driven by its parent (`gpfarm_client::GpuWorker`)
//! over stdin and stdout. All of it lives in `gpfarm_entry::gpu_worker`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(gpfarm_entry::gpu_worker::main(std::env::args()))
}
