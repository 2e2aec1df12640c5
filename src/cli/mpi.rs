//! `mpirun -np R gpfarm evolve ...`: islands on several processes. Each rank runs `--islands`
//! islands (ring indices `rank * islands ..`) with its own farm and GPU(s); the ring runs through
//! every rank, and the migrants that leave a rank's last island travel as MPI messages to the
//! next rank's first. Rank 0 prints every island's records and the run's summary.
//!
//! One thread per rank, the courier, makes every MPI call (MPI is initialised `Serialized`): it
//! sends what leaves the rank with non-blocking sends, so ranks sending to each other in a ring
//! never wait on one another, and probes for what arrives. A rank that fails prints why and
//! aborts the job (`MPI_Abort`): mpirun ends every rank, and every rank's daemons and GPU worker
//! end with it (their parent-death signal), removing their segments. A rank that dies is named by
//! mpirun.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use crossbeam_channel::{Receiver, Sender, unbounded};
use gpfarm_client::Compiler;
use gpfarm_evolve::islands::{Parcel, ring_stretch};
use gpfarm_evolve::{GenerationRecord, IslandPlace, Summary};
use mpi::point_to_point::MatchedReceiveVec;
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{Destination, Source};

use super::evolve::{EvolveArgs, prepare, print_summary, row};

const MIGRANTS: i32 = 1;
const RECORD: i32 = 2;
const DONE: i32 = 3;

/// What a rank's courier hands rank 0's main thread: another rank's summary, in JSON.
type Remote = (usize, String);

/// A message on its way: the request, and its buffer (leaked until the request completes).
type Sending = (Request<'static, [u8], StaticScope>, *mut [u8]);

/// Runs `gpfarm evolve` as one rank of an MPI job.
pub fn run(mut args: EvolveArgs, cuda: Option<&Path>) -> Result<()> {
    let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized)
        .ok_or_else(|| anyhow!("MPI was initialised already"))?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // Ranks on one host share its cores: each farm gets its share, unless -n says otherwise.
    let local = world.split_shared(world.rank()).size().max(1) as usize;
    if args.spec.daemons.is_none() && local > 1 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        args.spec.daemons = Some((cores / local).max(1));
    }
    let outcome = rank_run(rank, size, &args, cuda);
    if let Err(e) = &outcome {
        eprintln!("gpfarm: rank {rank} of {size}: {}", crate::stderr::one_line(e));
        // The other ranks may wait for this one's migrants: end the job.
        world.abort(1);
    }
    drop(universe);
    outcome
}

fn rank_run(rank: usize, size: usize, args: &EvolveArgs, cuda: Option<&Path>) -> Result<()> {
    let (engine, mut compilers) = prepare(args, cuda)?;
    let per = args.spec.islands.max(1);
    let (links, leaving, arriving) = ring_stretch(per);
    let place = IslandPlace { first: rank * per, links, ring: size * per };
    let (records_out, records_in) = unbounded::<String>();
    let (done_out, done_in) = unbounded::<String>();
    let (remote_out, remote_in) = unbounded::<Remote>();
    let json = args.json;
    if rank == 0 && !json {
        println!(
            "{} by {size} ranks x {per} islands: population {} each, {} generations, seed {}, migrating {} every {} \
             generations, route {} ({})",
            engine.problem().name(),
            args.spec.population,
            args.spec.generations,
            args.spec.seed,
            engine.options().migrants,
            engine.options().migrate_every,
            engine.route(),
            engine.route_reason(),
        );
    }
    let engine = &engine;
    std::thread::scope(|scope| -> Result<()> {
        let courier = scope
            .spawn(move || courier(rank, size, leaving, arriving, records_in, done_in, remote_out, json));
        // The channels to the courier end with this call, whatever its outcome: without a
        // summary the courier stops too.
        let local = move || -> Result<Summary> {
            let compilers = compilers.iter_mut().map(|c| c.as_mut() as &mut (dyn Compiler + Send)).collect();
            let summary = engine.run_islands(compilers, place, |r: &GenerationRecord| {
                if rank == 0 {
                    show(r, json);
                } else {
                    records_out.send(serde_json::to_string(r)?)?;
                }
                Ok(())
            });
            let summary = summary.context("running this rank's islands")?;
            done_out.send(serde_json::to_string(&summary)?)?;
            Ok(summary)
        };
        let summary = local();
        let delivered = courier.join().map_err(|_| anyhow!("the MPI courier panicked"))?;
        let summary = summary?;
        delivered?;
        if rank == 0 {
            let higher = engine.problem().direction() == gpfarm_gp::Direction::Higher;
            let mut merged = summary;
            let mut others: Vec<Remote> = remote_in.try_iter().collect();
            others.sort_by_key(|(r, _)| *r);
            for (r, text) in others {
                let other: Summary =
                    serde_json::from_str(&text).with_context(|| format!("rank {r}'s summary"))?;
                merge(&mut merged, &other, higher);
            }
            print_summary(&merged, json)?;
        }
        Ok(())
    })
}

