//! Where the units of individuals that did not compile are written, so that nothing another
//! user of the machine prepared can redirect the write.
//!
//! Without a folder from the user, the run makes one of its own under the temporary directory,
//! with a name nobody can predict (`gpfarm-crashes-XXXXXX`, created by `mkdtemp`, mode 0700), on
//! the first failure, and keeps it after the run. A folder the user names is created 0700 if it
//! does not exist, and refused if it is a link, not a directory or not the user's. Each unit is
//! created afresh (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600): a name already there, a link
//! above all, is never opened; the unit then takes the next free name (`NAME.1.cu`, …).
//! Must never follow a link, nor write into a folder another user owns.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The run's folder for failed units: asked for, or made on first need and shared by every
/// island of the run.
#[derive(Clone, Debug, Default)]
pub(crate) struct CrashDir {
    requested: Option<PathBuf>,
    made: Arc<OnceLock<Result<PathBuf, String>>>,
}

/// Most names tried for one unit before giving up (`NAME.cu`, `NAME.1.cu`, …).
const NAMES_TRIED: usize = 100;

impl CrashDir {
    /// The folder `requested`, or (for `None`) a private one made on the first write.
    pub(crate) fn new(requested: Option<PathBuf>) -> Self {
        Self { requested, made: Arc::new(OnceLock::new()) }
    }

    /// The folder, made (or checked) once for the run.
    fn dir(&self) -> Result<&Path, String> {
        self.made
            .get_or_init(|| match &self.requested {
                Some(dir) => checked_own(dir).map(|()| dir.clone()),
                None => tempfile::Builder::new()
                    .prefix("gpfarm-crashes-")
                    .permissions(std::fs::Permissions::from_mode(0o700))
                    .tempdir()
                    .map(tempfile::TempDir::keep)
                    .map_err(|e| {
                        format!("no private folder could be made under the temporary directory: {e}")
                    }),
            })
            .as_deref()
            .map_err(Clone::clone)
    }

    /// Writes `source` as `name` (a file name ending in `.cu`) into the folder, readable by the
    /// user alone; returns the folder and the file's path, or why not.
    pub(crate) fn write(&self, name: &str, source: &[u8]) -> Result<(PathBuf, PathBuf), String> {
        let dir = self.dir()?;
        let stem = name.strip_suffix(".cu").unwrap_or(name);
        for k in 0..NAMES_TRIED {
            let file = if k == 0 { format!("{stem}.cu") } else { format!("{stem}.{k}.cu") };
            let path = dir.join(file);
            let opened = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path);
            match opened {
                Ok(mut f) => {
                    return f
                        .write_all(source)
                        .map(|()| (dir.to_path_buf(), path.clone()))
                        .map_err(|e| format!("{}: {e}", path.display()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Err(format!("{}: {NAMES_TRIED} names for {stem} are taken", dir.display()))
    }
}

/// Creates `dir` (mode 0700) where it is missing; refuses a link, a file, or a folder of another
/// user.
fn checked_own(dir: &Path) -> Result<(), String> {
    if let Err(e) = DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        return Err(format!("{}: {e}", dir.display()));
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symbolic link: name the folder itself", dir.display()));
    }
    if !meta.is_dir() {
        return Err(format!("{} is not a folder", dir.display()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to another user (uid {}): name a folder of yours",
            dir.display(),
            meta.uid()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_folder_is_private_unpredictable_and_made_once() {
        let dir = CrashDir::new(None);
        let (folder, a) = dir.write("g0_i1.cu", b"one").unwrap();
        let (again, b) = dir.write("g0_i2.cu", b"two").unwrap();
        assert_eq!(folder, again);
        let name = folder.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("gpfarm-crashes-") && name != format!("gpfarm-crashes-{}", std::process::id())
        );
        let mode = std::fs::metadata(&folder).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(std::fs::metadata(&a).unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "two");
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn a_link_in_the_folder_is_never_followed_and_the_unit_takes_the_next_name() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let units = tmp.path().join("units");
        std::fs::create_dir(&units).unwrap();
        std::os::unix::fs::symlink(&victim, units.join("g0_i36.cu")).unwrap();
        let (_, path) = CrashDir::new(Some(units.clone())).write("g0_i36.cu", b"__global__").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        assert_eq!(path, units.join("g0_i36.1.cu"));
        assert_eq!(std::fs::read_to_string(path).unwrap(), "__global__");
    }

    #[test]
    fn a_folder_that_is_a_link_or_a_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = CrashDir::new(Some(link)).write("g0_i0.cu", b"x").unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(CrashDir::new(Some(file)).write("g0_i0.cu", b"x").is_err());
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
    }

    #[test]
    fn a_folder_made_for_the_user_is_theirs_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let units = tmp.path().join("a/b");
        CrashDir::new(Some(units.clone())).write("g1_i2.cu", b"x").unwrap();
        assert_eq!(std::fs::metadata(&units).unwrap().mode() & 0o777, 0o700);
    }
}
