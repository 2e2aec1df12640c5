//! Compiled code by content: the key of a kernel's CUBIN (a hash of its source, the compile
//! options, the target and the exact compiler), and a cache of CUBIN on disk under such keys, so
//! that a repeated experiment does not compile again.
//!
//! The disk cache stores each compiled unit once (`objects/<hash of the CUBIN>.cubin`) and one
//! small entry per kernel key naming the object and the kernel's symbol in it (`keys/<ab>/<key>`).
//! Files are written under a temporary name and renamed, so a reader never sees half a file;
//! an object whose bytes do not match its name is treated as missing and removed. The cache is
//! bounded: past its limit, the objects and entries used longest ago go first.
//!
//! Must never return CUBIN for a key other than the one asked for.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use gpfarm_protocol::{CompileMode, CompileOptions};

/// The identity of compiled code: equal keys mean the same source, options, target and compiler.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CacheKey([u8; 32]);

impl std::hash::Hash for CacheKey {
    /// A key is a BLAKE3 digest: its first 8 bytes are as good a hash as any of all 32.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(first));
    }
}

/// A hasher for maps keyed by [`CacheKey`] (through [`KeyMap`]): it takes the key's own first 8
/// bytes as the hash, so a lookup hashes nothing; generations of 10^5-10^6 individuals look up
/// several maps per individual.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only [`CacheKey`]'s `write_u64` is expected; anything else is folded in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by [`CacheKey`], hashed by [`KeyHasher`].
pub type KeyMap<V> = std::collections::HashMap<CacheKey, V, std::hash::BuildHasherDefault<KeyHasher>>;

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheKey({})", &self.hex()[..16])
    }
}

impl CacheKey {
    /// The key of `source` compiled with `options` by the compiler `toolchain` (see
    /// [`toolchain_identity`]).
    pub fn new(source: &[u8], options: &CompileOptions, toolchain: &str) -> CacheKey {
        CacheKey::linked(source, &[], options, toolchain)
    }

    /// As [`CacheKey::new`], for a unit linked with `libraries` (relocatable CUBINs,
    /// [`gpfarm_protocol::Unit::libraries`]): each taken in after the source, length-prefixed;
    /// none gives [`CacheKey::new`]'s key.
    pub fn linked(
        source: &[u8],
        libraries: &[Vec<u8>],
        options: &CompileOptions,
        toolchain: &str,
    ) -> CacheKey {
        let mut h = blake3::Hasher::new();
        h.update(b"gpfarm cubin key v1\0");
        let mut field = |bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(toolchain.as_bytes());
        field(options.arch.to_string().as_bytes());
        field(match options.mode {
            CompileMode::Cubin => b"cubin",
            CompileMode::PtxJit => b"ptx-jit",
        });
        field(&(options.flags.len() as u64).to_le_bytes());
        for flag in &options.flags {
            field(flag.as_bytes());
        }
        // Only when set, so that every key made before nvJitLink options existed stays valid.
        if !options.link_flags.is_empty() {
            field(b"link flags");
            field(&(options.link_flags.len() as u64).to_le_bytes());
            for flag in &options.link_flags {
                field(flag.as_bytes());
            }
        }
        field(source);
        // Only when there are any, so that every other unit's key stays as it was.
        if !libraries.is_empty() {
            field(b"libraries");
            field(&(libraries.len() as u64).to_le_bytes());
            for library in libraries {
                field(library);
            }
        }
        CacheKey(*h.finalize().as_bytes())
    }

