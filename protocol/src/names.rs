//! Names of farms, daemons and their shared-memory segments.
//!
//! A segment is named `gpfarm-<uid>-<farm>-<id>`, in this user's private directory of segments
//! ([`crate::dir`]), which is what keeps other users out: names are not secret (a daemon's farm
//! and id are on its command line). Names are validated so that nothing read from the command
//! line or the file system can smuggle a `/` or a NUL into a path.

use std::fmt;
use std::str::FromStr;

use rand::RngCore;
use thiserror::Error;

/// Prefix of every segment this project creates.
pub const SEGMENT_PREFIX: &str = "gpfarm-";

/// Why a name was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    /// The farm name is empty, too long or has characters other than `[a-z0-9]`.
    #[error("farm name {0:?} must be 1 to 32 characters of a-z and 0-9")]
    BadFarmName(String),
    /// The segment name does not have the shape `gpfarm-<uid>-<farm>-<id>`.
    #[error("{0:?} is not a gpfarm segment name")]
    NotASegment(String),
}

/// Index of a daemon within its farm.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    bincode::Encode,
    bincode::Decode,
    serde::Serialize,
)]
pub struct DaemonId(pub u16);

impl FromStr for DaemonId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(DaemonId)
    }
}

impl fmt::Display for DaemonId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Through the number's own formatting, so that widths and alignment apply.
        fmt::Display::fmt(&self.0, f)
    }
}

/// Name shared by the daemons of one farm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FarmName(String);

impl FarmName {
    /// A fresh, unguessable farm name (64 random bits in hex).
    pub fn random() -> Self {
        FarmName(format!("{:016x}", rand::rng().next_u64()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for FarmName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let ok =
            !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if ok { Ok(FarmName(s.to_owned())) } else { Err(NameError::BadFarmName(s.to_owned())) }
    }
}

impl fmt::Display for FarmName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Name of one daemon's segment: its file's name in the directory of segments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SegmentName {
    /// Owner's user id.
    pub uid: u32,
    /// Farm the daemon belongs to.
    pub farm: FarmName,
    /// Daemon index.
    pub id: DaemonId,
}

impl SegmentName {
    /// The segment of daemon `id` of `farm`, owned by the current user.
    pub fn new(farm: &FarmName, id: DaemonId) -> Self {
        SegmentName { uid: current_uid(), farm: farm.clone(), id }
    }

    /// Parses a file name as found in the directory of segments.
    pub fn parse(file_name: &str) -> Result<Self, NameError> {
        let bad = || NameError::NotASegment(file_name.to_owned());
        let rest = file_name.strip_prefix(SEGMENT_PREFIX).ok_or_else(bad)?;
        let mut parts = rest.split('-');
        let (Some(uid), Some(farm), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(SegmentName {
            uid: uid.parse().map_err(|_| bad())?,
            farm: farm.parse().map_err(|_| bad())?,
            id: DaemonId(id.parse().map_err(|_| bad())?),
        })
    }
}

impl fmt::Display for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SEGMENT_PREFIX}{}-{}-{}", self.uid, self.farm, self.id)
    }
}

/// The real user id of this process.
pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_through_their_text_form() {
        let farm: FarmName = "abc123".parse().unwrap();
        let name = SegmentName { uid: 1000, farm, id: DaemonId(7) };
        assert_eq!(name.to_string(), "gpfarm-1000-abc123-7");
        assert_eq!(SegmentName::parse(&name.to_string()).unwrap(), name);
    }

    #[test]
    fn farm_names_with_separators_or_slashes_are_refused() {
        for bad in ["", "a-b", "a/b", "ABC", "x".repeat(33).as_str(), "a\0b"] {
            assert!(bad.parse::<FarmName>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn foreign_file_names_are_not_segments() {
        for other in ["gpfarm-1-x", "gpfarm-1-x-2-3", "sem.gpfarm-1-a-1", "gpfarm-u-a-1"] {
            assert!(SegmentName::parse(other).is_err(), "{other:?} parsed");
        }
    }

    #[test]
    fn random_farm_names_differ_and_are_valid() {
        let a = FarmName::random();
        let b = FarmName::random();
        assert_ne!(a, b);
        assert_eq!(a.as_str().parse::<FarmName>().unwrap(), a);
    }
}
