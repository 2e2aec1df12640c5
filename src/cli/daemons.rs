//! `gpfarm daemons start|status|stop|clean`: resident daemons shared by later runs.
//!
//! `status` lists every farm of this user, resident or the temporary farm of a running `evolve`
//! or `compile` (marked with its owner); `stop` ends resident farms only, unless `--all`, since
//! stopping a job's own daemons fails the job.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Subcommand;
use gpfarm_client::{Farm, FarmConfig, FarmKind, farm_status, farms_to_stop, stop_farm};
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
    /// Show running farms (resident, and the temporary ones of running jobs) and their daemons.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a resident farm's daemons (every resident farm if none is named) and remove their
    /// segments.
    Stop {
        /// The farm.
        name: Option<FarmName>,
        /// Also stop temporary farms, those of running `evolve` or `compile` jobs (which then
        /// fail).
        #[arg(long)]
        all: bool,
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
                resident: true,
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
            println!(
                "attach with: gpfarm compile --attach --farm {0} ... or gpfarm evolve --attach --farm {0} ...",
                farm.name()
            );
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
                    println!("farm {} ({} daemons, {})", f.name, f.daemons.len(), f.kind);
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
        DaemonsCommand::Stop { name, all } => {
            let farms = farm_status();
            let chosen = farms_to_stop(&farms, name.as_ref(), all)?;
            if chosen.is_empty() {
                let what = if all { "no farm running" } else { "no resident farm running" };
                let temporary = farms.iter().filter(|f| f.kind != FarmKind::Resident).count();
                if temporary > 0 && !all {
                    let farms = if temporary == 1 { "farm" } else { "farms" };
                    println!(
                        "{what}; left alone: {temporary} temporary {farms} of running jobs (--all stops them)"
                    );
                } else {
                    println!("{what}");
                }
                return Ok(());
            }
            for f in chosen {
                // Names listed by `farm_status` were parsed from segment names, so they parse.
                let Ok(name) = f.name.parse::<FarmName>() else { continue };
                let n = stop_farm(&name, Duration::from_secs(5));
                println!("farm {name}: stopped {n} daemons");
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