    /// The key in hexadecimal.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Names a compiler build exactly enough to key its output: its name and version, its library or
/// program path, and that file's size and modification time (a patch release at the same path
/// differs).
pub fn toolchain_identity(name: &str, path: &Path) -> String {
    let stamp = fs::metadata(path)
        .map(|m| {
            let modified = m.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
            format!("{} bytes, modified {}", m.len(), modified.map_or(0, |d| d.as_nanos()))
        })
        .unwrap_or_else(|_| "unreadable".into());
    format!("{name} {} ({stamp})", path.display())
}

/// `nvrtc <major>.<minor>`.
pub fn nvrtc_name(version: (u32, u32)) -> String {
    format!("nvrtc {}.{}", version.0, version.1)
}

/// A kernel found in the disk cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedKernel {
    /// The CUBIN of the unit the kernel was compiled in.
    pub cubin: Vec<u8>,
    /// Hash of that CUBIN: kernels found in the same unit share it.
    pub object: String,
    /// The kernel's symbol in the CUBIN.
    pub kernel: String,
}

/// What the disk cache holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheUsage {
    /// Compiled units stored.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Kernel entries.
    pub keys: usize,
}

/// CUBIN on disk by [`CacheKey`], bounded in size.
pub struct DiskCache {
    dir: PathBuf,
    limit: u64,
    /// Bytes of objects, as last counted plus what was added since.
    used: Mutex<u64>,
}

/// Default size limit of the disk cache.
pub const DEFAULT_CACHE_LIMIT: u64 = 2 << 30;

