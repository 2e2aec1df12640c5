//! The contract between the GP process and its compile daemons.
//!
//! Everything that crosses the process boundary is defined here and nowhere else: the layout of a
//! daemon's shared-memory segment ([`segment`]) and the private directory it lives in ([`dir`]), the futex-based "go" and "done" events
//! ([`event`]), the names segments are found by ([`names`]), the request/response messages
//! ([`message`]) with the value types they carry ([`types`]), the GPU worker's frames
//! ([`worker`]), and the sizes all of them agree on ([`limits`]).
//!
//! Dependencies inside the crate point one way: `segment` → `message` → `types`, `names`;
//! every module takes its bounds from `limits`, which needs nothing.
//!
//! This crate never trusts the other side: every length, offset and capacity read from shared
//! memory is validated before use, and decoding arbitrary bytes returns an error, never panics.

pub mod dir;
pub mod event;
pub mod guard;
pub mod limits;
pub mod message;
pub mod names;
pub mod process;
pub mod ptx_math;
mod raw;
pub mod segment;
pub mod types;
pub mod worker;

pub use message::{CompileRef, DaemonInfo, Request, Response, decode_request, decode_response};
pub use names::{DaemonId, FarmName, SegmentName};
pub use segment::{DaemonState, LINE_SEATS, Place, Segment, SegmentError};
pub use types::{
    CompileMode, CompileOptions, Failure, FailureKind, Language, Route, Shape, SmArch, Unit, UnitOutcome,
    UnitResult, UnitTimings,
};

/// Version of the segment layout and message set; both sides must agree exactly.
pub const PROTOCOL_VERSION: u32 = 5;

/// An error and its causes on one line, joined with ": ", for sending to another process as
/// text (the receiver cannot walk the chain).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
