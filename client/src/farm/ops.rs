//! Operations on farms from outside: what `gpfarm daemons status` shows, which farms `gpfarm
//! daemons stop` may end, and how it ends another process's daemons.
//!
//! A farm is *resident* (started by `gpfarm daemons start`, there for any client to attach to) or
//! *temporary* (spawned by a running `evolve` or `compile` for itself). The daemons say which:
//! a resident farm's daemons lead process groups of their own ([`super::lifecycle`] starts them
//! so, which also keeps a terminal's Ctrl-C away from them), while a temporary farm's daemons
//! stay in their owner's group and are its direct children, so their parent is the owner.
//! Which process serves which segment is read from `/proc` ([`gpfarm_protocol::process`]), never
//! from a segment's header, which a corrupt or forged segment could make name any process.
//! Must never signal a process that is not this user's daemon of the named farm (or, for a
//! resident farm, the `gpfarm` that keeps it), and never select a temporary farm for stopping
//! unless asked to with `all`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpfarm_protocol::process::{self, live_daemons};
use gpfarm_protocol::segment::{list_segments, remove_stale_segments};
use gpfarm_protocol::{DaemonId, FarmName, Segment, SegmentName};

use crate::supervisor::signal_daemon;

pub(super) fn group_by_farm(names: Vec<SegmentName>) -> BTreeMap<FarmName, Vec<DaemonId>> {
    let mut farms: BTreeMap<FarmName, Vec<DaemonId>> = BTreeMap::new();
    for n in names {
        farms.entry(n.farm).or_default().push(n.id);
    }
    for ids in farms.values_mut() {
        ids.sort();
    }
    farms
}

/// One daemon as seen from outside, for `gpfarm daemons status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DaemonStatus {
    /// Daemon id.
    pub id: DaemonId,
    /// Its pid (found in `/proc`, not read from the segment).
    pub pid: u32,
    /// Its state, or why its segment could not be read.
    pub state: String,
    /// The client holding it (0: none).
    pub client_pid: u32,
    /// Data capacity of its segment in bytes.
    pub capacity: usize,
}

/// Whose a farm is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum FarmKind {
    /// Started by `gpfarm daemons start`; any client may attach.
    Resident,
    /// Spawned by a running job for itself; ends with it.
    Temporary {
        /// The process that spawned it.
        owner_pid: u32,
    },
}

impl FarmKind {
    /// The kind of the farm whose daemons run as `pids`: temporary if any daemon is a temporary
    /// farm's, resident otherwise (also when none can be read: such a farm is stale and goes).
    pub fn of_daemons(pids: impl IntoIterator<Item = u32>) -> FarmKind {
        pids.into_iter()
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                kind_from_stat(pid, &stat)
            })
            .find(|k| *k != FarmKind::Resident)
            .unwrap_or(FarmKind::Resident)
    }
}

impl std::fmt::Display for FarmKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FarmKind::Resident => f.write_str("resident"),
            FarmKind::Temporary { owner_pid } => write!(f, "temporary, owned by pid {owner_pid}"),
        }
    }
}

/// A daemon's farm kind from its `/proc/PID/stat`: process group leader → resident; otherwise
/// temporary, owned by its parent.
fn kind_from_stat(pid: u32, stat: &str) -> Option<FarmKind> {
    // The command name in parentheses may hold spaces and parentheses: the fields after the last
    // ')' are state, ppid, pgrp.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(1);
    let ppid: u32 = fields.next()?.parse().ok()?;
    let pgrp: u32 = fields.next()?.parse().ok()?;
    Some(if pgrp == pid { FarmKind::Resident } else { FarmKind::Temporary { owner_pid: ppid } })
}

/// One farm as seen from outside.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FarmStatus {
    /// The farm's name.
    pub name: String,
    /// Resident or temporary (in JSON: `"kind": "resident"`, or `"kind": "temporary"` with
    /// `"owner_pid"`).
    #[serde(flatten)]
    pub kind: FarmKind,
    /// Its daemons.
    pub daemons: Vec<DaemonStatus>,
}

/// Why `gpfarm daemons stop` stops nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StopError {
    /// The named farm is not running.
    #[error("no farm named {name} is running; {}", listing(running))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The farms that are running, each with its kind.
        running: Vec<(String, FarmKind)>,
    },
    /// The named farm belongs to a running job.
    #[error(
        "farm {name} is temporary, owned by pid {owner_pid}: stopping it fails that job; add --all \
         to stop it anyway"
    )]
    Temporary {
        /// The farm.
        name: String,
        /// Its owner.
        owner_pid: u32,
    },
}

