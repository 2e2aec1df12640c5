//! Operations on farms from outside: what `gpfarm daemons status` shows and how `gpfarm daemons
//! stop` ends another process's daemons.
//!
//! Must never signal a pid that was not read from one of the named farm's segments.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpfarm_protocol::segment::{self, list_segments, remove_stale_segments};
use gpfarm_protocol::{DaemonId, FarmName, Segment, SegmentName};

use crate::supervisor::{process_running, signal_pid};

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
    /// Its pid.
    pub pid: u32,
    /// Its state, or why it could not be read.
    pub state: String,
    /// The client holding it (0: none).
    pub client_pid: u32,
    /// Data capacity of its segment in bytes.
    pub capacity: usize,
}

/// One farm as seen from outside.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FarmStatus {
    /// The farm's name.
    pub name: String,
    /// Its daemons.
    pub daemons: Vec<DaemonStatus>,
}

/// Every farm of this user with a segment in `/dev/shm` (stale ones are removed first).
pub fn farm_status() -> Vec<FarmStatus> {
    remove_stale_segments(None);
    group_by_farm(list_segments())
        .into_iter()
        .map(|(farm, ids)| FarmStatus {
            name: farm.to_string(),
            daemons: ids
                .into_iter()
                .map(|id| match Segment::open(&SegmentName::new(&farm, id)) {
                    Ok(seg) => DaemonStatus {
                        id,
                        pid: seg.daemon_pid(),
                        state: seg.state().map_or_else(
                            |e| gpfarm_protocol::error_chain(&e),
                            |s| format!("{s:?}").to_lowercase(),
                        ),
                        client_pid: seg.client_pid(),
                        capacity: seg.capacity(),
                    },
                    Err(e) => DaemonStatus {
                        id,
                        pid: 0,
                        state: gpfarm_protocol::error_chain(&e),
                        client_pid: 0,
                        capacity: 0,
                    },
                })
                .collect(),
        })
        .collect()
}

/// Stops every daemon of a farm (SIGTERM, then SIGKILL after `grace`) and removes its segments.
/// Returns how many daemons were stopped.
pub fn stop_farm(name: &FarmName, grace: Duration) -> usize {
    let names: Vec<SegmentName> = list_segments().into_iter().filter(|n| &n.farm == name).collect();
    let pids: Vec<(SegmentName, u32)> = names
        .into_iter()
        .map(|n| {
            let pid = Segment::open(&n).map(|s| s.daemon_pid()).unwrap_or(0);
            (n, pid)
        })
        .collect();
    for (_, pid) in &pids {
        signal_pid(*pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pids.iter().any(|(_, p)| process_running(*p)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for (n, pid) in &pids {
        signal_pid(*pid, libc::SIGKILL);
        segment::unlink(n);
    }
    pids.len()
}