impl DiskCache {
    /// `$GPFARM_CACHE_DIR`, else `$XDG_CACHE_HOME/gpfarm`, else `~/.cache/gpfarm`.
    pub fn default_dir() -> Option<PathBuf> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        var("GPFARM_CACHE_DIR")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("gpfarm")))
            .or_else(|| var("HOME").map(|d| d.join(".cache").join("gpfarm")))
    }

    /// Opens (creating it if needed) the cache in `dir`, holding at most `limit` bytes of CUBIN.
    pub fn open(dir: &Path, limit: u64) -> io::Result<DiskCache> {
        let root = dir.join("v1");
        fs::create_dir_all(root.join("objects"))?;
        fs::create_dir_all(root.join("keys"))?;
        let cache = DiskCache { dir: root, limit, used: Mutex::new(0) };
        *cache.used.lock().unwrap_or_else(|e| e.into_inner()) = cache.usage().bytes;
        Ok(cache)
    }

    /// Where the cache lives.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn object_path(&self, object: &str) -> PathBuf {
        self.dir.join("objects").join(format!("{object}.cubin"))
    }

    fn key_path(&self, key: &CacheKey) -> PathBuf {
        let hex = key.hex();
        self.dir.join("keys").join(&hex[..2]).join(hex)
    }

    /// The kernel compiled under `key`, if the cache has it intact. A hit counts as a use, so
    /// it is evicted last.
    pub fn get(&self, key: &CacheKey) -> Option<CachedKernel> {
        let entry_path = self.key_path(key);
        let entry = fs::read_to_string(&entry_path).ok()?;
        let (object, kernel) = entry.trim_end().split_once(' ')?;
        let valid_name = object.len() == 64 && object.bytes().all(|b| b.is_ascii_hexdigit());
        let path = self.object_path(object);
        let cubin = if valid_name { fs::read(&path).ok() } else { None };
        match cubin {
            Some(cubin) if blake3::hash(&cubin).to_hex().as_str() == object => {
                touch(&path);
                touch(&entry_path);
                Some(CachedKernel { cubin, object: object.to_owned(), kernel: kernel.to_owned() })
            }
            Some(_) => {
                // Damaged (a crash mid-write on a file system without atomic rename, or tampering).
                let _ = fs::remove_file(&path);
                let _ = fs::remove_file(&entry_path);
                None
            }
            None => {
                let _ = fs::remove_file(&entry_path);
                None
            }
        }
    }

    /// Stores one compiled unit and an entry for each of its kernels: `(key, symbol)`.
    pub fn put(&self, cubin: &[u8], kernels: &[(CacheKey, &str)]) -> io::Result<()> {
        let object = blake3::hash(cubin).to_hex().to_string();
        let path = self.object_path(&object);
        if !path.exists() {
            write_atomically(&path, cubin)?;
            *self.used.lock().unwrap_or_else(|e| e.into_inner()) += cubin.len() as u64;
        } else {
            touch(&path);
        }
        for (key, kernel) in kernels {
            let entry = self.key_path(key);
            if let Some(parent) = entry.parent() {
                fs::create_dir_all(parent)?;
            }
            write_atomically(&entry, format!("{object} {kernel}\n").as_bytes())?;
        }
        let over = *self.used.lock().unwrap_or_else(|e| e.into_inner()) > self.limit;
        if over {
            self.evict(self.limit / 5 * 4)?;
        }
        Ok(())
    }

    /// Removes the objects and entries used longest ago until at most `target` bytes remain.
    pub fn evict(&self, target: u64) -> io::Result<()> {
        let mut objects: Vec<(SystemTime, u64, PathBuf)> = files(&self.dir.join("objects"))
            .into_iter()
            .filter_map(|p| {
                let m = fs::metadata(&p).ok()?;
                Some((m.modified().ok()?, m.len(), p))
            })
            .collect();
        objects.sort();
        let mut used: u64 = objects.iter().map(|o| o.1).sum();
        let mut removed = std::collections::HashSet::new();
        for (_, len, path) in objects {
            if used <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                used -= len;
                if let Some(object) = path.file_stem().and_then(|s| s.to_str()) {
                    removed.insert(object.to_owned());
                }
            }
        }
        // The entries that point at a removed object go with it. (Telling them by modification
        // time is not enough: an entry is written just after its object, so on a file system
        // with fine timestamps it is a little newer than the object it points at.)
        if !removed.is_empty() {
            for dir in files(&self.dir.join("keys")) {
                for entry in files(&dir) {
                    let points_at = fs::read_to_string(&entry)
                        .ok()
                        .and_then(|e| e.split_once(' ').map(|(object, _)| removed.contains(object)));
                    if points_at != Some(false) {
                        let _ = fs::remove_file(entry);
                    }
                }
            }
        }
        *self.used.lock().unwrap_or_else(|e| e.into_inner()) = used;
        Ok(())
    }

    /// What the cache holds now.
    pub fn usage(&self) -> CacheUsage {
        let objects = files(&self.dir.join("objects"));
        let bytes = objects.iter().filter_map(|p| fs::metadata(p).ok()).map(|m| m.len()).sum();
        let keys = files(&self.dir.join("keys")).iter().map(|d| files(d).len()).sum();
        CacheUsage { objects: objects.len(), bytes, keys }
    }

    /// Removes everything in the cache.
    pub fn clear(&self) -> io::Result<()> {
        self.evict(0)?;
        for dir in files(&self.dir.join("keys")) {
            fs::remove_dir_all(dir)?;
        }
        Ok(())
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir).map(|rd| rd.filter_map(|e| Some(e.ok()?.path())).collect()).unwrap_or_default()
}