fn show(r: &GenerationRecord, json: bool) {
    if json {
        if let Ok(text) = serde_json::to_string(r) {
            println!("{text}");
        }
    } else {
        row(r, true);
    }
}

/// Adds another rank's islands to a summary: the best of both (`higher`: higher fitness is
/// better), every island's best in ring order, totals added up.
fn merge(into: &mut Summary, other: &Summary, higher: bool) {
    let better =
        if higher { other.best_fitness > into.best_fitness } else { other.best_fitness < into.best_fitness };
    if other.best_fitness.is_finite() && (!into.best_fitness.is_finite() || better) {
        into.best_fitness = other.best_fitness;
        into.best_phenotype.clone_from(&other.best_phenotype);
    }
    into.islands += other.islands;
    into.island_best.extend(&other.island_best);
    into.merge_front(&other.front);
    into.totals.add(&other.totals);
    into.mean_generation_ms = into.totals.wall_s * 1000.0 / (into.generations + 1) as f64;
}

/// The rank's MPI thread: sends what leaves the rank, receives what arrives, until its islands
/// are done (and, on rank 0, every other rank's).
#[allow(clippy::too_many_arguments)]
fn courier(
    rank: usize,
    size: usize,
    leaving: Receiver<Parcel>,
    arriving: Sender<Parcel>,
    records: Receiver<String>,
    done: Receiver<String>,
    remote: Sender<Remote>,
    json: bool,
) -> Result<()> {
    let world = SimpleCommunicator::world();
    let world = &world;
    let next = ((rank + 1) % size) as i32;
    let mut pending: Vec<Sending> = Vec::new();
    let send = |pending: &mut Vec<_>, to: i32, tag: i32, bytes: Vec<u8>| {
        let buf: &'static mut [u8] = Box::leak(bytes.into_boxed_slice());
        let raw: *mut [u8] = buf;
        let request = world.process_at_rank(to).immediate_send_with_tag(StaticScope, &*buf, tag);
        pending.push((request, raw));
    };
    let (mut finished, mut others_done) = (false, 0);
    loop {
        let mut busy = false;
        for parcel in leaving.try_iter() {
            let bytes = bincode::serde::encode_to_vec(&parcel, bincode::config::standard())?;
            send(&mut pending, next, MIGRANTS, bytes);
            busy = true;
        }
        for record in records.try_iter() {
            send(&mut pending, 0, RECORD, record.into_bytes());
            busy = true;
        }
        if !finished {
            match done.try_recv() {
                Ok(summary) => {
                    finished = true;
                    if rank != 0 {
                        send(&mut pending, 0, DONE, summary.into_bytes());
                    }
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    return Err(anyhow!("this rank's islands ended without a summary"));
                }
                Err(crossbeam_channel::TryRecvError::Empty) => {}
            }
        }
        while let Some((message, status)) = world.any_process().immediate_matched_probe() {
            busy = true;
            let (bytes, _) = (message, status).matched_receive_vec::<u8>();
            let from = status.source_rank() as usize;
            match status.tag() {
                MIGRANTS => {
                    let (parcel, _): (Parcel, usize) =
                        bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
                            .with_context(|| format!("migrants from rank {from}"))?;
                    // Gone only when this rank's islands have ended.
                    let _ = arriving.send(parcel);
                }
                RECORD => {
                    let record: GenerationRecord = serde_json::from_slice(&bytes)
                        .with_context(|| format!("a record from rank {from}"))?;
                    show(&record, json);
                }
                DONE => {
                    others_done += 1;
                    let _ = remote.send((from, String::from_utf8_lossy(&bytes).into_owned()));
                }
                tag => return Err(anyhow!("rank {from} sent a message with tag {tag}")),
            }
        }
        let mut incomplete = Vec::with_capacity(pending.len());
        for (request, raw) in pending.drain(..) {
            match request.test() {
                // SAFETY: the send that borrowed the buffer is complete, and the buffer came from
                // Box::leak; nothing else points at it.
                Ok(_) => drop(unsafe { Box::from_raw(raw) }),
                Err(request) => incomplete.push((request, raw)),
            }
        }
        pending = incomplete;
        let all_in = rank != 0 || others_done == size - 1;
        if finished && all_in && pending.is_empty() && records.is_empty() {
            return Ok(());
        }
        if !busy {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}
