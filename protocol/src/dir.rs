//! This user's private directory of segments.
//!
//! Segments live in a directory that only this user can write, so that no other user can
//! create, replace or pre-empt a segment's name, whatever names they can read (a farm's name is on
//! its daemons' command lines, which every user can read in `/proc`). The directory is
//! `/dev/shm/gpfarm-<uid>`, made with `mkdir` (mode 0700) and checked every time it is used: a
//! directory, not a link, owned by this user, mode 0700. If anything else holds that name
//! (another user's directory, a link, a file), the segments go to a directory of this user's own
//! named `/dev/shm/gpfarm-<uid>-x<16 hex>`, made with a random name: another user can make names
//! like these too, but not directories that this user owns, so they can delay nothing.
//!
//! A directory other than the usual one is decided once and recorded in this user's state
//! folder (`$GPFARM_STATE_DIR`, else `$XDG_STATE_HOME/gpfarm`, else `~/.local/state/gpfarm`;
//! made 0700, used while it is the user's own and nobody else may write in it), in a file per
//! host and root: every later lookup (a client, `status`, `stop`, `clean`) reads that one file and uses the directory recorded while it passes the checks,
//! whatever happens to `/dev/shm/gpfarm-<uid>` in the meantime (another user taking it, or letting
//! it go), and never lists `/dev/shm`, however many files another user puts there. Only a
//! recorded directory that no longer passes the checks (removed, replaced) is decided anew.
//! Without a state folder to write in, the record is skipped and a lookup whose usual name is
//! taken looks for this user's first `gpfarm-<uid>-x<hex>` directory by listing the root.
//!
//! `GPFARM_SEGMENT_DIR` names the directory outright (it must pass the same checks); a farm passes
//! the directory it uses to the daemons it starts in that variable. `GPFARM_SEGMENT_ROOT`
//! (default `/dev/shm`) is where the directories are looked for and made.
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
/// The variable that names this user's state folder, where the chosen directory is recorded.
pub const STATE_VAR: &str = "GPFARM_STATE_DIR";

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
    segment_dir_in(&root(), effective_uid(), state_dir().as_deref())
}

/// This user's state folder (see the module documentation), made 0700 if missing; `None` when
/// there is none to use (no home, or it is a link, another user's, or writable by others).
pub fn state_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = var(STATE_VAR)
        .or_else(|| var("XDG_STATE_HOME").map(|d| d.join("gpfarm")))
        .or_else(|| var("HOME").map(|h| h.join(".local/state/gpfarm")))?;
    if std::fs::symlink_metadata(&dir).is_err() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).ok()?;
    }
    // Like ssh's folder: a directory of this user's, not a link, that nobody else may write in
    // (a record written by another user could only name a directory of this user's anyway: a
    // recorded directory must pass `unfit`).
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == effective_uid() && meta.mode() & 0o022 == 0).then_some(dir)
}

/// [`segment_dir`] for segments under `root` of user `uid`, recorded in `state` when given.
fn segment_dir_in(root: &Path, uid: u32, state: Option<&Path>) -> Result<PathBuf, DirError> {
    let record = state.map(|s| s.join(record_name(root)));
    // The directory decided before, while it passes the checks: one read, no listing.
    if let Some(dir) = record.as_deref().and_then(read_record).filter(|d| unfit(d).is_none()) {
        return Ok(dir);
    }
    let usual = usual_of(root, uid);
    let chosen = if make(&usual).is_ok() && unfit(&usual).is_none() {
        usual.clone()
    } else if let Some(dir) = record.is_none().then(|| fallbacks(root, uid).into_iter().next()).flatten() {
        dir // nowhere to record: the listing finds the one decided before
    } else {
        let fresh = root.join(format!("gpfarm-{uid}-x{:016x}", rand::rng().next_u64()));
        make(&fresh).map_err(|source| DirError::Make { root: root.to_path_buf(), source })?;
        if let Some(why) = unfit(&fresh) {
            return Err(DirError::Unsafe { path: fresh, why });
        }
        fresh
    };
    let Some(record) = record else { return Ok(chosen) };
    if chosen == usual {
        // The usual directory needs no record (none is written for it: nothing accumulates in
        // the state folder); a record of a directory gone unfit goes.
        let _ = std::fs::remove_file(&record);
        return Ok(chosen);
    }
    let recorded = write_record(&record, &chosen);
    if recorded != chosen {
        let _ = std::fs::remove_dir(&chosen); // another process decided first: ours is empty
    }
    Ok(recorded)
}

fn usual_of(root: &Path, uid: u32) -> PathBuf {
    root.join(format!("gpfarm-{uid}"))
}

