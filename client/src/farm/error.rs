//! What starting a farm, attaching to one, or meeting or restarting one of its daemons fails
//! with.
//!
//! A call's own troubles never come out as this: a daemon lost during a call costs its units a
//! resend or a failed result ([`super::schedule`]). The distinctions the farm acts on are kept
//! apart: [`FarmError::Killed`] (starting again may work) from [`FarmError::Daemon`] (it would
//! fail again), and [`FarmError::InUse`] (another client holds the daemon). Must never lose the
//! daemon's id or the OS's reason on the way.

use gpfarm_protocol::{DaemonId, SegmentError};
use thiserror::Error;

use super::size::FarmSizeError;
use crate::compiler::CompilerError;
use crate::supervisor::{LocateError, SpawnError};

/// A farm could not be started, attached to or kept whole.
#[derive(Debug, Error)]
pub enum FarmError {
    /// A daemon could not be started or reached, or broke the protocol.
    #[error("daemon {id}: {message}")]
    Daemon {
        /// Which daemon.
        id: DaemonId,
        /// What went wrong and what to do.
        message: String,
    },
    /// A daemon was killed from outside (a signal it did not raise itself) before it was ready;
    /// starting it again may well work, and start-up does, a bounded number of times.
    #[error("daemon {id}: {message}")]
    Killed {
        /// Which daemon.
        id: DaemonId,
        /// How it ended.
        message: String,
    },
    /// Another process holds the daemon for good (a farm's owner that did not release it).
    #[error(
        "daemon {id}: in use by process {holder}, which does not share it (start another farm with `gpfarm daemons start`)"
    )]
    InUse {
        /// Which daemon.
        id: DaemonId,
        /// The process holding it.
        holder: u32,
    },
    /// Other clients of a shared farm kept the daemon busy for the whole wait (clients take
    /// turns, one request each, in the order they came).
    #[error("{}", busy_message(*id, *holder, *waited))]
    Busy {
        /// Which daemon.
        id: DaemonId,
        /// The client holding it when the wait ended (0: it was free, but others waited ahead).
        holder: u32,
        /// How long this client waited.
        waited: std::time::Duration,
    },
    /// The OS refused to start a daemon's process.
    #[error("daemon {id}")]
    Spawn {
        /// Which daemon.
        id: DaemonId,
        /// The executable and the OS's reason.
        #[source]
        source: SpawnError,
    },
    /// A farm of that many daemons cannot run on this machine.
    #[error(transparent)]
    FarmSize(#[from] FarmSizeError),
    /// The daemon executable (`gpfarmd`) was not found.
    #[error(transparent)]
    Locate(#[from] LocateError),
    /// Shared memory failed.
    #[error(transparent)]
    Segment(#[from] SegmentError),
}

impl From<FarmError> for CompilerError {
    fn from(e: FarmError) -> CompilerError {
        CompilerError::new(e)
    }
}

/// The line a client is told when other clients kept its daemon busy.
pub(crate) fn busy_message(id: DaemonId, holder: u32, waited: std::time::Duration) -> String {
    let by = if holder == 0 {
        "clients waiting ahead".to_string()
    } else {
        format!("process {holder} and others")
    };
    format!(
        "daemon {id}: busy with other clients' units ({by}) for all of {waited:?}; the farm is shared in turns, \
         so try again when its other clients are done, or give a longer deadline (--deadline)"
    )
}