fn touch(path: &Path) {
    if let Ok(f) = fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_protocol::SmArch;

    fn key(source: &str) -> CacheKey {
        CacheKey::new(source.as_bytes(), &CompileOptions::cubin(SmArch::SM_90), "nvrtc 13.0")
    }

    #[test]
    fn keys_differ_by_source_options_target_and_compiler() {
        let base = key("a");
        assert_eq!(base, key("a"));
        assert_ne!(base, key("b"));
        let o = CompileOptions::cubin(SmArch::SM_90);
        assert_ne!(base, CacheKey::new(b"a", &CompileOptions::cubin(SmArch(80)), "nvrtc 13.0"));
        assert_ne!(base, CacheKey::new(b"a", &o, "nvrtc 13.1"));
        let flagged = CompileOptions { flags: vec!["-default-device".into()], ..o.clone() };
        assert_ne!(base, CacheKey::new(b"a", &flagged, "nvrtc 13.0"));
        // Fields are length-prefixed: moving bytes between them changes the key.
        let split = CompileOptions { flags: vec!["-a".into(), "b".into()], ..o.clone() };
        let joined = CompileOptions { flags: vec!["-ab".into()], ..o };
        assert_ne!(CacheKey::new(b"x", &split, "t"), CacheKey::new(b"x", &joined, "t"));
        let linked =
            CompileOptions { link_flags: vec!["-O0".into()], ..CompileOptions::cubin(SmArch::SM_90) };
        assert_ne!(base, CacheKey::new(b"a", &linked, "nvrtc 13.0"));
        // Libraries: none is the plain key; each one, and where its bytes end, changes it.
        let o = CompileOptions::cubin(SmArch::SM_90);
        assert_eq!(CacheKey::linked(b"a", &[], &o, "nvrtc 13.0"), base);
        let with = |libs: &[&[u8]]| {
            let libs: Vec<Vec<u8>> = libs.iter().map(|l| l.to_vec()).collect();
            CacheKey::linked(b"a", &libs, &o, "nvrtc 13.0")
        };
        assert_ne!(with(&[b"lib"]), base);
        assert_ne!(with(&[b"lib"]), with(&[b"lib2"]));
        assert_ne!(with(&[b"li", b"b"]), with(&[b"lib"]));
        assert_eq!(with(&[b"lib"]), with(&[b"lib"]));
    }

    #[test]
    fn a_stored_unit_is_found_under_each_kernel_key_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        let cubin = b"\x7fELF pretend cubin".to_vec();
        cache.put(&cubin, &[(key("one"), "k1"), (key("two"), "k2")]).unwrap();
        let one = cache.get(&key("one")).unwrap();
        let two = cache.get(&key("two")).unwrap();
        assert_eq!((one.cubin.as_slice(), one.kernel.as_str()), (cubin.as_slice(), "k1"));
        assert_eq!(two.kernel, "k2");
        assert_eq!(one.object, two.object);
        assert!(cache.get(&key("three")).is_none());
        assert_eq!(cache.usage(), CacheUsage { objects: 1, bytes: cubin.len() as u64, keys: 2 });
        // A second process opening the same directory sees the same.
        assert_eq!(DiskCache::open(dir.path(), 1 << 20).unwrap().get(&key("one")), Some(one));
    }

    #[test]
    fn a_damaged_object_is_a_miss_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        cache.put(b"good bytes", &[(key("k"), "k")]).unwrap();
        let object = cache.get(&key("k")).unwrap().object;
        fs::write(cache.object_path(&object), b"bad bytes").unwrap();
        assert!(cache.get(&key("k")).is_none());
        assert!(!cache.object_path(&object).exists());
        assert_eq!(cache.usage().keys, 0);
    }

    #[test]
    fn past_its_limit_the_cache_drops_what_was_used_longest_ago() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 3000).unwrap();
        for i in 0..5u8 {
            cache.put(&vec![i; 1000], &[(key(&format!("k{i}")), "k")]).unwrap();
            // Modification times must differ for an order to exist.
            std::thread::sleep(std::time::Duration::from_millis(20));
            if i == 2 {
                // Used again: now among the newest.
                assert!(cache.get(&key("k0")).is_some());
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let usage = cache.usage();
        assert!(usage.bytes <= 3000, "{usage:?}");
        assert!(cache.get(&key("k4")).is_some(), "the newest was evicted");
        assert!(cache.get(&key("k1")).is_none(), "the oldest unused one survived");
        assert_eq!(usage.keys, usage.objects, "{usage:?}");
    }

    #[test]
    fn clear_empties_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        cache.put(b"abc", &[(key("k"), "k")]).unwrap();
        cache.clear().unwrap();
        assert_eq!(cache.usage(), CacheUsage::default());
        assert!(cache.get(&key("k")).is_none());
    }
}
