//! This user's private directory of segments.
//!
//! Segments live in a directory that only this user can write, so that no other user can
//! create, replace or pre-empt a segment's name, whatever names they can read (a farm's name is on
//! its daemons' command lines, which every user can read in `/proc`). The directory is
//! `/dev/shm/gpfarm-<uid>`, made with `mkdir` (mode 0700) and checked every time it is used: a
//! directory, not a link, owned by this user, mode 0700. If anything else holds that name
//! (another user's directory, a link, a file), the segments go to this user's first directory
//! named `/dev/shm/gpfarm-<uid>-x<16 hex>` instead, made with a random name when there is none:
//! another user can make names like these too, but not directories that this user owns, so they
//! can delay nothing. `GPFARM_SEGMENT_DIR` names the directory outright (it must pass the same
//! checks); a farm passes the directory it uses to the daemons it starts in that variable.
//! `GPFARM_SEGMENT_ROOT` (default `/dev/shm`) is where the directories are looked for and made.
//!
//! The directory stays when the last segment in it is removed (like `/run/user/<uid>`): it is
//! empty then, and the next farm uses it again.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use rand::RngCore;
use thiserror::Error;

use crate::process::effective_uid;

/// The variable that names the directory of segments outright.
pub const DIR_VAR: &str = "GPFARM_SEGMENT_DIR";
/// The variable that names the directory the per-user directories are made in.
pub const ROOT_VAR: &str = "GPFARM_SEGMENT_ROOT";

/// Why there is no directory of segments to use.
#[derive(Debug, Error)]
pub enum DirError {
    /// A directory named by `GPFARM_SEGMENT_DIR`, or just made, fails the checks.
    #[error("{path} cannot hold this user's segments: {why}")]
    Unsafe {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The directory could not be made.
    #[error("cannot make a directory for segments in {root}: {source}")]
    Make {
        /// Where it was to be made.
        root: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Where the per-user directories are made.
pub fn root() -> PathBuf {
    std::env::var_os(ROOT_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

/// What makes `path` unfit to hold this user's segments (`None`: it is fit): it must be a
/// directory itself (not a link to one), owned by this user, with mode 0700.
pub fn unfit(path: &Path) -> Option<String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(e.to_string()),
    };
    let me = effective_uid();
    if meta.file_type().is_symlink() {
        return Some("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Some("it is not a directory".into());
    }
    if meta.uid() != me {
        return Some(format!("owned by uid {}, not by uid {me}", meta.uid()));
    }
    if meta.mode() & 0o7777 != 0o700 {
        return Some(format!("mode {:04o}, not 0700", meta.mode() & 0o7777));
    }
    None
}

/// The directory of this user's segments, made if there is none (see the module documentation).
pub fn segment_dir() -> Result<PathBuf, DirError> {
    if let Some(named) = std::env::var_os(DIR_VAR).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(named);
        return match unfit(&path) {
            None => Ok(path),
            Some(why) => Err(DirError::Unsafe { path, why: format!("{why} (named by {DIR_VAR})") }),
        };
    }
    let root = root();
    let uid = effective_uid();
    let usual = root.join(format!("gpfarm-{uid}"));
    if make(&usual).is_ok() && unfit(&usual).is_none() {
        return Ok(usual);
    }
    // The usual name is held by something else: this user's first other directory, or a new one.
    if let Some(dir) = fallbacks(&root, uid).into_iter().next() {
        return Ok(dir);
    }
    let fresh = root.join(format!("gpfarm-{uid}-x{:016x}", rand::rng().next_u64()));
    make(&fresh).map_err(|source| DirError::Make { root: root.clone(), source })?;
    match unfit(&fresh) {
        None => Ok(fresh),
        Some(why) => Err(DirError::Unsafe { path: fresh, why }),
    }
}

/// Makes directory `path` with mode 0700 unless something holds the name already.
fn make(path: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// This user's fit directories named `gpfarm-<uid>-x<hex>` in `root`, in name order.
fn fallbacks(root: &Path, uid: u32) -> Vec<PathBuf> {
    let prefix = format!("gpfarm-{uid}-x");
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
        .map(|e| e.path())
        .filter(|p| unfit(p).is_none())
        .collect();
    dirs.sort();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_link_a_file_or_an_open_directory_is_unfit() {
        let t = tempfile::tempdir().unwrap();
        let good = t.path().join("good");
        std::fs::DirBuilder::new().mode(0o700).create(&good).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(unfit(&good), None);
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert_eq!(unfit(&link).as_deref(), Some("it is a symbolic link"));
        let file = t.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(unfit(&file).as_deref(), Some("it is not a directory"));
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(unfit(&good).as_deref(), Some("mode 0755, not 0700"));
    }
}