/// The record's file name for `root`: the host's name and a hash of the root, so that one home
/// shared by several hosts, or several roots (tests), keep apart.
fn record_name(root: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash = root
        .as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String =
        host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(64).collect();
    format!("segments-{host}-{hash:016x}")
}

/// The directory recorded in `record`: a plain file of this user's, not a link.
fn read_record(record: &Path) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(record).ok()?;
    if !meta.is_file() || meta.uid() != effective_uid() || meta.len() > 4096 {
        return None;
    }
    let text = std::fs::read_to_string(record).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| PathBuf::from(line))
}

/// Records `chosen` unless another process recorded a directory that passes the checks first,
/// and returns the directory recorded (`chosen` when the record cannot be written). The record
/// is replaced by a rename, so a reader sees the old or the new, never half of one.
fn write_record(record: &Path, chosen: &Path) -> PathBuf {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(theirs) = read_record(record).filter(|d| unfit(d).is_none()) {
        return theirs; // decided meanwhile by another process: everyone uses one directory
    }
    let tmp = record.with_extension(format!("new{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(chosen.as_os_str().as_bytes()).and_then(|()| f.write_all(b"\n")))
        .and_then(|()| std::fs::rename(&tmp, record));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    chosen.to_path_buf()
}

/// Makes directory `path` with mode 0700 unless something holds the name already.
fn make(path: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// This user's fit directories named `gpfarm-<uid>-x<hex>` in `root`, in name order (a listing
/// of `root`: only where no record can be kept).
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

    fn private(path: &Path) {
        std::fs::DirBuilder::new().mode(0o700).create(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    /// A temporary folder holding a private segment root `shm` and state folder `state`.
    fn root_and_state() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let (root, state) = (t.path().join("shm"), t.path().join("state"));
        private(&root);
        private(&state);
        (t, root, state)
    }

    #[test]
    fn the_directory_is_decided_once_and_kept_when_the_usual_name_comes_free() {
        let (_t, root, state) = root_and_state();
        let uid = effective_uid();
        // The usual name taken (a file of someone's): a directory of this user's own, recorded.
        let usual = root.join(format!("gpfarm-{uid}"));
        std::fs::write(&usual, b"").unwrap();
        let first = segment_dir_in(&root, uid, Some(&state)).unwrap();
        assert_ne!(first, usual);
        assert!(first.file_name().unwrap().to_str().unwrap().starts_with(&format!("gpfarm-{uid}-x")));
        // The name let go: every later lookup still finds the directory decided.
        std::fs::remove_file(&usual).unwrap();
        assert_eq!(segment_dir_in(&root, uid, Some(&state)).unwrap(), first);
        assert!(!usual.exists(), "a lookup made the usual directory although one was recorded");
        // Decoys that sort first are never looked at: the record is read, the root not listed.
        private(&root.join(format!("gpfarm-{uid}-x0000000000000000")));
        assert_eq!(segment_dir_in(&root, uid, Some(&state)).unwrap(), first);
        // The recorded directory removed: decided anew (the usual name is free again).
        std::fs::remove_dir(&first).unwrap();
        assert_eq!(segment_dir_in(&root, uid, Some(&state)).unwrap(), usual);
        assert_eq!(segment_dir_in(&root, uid, Some(&state)).unwrap(), usual);
    }

    #[test]
    fn without_a_state_folder_the_first_own_fallback_is_found_by_listing() {
        let t = tempfile::tempdir().unwrap();
        let uid = effective_uid();
        std::fs::write(t.path().join(format!("gpfarm-{uid}")), b"").unwrap();
        let first = segment_dir_in(t.path(), uid, None).unwrap();
        assert_eq!(segment_dir_in(t.path(), uid, None).unwrap(), first);
    }

    #[test]
    fn a_record_that_is_a_link_or_names_an_unfit_directory_is_not_followed() {
        let (t, root, state) = root_and_state();
        let uid = effective_uid();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(state.join(record_name(&root)), format!("{}\n", open.display())).unwrap();
        assert_eq!(segment_dir_in(&root, uid, Some(&state)).unwrap(), root.join(format!("gpfarm-{uid}")));
        let elsewhere = t.path().join("elsewhere");
        std::fs::write(&elsewhere, format!("{}\n", open.display())).unwrap();
        let record = state.join(record_name(&root));
        assert!(!record.exists(), "the record of an unfit directory stayed");
        std::os::unix::fs::symlink(&elsewhere, &record).unwrap();
        assert_eq!(read_record(&record), None);
    }
}
