//! `gpfarm daemons start|status|stop|clean`: resident daemons shared by later runs.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use gpfarm_client::{Farm, FarmConfig, farm_status, stop_farm};
use gpfarm_protocol::segment::remove_stale_segments;
use gpfarm_protocol::{FarmName, SmArch};

/// Subcommands of `gpfarm daemons`.
#[derive(Debug, Subcommand)]
pub enum DaemonsCommand {
    /// Start N daemons and keep them until Ctrl-C (or, with --detach, in the background).
    Start {
        /// Number of daemons (default: one per core).
        #[arg(short = 'n', long)]
        daemons: Option<usize>,
        /// Farm name (a-z, 0-9); default: a random one.
        #[arg(long)]
        name: Option<FarmName>,
        /// Architecture of the warm-up compile.
        #[arg(long, default_value = "sm_90")]
        arch: SmArch,
        /// Return once the daemons are up, leaving them running (stop with `gpfarm daemons stop`).
        #[arg(long)]
        detach: bool,
        /// Let each daemon hold a CUDA context, as `--mode ptx-jit` needs (CUBIN does not).
        #[arg(long)]
        gpu_context: bool,
    },
    /// Show running farms and their daemons.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a farm's daemons (all farms if none is named) and remove their segments.
    Stop {
        /// The farm.
        name: Option<FarmName>,
    },
    /// Remove segments left by daemons that were killed.
    Clean,
}

/// Runs a `gpfarm daemons` subcommand.
pub fn run(cmd: DaemonsCommand, cuda: Option<&Path>) -> Result<()> {
    match cmd {
        DaemonsCommand::Start { daemons, name, arch, detach, gpu_context } => {
            let config = FarmConfig {
                daemons: daemons
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                cuda: cuda.map(Path::to_path_buf),
                warmup_arch: arch,
                detached: detach,
                gpu_context,
                ..FarmConfig::default()
            };
            let stop = Arc::new(AtomicBool::new(false));
            if !detach {
                let stop = Arc::clone(&stop);
                ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
                    .context("installing the Ctrl-C handler")?;
            }
            let mut farm = Farm::spawn_named(name.unwrap_or_else(FarmName::random), config)?;
            let info = farm.daemon_info();
            let nvrtc = info
                .first()
                .map(|i| format!("NVRTC {}.{} ({})", i.nvrtc_version.0, i.nvrtc_version.1, i.nvrtc_path))
                .unwrap_or_default();
            println!("farm {}: {} daemons ready, {nvrtc}", farm.name(), farm.len());
            println!("attach with: gpfarm compile --attach --farm {} ...", farm.name());
            if detach {
                farm.detach();
                return Ok(());
            }
            farm.release();
            println!("Ctrl-C stops them");
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(farm);
            println!("stopped");
            Ok(())
        }
        DaemonsCommand::Status { json } => {
            let farms = farm_status();
            if json {
                println!("{}", serde_json::to_string_pretty(&farms)?);
            } else if farms.is_empty() {
                println!("no farms running");
            } else {
                for f in farms {
                    println!("farm {} ({} daemons)", f.name, f.daemons.len());
                    for d in f.daemons {
                        let client = if d.client_pid == 0 {
                            "free".to_string()
                        } else {
                            format!("used by {}", d.client_pid)
                        };
                        println!("  #{:<3} pid {:<8} {:<10} {client}", d.id, d.pid, d.state);
                    }
                }
            }
            Ok(())
        }
        DaemonsCommand::Stop { name } => {
            let farms: Vec<FarmName> = match name {
                Some(n) => vec![n],
                None => farm_status().into_iter().filter_map(|f| f.name.parse().ok()).collect(),
            };
            if farms.is_empty() {
                bail!("no farms running");
            }
            for f in farms {
                let n = stop_farm(&f, Duration::from_secs(5));
                println!("farm {f}: stopped {n} daemons");
            }
            Ok(())
        }
        DaemonsCommand::Clean => {
            let removed = remove_stale_segments(None);
            println!("removed {} stale segments", removed.len());
            Ok(())
        }
    }
}