fn listing(running: &[(String, FarmKind)]) -> String {
    if running.is_empty() {
        return "no farm is running".into();
    }
    let farms: Vec<String> = running.iter().map(|(n, k)| format!("{n} ({k})")).collect();
    format!("running: {}", farms.join(", "))
}

/// The farms `gpfarm daemons stop [NAME] [--all]` ends: the named one (a temporary one only with
/// `all`), or with no name every resident farm (and with `all` the temporary ones too). An empty
/// list is no error: there is nothing to stop.
pub fn farms_to_stop<'a>(
    farms: &'a [FarmStatus],
    name: Option<&FarmName>,
    all: bool,
) -> Result<Vec<&'a FarmStatus>, StopError> {
    match name {
        Some(name) => {
            let farm = farms.iter().find(|f| f.name == name.as_str()).ok_or_else(|| StopError::Unknown {
                name: name.to_string(),
                running: farms.iter().map(|f| (f.name.clone(), f.kind)).collect(),
            })?;
            match farm.kind {
                FarmKind::Temporary { owner_pid } if !all => {
                    Err(StopError::Temporary { name: farm.name.clone(), owner_pid })
                }
                _ => Ok(vec![farm]),
            }
        }
        None => Ok(farms.iter().filter(|f| all || f.kind == FarmKind::Resident).collect()),
    }
}

/// Every farm of this user with a segment in `/dev/shm`. Segments no live daemon serves are
/// removed first; one a live daemon serves stays, whatever its header says.
pub fn farm_status() -> Vec<FarmStatus> {
    remove_stale_segments(None);
    let live = live_daemons();
    group_by_farm(list_segments())
        .into_iter()
        .map(|(farm, ids)| {
            let daemons: Vec<DaemonStatus> = ids
                .into_iter()
                .map(|id| (id, SegmentName::new(&farm, id)))
                .map(|(id, name)| match Segment::open(&name) {
                    Ok(seg) => DaemonStatus {
                        id,
                        pid: live.get(&name).copied().unwrap_or(0),
                        state: seg.state().map_or_else(
                            |e| gpfarm_protocol::error_chain(&e),
                            |s| format!("{s:?}").to_lowercase(),
                        ),
                        client_pid: seg.client_pid(),
                        capacity: seg.capacity(),
                    },
                    Err(e) => DaemonStatus {
                        id,
                        pid: live.get(&name).copied().unwrap_or(0),
                        state: gpfarm_protocol::error_chain(&e),
                        client_pid: 0,
                        capacity: 0,
                    },
                })
                .collect();
            let kind = FarmKind::of_daemons(daemons.iter().map(|d| d.pid).filter(|&p| p != 0));
            FarmStatus { name: farm.to_string(), kind, daemons }
        })
        .collect()
}

