//! `gpfarm daemons start|status|stop|clean`: resident daemons shared by later runs.
//!
//! `status` lists every farm of this user, resident or the temporary farm of a running `evolve`
//! or `compile` (marked with its owner); `stop` ends resident farms only, unless `--all`, since
//! stopping a job's own daemons fails the job.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use gpfarm_client::{Farm, FarmConfig, FarmKind, farm_status, farms_to_stop, stop_farm};
use gpfarm_protocol::segment::remove_stale_segments;
use gpfarm_protocol::{FarmName, SmArch};

/// Subcommands of `gpfarm daemons`.
#[derive(Debug, Subcommand)]
pub enum DaemonsCommand {
    /// Start N daemons and keep them until Ctrl-C (or, with --detach, in the background): a daemon
    /// that dies, is left by a client that died mid-unit, or grows past its memory limit is
    /// replaced; `gpfarm daemons stop` ends them.
    Start {
        /// Number of daemons (default: one per core).
        #[arg(short = 'n', long, value_parser = crate::cli::count::<4096>)]
        daemons: Option<usize>,
        /// Farm name (a-z, 0-9); default: a random one.
        #[arg(long)]
        name: Option<FarmName>,
        /// Architecture of the warm-up compile.
        #[arg(long, default_value = "sm_90")]
        arch: SmArch,
        /// Return once the daemons are up, leaving them running with a keeper process in the
        /// background (stop with `gpfarm daemons stop`).
        #[arg(long)]
        detach: bool,
        /// Let each daemon hold a CUDA context, as `--mode ptx-jit` needs (CUBIN does not).
        #[arg(long)]
        gpu_context: bool,
        /// Replace a daemon that, idle after a unit, holds more than this many MiB (default: four
        /// times its warm size).
        #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..))]
        max_rss_mib: Option<u64>,
        /// With --detach: append the keeper's log (what it replaced, and why) to this file.
        #[arg(long, value_name = "FILE", requires = "detach")]
        log: Option<std::path::PathBuf>,
        /// Run as the background keeper of a `--detach`ed farm (started by `--detach` itself).
        #[arg(long, hide = true)]
        keeper: bool,
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
        DaemonsCommand::Start { daemons, name, arch, detach, gpu_context, max_rss_mib, log, keeper } => {
            let config = FarmConfig {
                daemons: daemons
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                cuda: cuda.map(Path::to_path_buf),
                warmup_arch: arch,
                resident: true,
                gpu_context,
                max_rss: max_rss_mib.map(|m| m << 20),
                ..FarmConfig::default()
            };
            let name = name.unwrap_or_else(FarmName::random);
            if keeper {
                return run_keeper(name, config, log.as_deref());
            }
            if detach {
                let log = match log {
                    Some(p) => Some(std::path::absolute(&p).with_context(|| format!("{}", p.display()))?),
                    None => None,
                };
                return start_keeper(&name, daemons, arch, gpu_context, max_rss_mib, log.as_deref(), cuda);
            }
            let stop = Arc::new(AtomicBool::new(false));
            {
                let stop = Arc::clone(&stop);
                ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
                    .context("installing the Ctrl-C handler")?;
            }
            let farm = Farm::spawn_named(name, FarmConfig { stop: Some(Arc::clone(&stop)), ..config })?;
            print!("{}", ready_text(&farm));
            println!("Ctrl-C stops them");
            keep(farm, &stop, &mut std::io::stdout());
            println!("stopped");
            Ok(())
        }
        DaemonsCommand::Status { json } => {
            let farms = farm_status();
            for (n, why) in gpfarm_protocol::segment::impostors() {
                let path =
                    gpfarm_protocol::segment::path_of(&n).map_or(n.to_string(), |p| p.display().to_string());
                eprintln!("ignored {path}: not this user's segment ({why})");
            }
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

/// What `gpfarm daemons start` prints once its farm is up.
fn ready_text(farm: &Farm) -> String {
    let info = farm.daemon_info();
    let nvrtc = info
        .first()
        .map(|i| format!("NVRTC {}.{} ({})", i.nvrtc_version.0, i.nvrtc_version.1, i.nvrtc_path))
        .unwrap_or_default();
    format!(
        "farm {0}: {1} daemons ready, {nvrtc}\nattach with: gpfarm compile --attach --farm {0} ... or gpfarm evolve --attach --farm {0} ...\n",
        farm.name(),
        farm.len()
    )
}

/// How often the keeper of a resident farm looks at its daemons.
const KEEP_EVERY: Duration = Duration::from_millis(20);

/// Keeps a resident farm whole until `stop` is set or every daemon has been stopped (by `gpfarm
/// daemons stop`), saying on `log` what it replaced and why.
fn keep(mut farm: Farm, stop: &AtomicBool, log: &mut dyn Write) {
    farm.release();
    while !stop.load(Ordering::SeqCst) {
        for h in farm.heal() {
            let done = if h.replaced {
                "replaced"
            } else if h.again {
                "trying again"
            } else if h.why.starts_with("stopped") {
                "left out"
            } else {
                "could not be replaced"
            };
            let _ = writeln!(log, "daemon {}: {}; {done}", h.id, h.why);
        }
        if farm.is_empty() {
            let _ = writeln!(log, "every daemon of farm {} was stopped", farm.name());
            break;
        }
        std::thread::sleep(KEEP_EVERY);
    }
    drop(farm);
}

/// `--detach`: starts the keeper (this program with `--keeper`) in a session of its own, prints
/// what it reports, and returns once its farm is up or it has failed.
fn start_keeper(
    name: &FarmName,
    daemons: Option<usize>,
    arch: SmArch,
    gpu_context: bool,
    max_rss_mib: Option<u64>,
    log: Option<&Path>,
    cuda: Option<&Path>,
) -> Result<()> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(cuda) = cuda {
        cmd.arg("--cuda").arg(cuda);
    }
    cmd.args(["daemons", "start", "--keeper", "--name", name.as_str(), "--arch", &arch.to_string()]);
    if let Some(n) = daemons {
        cmd.arg("-n").arg(n.to_string());
    }
    if gpu_context {
        cmd.arg("--gpu-context");
    }
    if let Some(m) = max_rss_mib {
        cmd.arg("--max-rss-mib").arg(m.to_string());
    }
    if let Some(log) = log {
        cmd.arg("--detach").arg("--log").arg(log);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; it makes the keeper a session of its own, so that
    // neither this terminal's signals nor its closing reach it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    };
    let mut keeper = cmd.spawn().context("starting the farm's keeper")?;
    let mut report = String::new();
    if let Some(mut out) = keeper.stdout.take() {
        out.read_to_string(&mut report).context("reading the keeper's report")?;
    }
    match report.strip_suffix(READY) {
        Some(text) => {
            print!("{text}");
            println!("kept by pid {} in the background; stop with: gpfarm daemons stop {name}", keeper.id());
            Ok(())
        }
        None => {
            let status = keeper.wait().context("waiting for the keeper")?;
            let why = report.trim().strip_prefix("error: ").unwrap_or(report.trim()).to_string();
            if why.is_empty() {
                bail!("the farm's keeper ended ({status}) before its daemons were up");
            }
            bail!("{why}")
        }
    }
}

/// The keeper's last line to its starter once the farm is up.
const READY: &str = "ready\n";

/// The background keeper of a `--detach`ed farm: reports to its starter through its stdout, then
/// lets go of it (daemons and everything else it starts get `/dev/null`), and keeps the farm
/// until `gpfarm daemons stop` (SIGTERM) or until every daemon is stopped.
fn run_keeper(name: FarmName, mut config: FarmConfig, log: Option<&Path>) -> Result<()> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain descriptor calls: the report pipe is moved to a close-on-exec descriptor
    // (daemons must not hold it open, or the starter would never see its end), and /dev/null
    // takes stdin, stdout and stderr.
    let mut report = unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if fd < 0 || null < 0 {
            bail!("the keeper cannot set up its descriptors: {}", std::io::Error::last_os_error());
        }
        for target in 0..3 {
            libc::dup2(null, target);
        }
        libc::close(null);
        std::fs::File::from_raw_fd(fd)
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .context("installing the SIGTERM handler")?;
    }
    config.stop = Some(Arc::clone(&stop));
    let farm = match Farm::spawn_named(name, config) {
        Ok(farm) => farm,
        Err(e) => {
            let _ = writeln!(report, "error: {}", crate::stderr::one_line(&anyhow::Error::from(e)));
            std::process::exit(1);
        }
    };
    let mut log: Box<dyn Write> = match log {
        Some(path) => match std::fs::OpenOptions::new().create(true).append(true).open(path) {
            Ok(f) => Box::new(f),
            Err(e) => {
                let _ = writeln!(report, "error: cannot open the keeper's log {}: {e}", path.display());
                std::process::exit(1);
            }
        },
        None => Box::new(std::io::sink()),
    };
    let _ = write!(report, "{}{READY}", ready_text(&farm));
    drop(report);
    let _ = write!(log, "{}", ready_text(&farm));
    keep(farm, &stop, &mut log);
    Ok(())
}