/// Stops every daemon of a farm and removes its segments. A resident farm's keeper (`gpfarm
/// daemons start`, the daemons' parent, or a background keeper found by its command line while a
/// daemon is between two lives) is asked to stop first (SIGTERM) and ends its daemons itself;
/// daemons are signalled directly (SIGTERM) only once no keeper lives or half of `grace` has
/// passed, so that a keeper never sees a daemon end before it was told to stop, and replaces it.
/// What is left at `grace` is killed. The farm is looked at again until then or until nothing of
/// it is left, so a daemon that a keeper started just before it was told to stop is stopped too.
/// Returns how many daemons were stopped.
pub fn stop_farm(name: &FarmName, grace: Duration) -> usize {
    let mut stopped = std::collections::BTreeSet::new();
    let mut keepers = std::collections::BTreeSet::new();
    let started = Instant::now();
    let (direct, deadline) = (started + grace / 2, started + grace);
    let mut signal = libc::SIGTERM;
    loop {
        let pids: Vec<(SegmentName, u32)> =
            live_daemons().into_iter().filter(|(n, _)| &n.farm == name).collect();
        let mut candidates = process::keepers_of(name);
        if FarmKind::of_daemons(pids.iter().map(|(_, p)| *p)) == FarmKind::Resident {
            candidates.extend(pids.iter().filter_map(|(_, p)| process::parent_of(*p)));
        }
        for k in candidates {
            if !keepers.contains(&k) && signal_keeper(k, name) {
                keepers.insert(k);
            }
        }
        let keeping = keepers.iter().any(|&k| process::process_alive(k));
        stopped.extend(pids.iter().map(|(_, p)| *p));
        if !keeping || Instant::now() >= direct {
            for (n, pid) in &pids {
                signal_daemon(*pid, n, signal);
            }
        }
        if pids.is_empty() && !keeping {
            break;
        }
        if Instant::now() >= deadline {
            if signal == libc::SIGKILL {
                break;
            }
            // Past the grace: kill what is left, and give keepers as long again to end (one that
            // was replacing a daemon as it was told to stop shuts that one down itself).
            signal = libc::SIGKILL;
            for (n, pid) in &pids {
                signal_daemon(*pid, n, signal);
            }
            let until = Instant::now() + grace;
            while Instant::now() < until && keepers.iter().any(|&k| process::process_alive(k)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    remove_stale_segments(Some(name));
    stopped.len()
}

/// Asks the `gpfarm daemons start` that keeps resident farm `farm` to stop (SIGTERM): only if it
/// is this user's `gpfarm` process and the background keeper of that farm or the parent of a
/// daemon of it.
fn signal_keeper(pid: u32, farm: &FarmName) -> bool {
    process::signal_checked(pid, libc::SIGTERM, |pid| {
        process::kept_farm(pid).is_some_and(|f| &f == farm)
            || (process::comm_of(pid).is_some_and(|c| c == "gpfarm")
                && live_daemons().iter().any(|(n, &d)| &n.farm == farm && process::parent_of(d) == Some(pid)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn farm(name: &str, kind: FarmKind) -> FarmStatus {
        FarmStatus { name: name.into(), kind, daemons: Vec::new() }
    }

    fn names(farms: &[&FarmStatus]) -> Vec<String> {
        farms.iter().map(|f| f.name.clone()).collect()
    }

    fn farms() -> Vec<FarmStatus> {
        vec![farm("res", FarmKind::Resident), farm("job", FarmKind::Temporary { owner_pid: 42 })]
    }

    #[test]
    fn a_group_leader_is_resident_and_any_other_daemon_belongs_to_its_parent() {
        let stat = |pid: u32, ppid: u32, pgrp: u32| format!("{pid} (gpfarmd) S {ppid} {pgrp} {pgrp} 0 -1");
        assert_eq!(kind_from_stat(100, &stat(100, 1, 100)), Some(FarmKind::Resident));
        assert_eq!(kind_from_stat(101, &stat(101, 7, 5)), Some(FarmKind::Temporary { owner_pid: 7 }));
        let odd_name = "102 (gp farm) d) S 9 3 3 0 -1";
        assert_eq!(kind_from_stat(102, odd_name), Some(FarmKind::Temporary { owner_pid: 9 }));
        assert_eq!(kind_from_stat(103, "garbage"), None);
    }

    #[test]
    fn stop_without_a_name_takes_resident_farms_only_unless_all() {
        let farms = farms();
        assert_eq!(names(&farms_to_stop(&farms, None, false).unwrap()), ["res"]);
        assert_eq!(names(&farms_to_stop(&farms, None, true).unwrap()), ["res", "job"]);
        let only_jobs = vec![farm("job", FarmKind::Temporary { owner_pid: 42 })];
        assert!(farms_to_stop(&only_jobs, None, false).unwrap().is_empty());
    }

    #[test]
    fn stopping_a_temporary_farm_by_name_needs_all() {
        let farms = farms();
        let job: FarmName = "job".parse().unwrap();
        let e = farms_to_stop(&farms, Some(&job), false).unwrap_err();
        assert_eq!(e, StopError::Temporary { name: "job".into(), owner_pid: 42 });
        assert!(e.to_string().contains("owned by pid 42"), "{e}");
        assert_eq!(names(&farms_to_stop(&farms, Some(&job), true).unwrap()), ["job"]);
    }

    #[test]
    fn an_unknown_name_is_an_error_that_lists_the_running_farms() {
        let farms = farms();
        let other: FarmName = "nope".parse().unwrap();
        let text = farms_to_stop(&farms, Some(&other), true).unwrap_err().to_string();
        assert!(text.contains("no farm named nope"), "{text}");
        assert!(text.contains("res (resident), job (temporary, owned by pid 42)"), "{text}");
        let text = farms_to_stop(&[], Some(&other), false).unwrap_err().to_string();
        assert!(text.contains("no farm is running"), "{text}");
    }

    #[test]
    fn status_json_carries_the_kind_and_owner() {
        let json = serde_json::to_value(farms()).unwrap();
        assert_eq!(json[0]["kind"], "resident");
        assert_eq!(json[1]["kind"], "temporary");
        assert_eq!(json[1]["owner_pid"], 42);
        assert!(json[0].get("owner_pid").is_none());
    }
}
