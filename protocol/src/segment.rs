//! A daemon's shared-memory segment: a fixed header followed by a data region.
//!
//! ```text
//! 0      magic "GPFARMsg" | version | header_len | capacity (data bytes, may grow)
//!        state | go counter | done counter | client pid (attach lock) | daemon pid | daemon id
//!        request length | response length | progress (units of the request finished)
//!        request checksum | response checksum (CRC-32 of the message bytes)
//! 4096   data region: one bincode message (the request, then the response over it)
//! ```
//!
//! The daemon creates the segment (`O_CREAT | O_EXCL`, mode 0600) and removes it when it exits;
//! the client opens it. A message bigger than the data region grows the segment (the writer
//! extends the file, remaps and publishes the new capacity; the reader follows before reading),
//! so nothing is ever truncated. Every value read from the header is checked against the size
//! of the file before it is used, so a corrupt or hostile segment yields an error, not a crash;
//! every message carries a CRC-32 that its reader checks, so bytes changed in shared memory are
//! an error, not a different answer.
//!
//! Segments live in this user's private directory ([`crate::dir`], `/dev/shm/gpfarm-<uid>`,
//! mode 0700), where no other user can create or replace a name. Even there nothing is trusted
//! for its name alone: a segment is opened (with `O_NOFOLLOW`) and listed only if this user owns
//! it, it is a plain file of mode 0600 and has one link.
//! Whether a segment's daemon lives is asked of the process ([`crate::process`]), never of the
//! header.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(test)]
use std::time::Duration;

use thiserror::Error;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::PROTOCOL_VERSION;
use crate::dir::{DirError, segment_dir};
use crate::guard;
use crate::message::{self, MessageError, Request, Response};
use crate::names::{DaemonId, FarmName, NameError, SegmentName, current_uid};
pub use crate::process::process_alive;
use crate::process::{effective_uid, live_daemons};

pub use crate::limits::{HEADER_LEN, INITIAL_CAPACITY, MAX_CAPACITY};
const MAGIC: u64 = u64::from_le_bytes(*b"GPFARMsg");

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    header_len: AtomicU32,
    capacity: AtomicU64,
    state: AtomicU32,
    go: AtomicU32,
    done: AtomicU32,
    client_pid: AtomicU32,
    daemon_pid: AtomicU32,
    daemon_id: AtomicU32,
    request_len: AtomicU64,
    response_len: AtomicU64,
    progress: AtomicU32,
    request_sum: AtomicU32,
    response_sum: AtomicU32,
    /// Bumped each time a client lets go of the daemon, so clients waiting for it wake.
    turn: AtomicU32,
    /// The next place in the line of clients waiting for the daemon.
    line_next: AtomicU32,
    /// The clients waiting for the daemon, each `pid << 32 | place`; 0 is a free seat.
    line: [AtomicU64; LINE_SEATS],
}

/// Seats in a daemon's line of waiting clients; a client that finds none free waits behind
/// every seated one.
pub const LINE_SEATS: usize = 32;

/// A client's seat in a daemon's line ([`Segment::take_turn`]): none until it first waits.
#[derive(Debug, Default)]
pub struct Place(Option<(usize, u64)>);

/// Whether place `a` came before place `b` (places wrap around).
fn earlier(a: u64, b: u64) -> bool {
    ((a as u32).wrapping_sub(b as u32) as i32) < 0
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_LEN);

/// The daemon's state, mirrored by both sides as in the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum DaemonState {
    /// Loading and warming NVRTC; not yet accepting requests.
    Starting = 0,
    /// Waiting for "go".
    Available = 1,
    /// Working on a request; "done" follows.
    Processing = 2,
    /// Exited cleanly (or is about to).
    Stopped = 3,
    /// Could not start (e.g. NVRTC missing); the data region holds a [`Response::Error`].
    Failed = 4,
}

impl DaemonState {
    fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            0 => DaemonState::Starting,
            1 => DaemonState::Available,
            2 => DaemonState::Processing,
            3 => DaemonState::Stopped,
            4 => DaemonState::Failed,
            _ => return None,
        })
    }
}

/// Something wrong with a segment or a message in it.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// An OS call failed.
    #[error("{what} {name}")]
    Os {
        /// The call.
        what: &'static str,
        /// The segment.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A segment of that name already exists; `why` says whose it is and what to do.
    #[error("segment {name} already exists: {why}")]
    Exists {
        /// The segment.
        name: String,
        /// What is in the way.
        why: String,
    },
    /// The file is not one this user created as a segment (another owner, another mode, more
    /// than one link, not a plain file), so it is not used.
    #[error("{name} is not this user's segment ({why}); it is left alone")]
    NotOurs {
        /// The segment.
        name: String,
        /// What gave it away.
        why: String,
    },
    /// A message's bytes do not match the checksum written with them.
    #[error("the {what} in segment {name} is corrupt: checksum {found:08x}, written as {expected:08x}")]
    Corrupt {
        /// The segment.
        name: String,
        /// "request" or "response".
        what: &'static str,
        /// Checksum of the bytes found.
        found: u32,
        /// Checksum written with them.
        expected: u32,
    },
    /// There is no segment of that name.
    #[error("segment {0} does not exist")]
    Missing(String),
    /// The header does not describe a valid segment of this protocol version.
    #[error("segment {name} is invalid: {why}")]
    Invalid {
        /// The segment.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A message is larger than any segment may grow.
    #[error("message of {0} bytes exceeds the {MAX_CAPACITY}-byte segment limit; send fewer units per call")]
    TooLarge(usize),
    /// A message did not decode.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// The segment name is malformed.
    #[error(transparent)]
    Name(#[from] NameError),
    /// There is no safe directory to keep segments in.
    #[error(transparent)]
    Dir(#[from] DirError),
}

/// A message the client may write: a [`Request`] or a borrowed form of one.
pub trait RequestMessage {}
impl RequestMessage for Request {}
impl RequestMessage for message::CompileRef<'_> {}

/// One mapped segment.
pub struct Segment {
    name: SegmentName,
    fd: OwnedFd,
    ptr: NonNull<u8>,
    mapped: usize,
    owner: bool,
    /// The guard slot of a mapping this process did not create ([`crate::guard`]).
    guard: Option<usize>,
}

// SAFETY: the mapping belongs to the process, not to a thread; all header access goes through
// atomics, and the data region is only touched through `&mut self` or `&self` methods whose
// callers follow the protocol (one side at a time, handed over by the events).
unsafe impl Send for Segment {}

fn os_err(what: &'static str, name: &SegmentName) -> SegmentError {
    SegmentError::Os { what, name: name.to_string(), source: std::io::Error::last_os_error() }
}

/// The path of segment `name` in this user's directory of segments.
pub fn path_of(name: &SegmentName) -> Result<PathBuf, DirError> {
    Ok(segment_dir()?.join(name.to_string()))
}

fn c_path(path: &Path) -> CString {
    // The directory is checked and a SegmentName is built from validated parts: no NUL.
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

impl Segment {
    /// Creates the segment of a daemon (mode 0600, failing if it exists) in state `Starting`.
    pub fn create(name: &SegmentName, daemon_id: DaemonId) -> Result<Segment, SegmentError> {
        let path = path_of(name)?;
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid NUL-terminated path; the flags and mode are plain ints.
        let fd = unsafe { libc::open(c_path(&path).as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EEXIST) {
                return Err(SegmentError::Exists { name: show(&path), why: whose(name) });
            }
            return Err(SegmentError::Os { what: "open", name: show(&path), source: err });
        }
        // SAFETY: open returned a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let total = HEADER_LEN + INITIAL_CAPACITY;
        let seg = (|| {
            resize_file(&fd, total, name)?;
            let ptr = map(&fd, total, name)?;
            Ok(Segment { name: name.clone(), fd, ptr, mapped: total, owner: true, guard: None })
        })();
        let seg = match seg {
            Ok(seg) => seg,
            Err(e) => {
                unlink(name);
                return Err(e);
            }
        };
        let h = seg.header();
        h.version.store(PROTOCOL_VERSION, Ordering::Relaxed);
        h.header_len.store(HEADER_LEN as u32, Ordering::Relaxed);
        h.capacity.store(INITIAL_CAPACITY as u64, Ordering::Relaxed);
        h.state.store(DaemonState::Starting as u32, Ordering::Relaxed);
        h.daemon_pid.store(std::process::id(), Ordering::Relaxed);
        h.daemon_id.store(u32::from(daemon_id.0), Ordering::Relaxed);
        // The magic goes last: an opener that sees it sees a complete header.
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Opens an existing segment and checks its header.
    pub fn open(name: &SegmentName) -> Result<Segment, SegmentError> {
        let path = path_of(name)?;
        // SAFETY: as in `create`.
        let fd =
            unsafe { libc::open(c_path(&path).as_ptr(), libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOENT) {
                return Err(SegmentError::Missing(name.to_string()));
            }
            return Err(SegmentError::Os { what: "open", name: show(&path), source: err });
        }
        // SAFETY: fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Before anything is mapped: a file of another user could be truncated under the mapping.
        if let Some(why) = foreign(&fstat(&fd, name)?) {
            return Err(SegmentError::NotOurs { name: show(&path), why });
        }
        let size = file_size(&fd, name)?;
        if size < HEADER_LEN {
            return Err(invalid(name, format!("file is {size} bytes, shorter than its header")));
        }
        let ptr = map(&fd, HEADER_LEN, name)?;
        // A file cut short under the mapping faults on access: the guard turns that into lost
        // pages of zeros, which `health` and the header checks then report.
        let guard = guard::watch(ptr.as_ptr() as usize, HEADER_LEN);
        let mut seg = Segment { name: name.clone(), fd, ptr, mapped: HEADER_LEN, owner: false, guard };
        let h = seg.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(invalid(name, "no gpfarm magic (still being created, or not ours)".into()));
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != PROTOCOL_VERSION {
            return Err(invalid(
                name,
                format!(
                    "protocol version {version}, this program speaks {PROTOCOL_VERSION}: use matching gpfarm and gpfarmd builds"
                ),
            ));
        }
        let header_len = h.header_len.load(Ordering::Relaxed);
        if header_len as usize != HEADER_LEN {
            return Err(invalid(name, format!("header length {header_len}, expected {HEADER_LEN}")));
        }
        seg.sync_capacity()?;
        Ok(seg)
    }

    /// The segment's name.
    pub fn name(&self) -> &SegmentName {
        &self.name
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_LEN bytes, page-aligned, and Header is made of
        // atomics, which are valid for any bit pattern and safe to share across processes.
        unsafe { &*(self.ptr.as_ptr() as *const Header) }
    }

    /// Current state; an unknown value is an error.
    pub fn state(&self) -> Result<DaemonState, SegmentError> {
        let raw = self.header().state.load(Ordering::Acquire);
        DaemonState::from_raw(raw).ok_or_else(|| invalid(&self.name, format!("unknown state {raw}")))
    }

    /// Sets the state.
    pub fn set_state(&self, state: DaemonState) {
        self.header().state.store(state as u32, Ordering::Release);
    }

    /// The "go" event counter (client → daemon).
    pub fn go(&self) -> &AtomicU32 {
        &self.header().go
    }

    /// The "done" event counter (daemon → client).
    pub fn done(&self) -> &AtomicU32 {
        &self.header().done
    }

    /// Process id the daemon wrote at creation.
    pub fn daemon_pid(&self) -> u32 {
        self.header().daemon_pid.load(Ordering::Relaxed)
    }

    /// Daemon side: records that `units` units of the current request are finished, so that if
    /// the daemon dies the client knows which unit it died on.
    pub fn set_progress(&self, units: u32) {
        self.header().progress.store(units, Ordering::Release);
    }

    /// Units of the current request the daemon had finished.
    pub fn progress(&self) -> u32 {
        self.header().progress.load(Ordering::Acquire)
    }

    /// Daemon id the daemon wrote at creation.
    pub fn daemon_id(&self) -> u32 {
        self.header().daemon_id.load(Ordering::Relaxed)
    }

    /// Claims the daemon for client `pid`. Fails with the holder's pid if a live process holds
    /// it; a lock left by a dead client is taken over.
    pub fn lock_client(&self, pid: u32) -> Result<(), u32> {
        let word = &self.header().client_pid;
        loop {
            let holder = word.load(Ordering::Acquire);
            if holder == pid {
                return Ok(());
            }
            if holder != 0 && process_alive(holder) {
                return Err(holder);
            }
            if word.compare_exchange(holder, pid, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return Ok(());
            }
        }
    }

    /// Claims the daemon for client `pid` in its turn: clients that waited longer come first.
    /// Fails with the holder's pid (0 if the daemon is free but another client waits ahead)
    /// and keeps `place`, the client's seat in line, for the next try; call again when
    /// [`Segment::turn`] changes, and [`Segment::leave_line`] when giving up. A lock left by a
    /// dead client is taken over only while the daemon is not working for it (a keeper replaces
    /// a daemon whose client died mid-unit); a dead client's seat is freed by whoever sees it.
    pub fn take_turn(&self, pid: u32, place: &mut Place) -> Result<(), u32> {
        let h = self.header();
        let holder = h.client_pid.load(Ordering::Acquire);
        if holder == pid {
            self.leave_line(place);
            return Ok(());
        }
        let free =
            holder == 0 || (!process_alive(holder) && !matches!(self.state(), Ok(DaemonState::Processing)));
        if free
            && !self.someone_ahead(place)
            && h.client_pid.compare_exchange(holder, pid, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            self.leave_line(place);
            return Ok(());
        }
        if place.0.is_none() {
            let word = (u64::from(pid) << 32) | u64::from(h.line_next.fetch_add(1, Ordering::AcqRel));
            place.0 = h.line.iter().enumerate().find_map(|(k, seat)| {
                seat.compare_exchange(0, word, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                    .then_some((k, word))
            });
        }
        Err(if free { 0 } else { holder })
    }

    /// Whether a live client waits ahead of `place` (any live one, for a client without a seat).
    fn someone_ahead(&self, place: &Place) -> bool {
        let mine = place.0.map(|(_, w)| w);
        self.header().line.iter().any(|seat| {
            let w = seat.load(Ordering::Acquire);
            if w == 0 || Some(w) == mine {
                return false;
            }
            if !process_alive((w >> 32) as u32) {
                let _ = seat.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire);
                return false;
            }
            mine.is_none_or(|m| earlier(w, m))
        })
    }

    /// Gives up `place` in the daemon's line, if it has one.
    pub fn leave_line(&self, place: &mut Place) {
        if let Some((k, w)) = place.0.take() {
            let _ = self.header().line[k].compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Releases the daemon if `pid` holds it and wakes the clients waiting for it.
    pub fn let_go(&self, pid: u32) {
        self.unlock_client(pid);
        crate::event::signal(&self.header().turn);
    }

    /// The event counter clients waiting for their turn wait on ([`Segment::take_turn`]).
    pub fn turn(&self) -> &AtomicU32 {
        &self.header().turn
    }

    /// Releases the daemon if `pid` holds it.
    pub fn unlock_client(&self, pid: u32) {
        let _ = self.header().client_pid.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Daemon side: releases the lock if its holder has died; returns the dead holder's pid.
    pub fn release_dead_client(&self) -> Option<u32> {
        let holder = self.client_pid();
        if holder != 0 && !process_alive(holder) {
            self.unlock_client(holder);
            return Some(holder);
        }
        None
    }

    /// The client currently holding the daemon (0 if none).
    pub fn client_pid(&self) -> u32 {
        self.header().client_pid.load(Ordering::Acquire)
    }

    /// What is wrong with the segment as it is now, if anything: its file shorter than its
    /// header or than the capacity the header gives, a header that is not this protocol's
    /// (magic, version, header length, capacity out of range), an unknown state, or a page of
    /// it lost to truncation since it was mapped (see [`crate::guard`]). Reads the file's size
    /// before the header, so that a truncated file is found without touching it.
    pub fn health(&self) -> Result<(), SegmentError> {
        let size = file_size(&self.fd, &self.name)?;
        if size < HEADER_LEN {
            return Err(invalid(
                &self.name,
                format!("its file was cut to {size} bytes, shorter than its header"),
            ));
        }
        if self.guard.is_some_and(guard::lost) {
            return Err(invalid(&self.name, "its file was cut short while it was mapped".into()));
        }
        let h = self.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(invalid(&self.name, "its header's magic is gone".into()));
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != PROTOCOL_VERSION {
            return Err(invalid(&self.name, format!("its header says protocol version {version}")));
        }
        let header_len = h.header_len.load(Ordering::Relaxed);
        if header_len as usize != HEADER_LEN {
            return Err(invalid(&self.name, format!("its header length is {header_len}")));
        }
        let cap = h.capacity.load(Ordering::Acquire);
        if cap as usize > MAX_CAPACITY || cap < 4096 || HEADER_LEN + cap as usize > size {
            return Err(invalid(&self.name, format!("capacity {cap} with a file of {size} bytes")));
        }
        self.state().map(|_| ())
    }

    /// How many names the segment's file has: 1 while it is in the directory of segments, 0 once it has been
    /// removed (`None` if that cannot be read).
    pub fn links(&self) -> Option<u64> {
        fstat(&self.fd, &self.name).ok().map(|st| st.st_nlink)
    }

    /// Bytes of data region currently mapped.
    pub fn capacity(&self) -> usize {
        self.mapped - HEADER_LEN
    }

    /// Follows a growth published by the peer: validates the new capacity against the file and
    /// remaps.
    pub fn sync_capacity(&mut self) -> Result<(), SegmentError> {
        let cap = self.header().capacity.load(Ordering::Acquire);
        if cap as usize > MAX_CAPACITY || cap < 4096 {
            return Err(invalid(&self.name, format!("capacity {cap} out of range")));
        }
        let want = HEADER_LEN + cap as usize;
        let size = file_size(&self.fd, &self.name)?;
        if size < want {
            return Err(invalid(&self.name, format!("capacity {cap} but the file has {size} bytes")));
        }
        if want != self.mapped {
            self.remap(want)?;
        }
        Ok(())
    }

    /// Grows the data region to hold at least `needed` bytes and publishes the new capacity.
    pub fn ensure_capacity(&mut self, needed: usize) -> Result<(), SegmentError> {
        if needed <= self.capacity() {
            return Ok(());
        }
        if needed > MAX_CAPACITY {
            return Err(SegmentError::TooLarge(needed));
        }
        let cap = needed.next_power_of_two().clamp(INITIAL_CAPACITY, MAX_CAPACITY);
        let total = HEADER_LEN + cap;
        if file_size(&self.fd, &self.name)? < total {
            resize_file(&self.fd, total, &self.name)?;
        }
        self.remap(total)?;
        self.header().capacity.store(cap as u64, Ordering::Release);
        Ok(())
    }

    fn remap(&mut self, len: usize) -> Result<(), SegmentError> {
        let new = map(&self.fd, len, &self.name)?;
        // SAFETY: `ptr`/`mapped` describe a mapping this struct made and nothing borrows it now
        // (remap takes `&mut self`).
        if let Some(slot) = self.guard.take() {
            guard::unwatch(slot);
        }
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
        self.ptr = new;
        self.mapped = len;
        if !self.owner {
            self.guard = guard::watch(new.as_ptr() as usize, len);
        }
        Ok(())
    }

    fn data(&self) -> &[u8] {
        // SAFETY: the mapping spans HEADER_LEN + capacity bytes, checked against the file size.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(HEADER_LEN), self.capacity()) }
    }

    fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`; `&mut self` keeps this process from aliasing it, and the protocol
        // keeps the peer out while this side owns the region.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(HEADER_LEN), self.capacity()) }
    }

    /// Writes a message into the data region (growing it if needed); returns its size and
    /// checksum.
    fn write_message<T: bincode::Encode>(&mut self, msg: &T) -> Result<(usize, u32), SegmentError> {
        let n = match message::encode_into(msg, self.data_mut()) {
            Ok(n) => n,
            Err(_) => {
                let bytes = message::encode_to_vec(msg)?;
                self.ensure_capacity(bytes.len())?;
                self.data_mut()[..bytes.len()].copy_from_slice(&bytes);
                bytes.len()
            }
        };
        Ok((n, crc32fast::hash(&self.data()[..n])))
    }

    /// The `len` message bytes at the start of the data region, checked against `sum`.
    fn message_bytes(&mut self, len: u64, sum: u32, what: &'static str) -> Result<&[u8], SegmentError> {
        self.sync_capacity()?;
        if len as usize > self.capacity() {
            return Err(invalid(
                &self.name,
                format!("message length {len} exceeds capacity {}", self.capacity()),
            ));
        }
        let bytes = &self.data()[..len as usize];
        let found = crc32fast::hash(bytes);
        if found != sum {
            return Err(SegmentError::Corrupt { name: self.name.to_string(), what, found, expected: sum });
        }
        Ok(bytes)
    }

    /// Client side: writes a request (growing the segment if needed); returns its size.
    pub fn write_request<T: bincode::Encode + RequestMessage>(
        &mut self,
        req: &T,
    ) -> Result<usize, SegmentError> {
        let (n, sum) = self.write_message(req)?;
        self.header().request_sum.store(sum, Ordering::Relaxed);
        self.header().request_len.store(n as u64, Ordering::Release);
        Ok(n)
    }

    /// Daemon side: reads and validates the request.
    pub fn read_request(&mut self) -> Result<Request, SegmentError> {
        let len = self.header().request_len.load(Ordering::Acquire);
        let sum = self.header().request_sum.load(Ordering::Relaxed);
        Ok(message::decode_request(self.message_bytes(len, sum, "request")?)?)
    }

    /// Daemon side: writes a response (growing the segment if needed); returns its size.
    pub fn write_response(&mut self, resp: &Response) -> Result<usize, SegmentError> {
        let (n, sum) = self.write_message(resp)?;
        self.header().response_sum.store(sum, Ordering::Relaxed);
        self.header().response_len.store(n as u64, Ordering::Release);
        Ok(n)
    }

    /// Client side: reads and validates the response.
    pub fn read_response(&mut self) -> Result<Response, SegmentError> {
        let len = self.header().response_len.load(Ordering::Acquire);
        let sum = self.header().response_sum.load(Ordering::Relaxed);
        Ok(message::decode_response(self.message_bytes(len, sum, "response")?)?)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Some(slot) = self.guard.take() {
            guard::unwatch(slot);
        }
        // SAFETY: unmapping our own mapping; nothing borrows it past `drop`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
        if self.owner {
            unlink(&self.name);
        }
    }
}

fn invalid(name: &SegmentName, why: String) -> SegmentError {
    SegmentError::Invalid { name: name.to_string(), why }
}

fn resize_file(fd: &OwnedFd, len: usize, name: &SegmentName) -> Result<(), SegmentError> {
    // SAFETY: valid descriptor; ftruncate on a shm object only sets its size.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(os_err("ftruncate", name));
    }
    Ok(())
}

fn fstat(fd: &OwnedFd, name: &SegmentName) -> Result<libc::stat, SegmentError> {
    // SAFETY: zeroed `stat` is a valid out-parameter; the descriptor is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(os_err("fstat", name));
    }
    Ok(st)
}

fn file_size(fd: &OwnedFd, name: &SegmentName) -> Result<usize, SegmentError> {
    Ok(fstat(fd, name)?.st_size.max(0) as usize)
}

/// What makes a file unlike a segment this user created (`O_EXCL`, mode 0600, never linked):
/// `None` if nothing does.
fn foreign(st: &libc::stat) -> Option<String> {
    ownership_problem(st.st_uid, st.st_mode, st.st_nlink)
}

fn ownership_problem(uid: u32, mode: u32, links: u64) -> Option<String> {
    let me = effective_uid();
    if uid != me {
        return Some(format!("owned by uid {uid}, not by uid {me}"));
    }
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Some("not a plain file".into());
    }
    if mode & 0o7777 != 0o600 {
        return Some(format!("mode {:04o}, not 0600", mode & 0o7777));
    }
    if links != 1 {
        return Some(format!("{links} links, not 1"));
    }
    None
}

/// Why segment `name` cannot be created now, if a file already holds its name: whose it is and
/// what to do (for an error message); `None` if the name is free.
pub fn name_taken(name: &SegmentName) -> Option<String> {
    std::fs::symlink_metadata(path_of(name).ok()?).ok().map(|_| whose(name))
}

/// Who holds the name of a segment that could not be created, for the error.
fn whose(name: &SegmentName) -> String {
    use std::os::unix::fs::MetadataExt;
    let Some(meta) = path_of(name).ok().and_then(|p| std::fs::symlink_metadata(p).ok()) else {
        return "it was there a moment ago and is gone now; try again".into();
    };
    if let Some(why) = ownership_problem(meta.uid(), meta.mode(), meta.nlink()) {
        return format!(
            "it is not this user's segment ({why}): someone else holds the name; choose another farm name or have its owner remove it"
        );
    }
    match crate::process::find_daemon(name) {
        Some(pid) => format!("daemon pid {pid} of farm {} serves it; choose another farm name", name.farm),
        None => "its daemon is gone; `gpfarm daemons clean` removes it".into(),
    }
}

fn map(fd: &OwnedFd, len: usize, name: &SegmentName) -> Result<NonNull<u8>, SegmentError> {
    // SAFETY: a fresh shared mapping of a descriptor we own; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err("mmap", name));
    }
    NonNull::new(p.cast()).ok_or_else(|| os_err("mmap", name))
}

/// Removes a segment's name; mappings that are still open stay valid until unmapped.
pub fn unlink(name: &SegmentName) -> bool {
    path_of(name).is_ok_and(|p| std::fs::remove_file(p).is_ok())
}

/// The path as text, for messages.
fn show(path: &Path) -> String {
    path.display().to_string()
}

/// Files in this user's directory of segments named as this user's segments, each with what is
/// wrong with it (`None`: it is this user's own).
fn named_as_ours() -> Vec<(SegmentName, Option<String>)> {
    use std::os::unix::fs::MetadataExt;
    let uid = current_uid();
    let Ok(dir) = segment_dir() else { return Vec::new() };
    let Ok(dir) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<(SegmentName, Option<String>)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = SegmentName::parse(e.file_name().to_str()?).ok().filter(|n| n.uid == uid)?;
            // The entry itself, not what a link points to.
            let meta = std::fs::symlink_metadata(e.path()).ok()?;
            Some((name, ownership_problem(meta.uid(), meta.mode(), meta.nlink())))
        })
        .collect();
    names.sort_by(|a, b| (a.0.farm.as_str(), a.0.id).cmp(&(b.0.farm.as_str(), b.0.id)));
    names
}

/// Every segment of the current user in its directory of segments: named for this user *and* owned by this
/// user, a plain file of mode 0600 with one link. Files that only carry the name are left out
/// ([`impostors`] lists them).
pub fn list_segments() -> Vec<SegmentName> {
    named_as_ours().into_iter().filter(|(_, problem)| problem.is_none()).map(|(n, _)| n).collect()
}

/// Files named as this user's segments that are not (another owner, mode or link count), with
/// what gave each away. Nothing of this user reads, signals or removes them.
pub fn impostors() -> Vec<(SegmentName, String)> {
    named_as_ours().into_iter().filter_map(|(n, problem)| Some((n, problem?))).collect()
}

/// Removes this user's segments (of one farm, or of all) that no live daemon serves (killed,
/// crashed); returns their names. Whether a daemon serves a segment is asked of the processes,
/// not read from the segment: a header that is corrupt or forged cannot make a live daemon's
/// segment look stale, nor keep a dead one's.
pub fn remove_stale_segments(only: Option<&FarmName>) -> Vec<SegmentName> {
    let candidates: Vec<SegmentName> =
        list_segments().into_iter().filter(|n| only.is_none_or(|f| &n.farm == f)).collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let live = live_daemons();
    candidates.into_iter().filter(|name| !live.contains_key(name) && unlink(name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::DaemonId;
    use crate::types::{CompileOptions, SmArch, Unit};

    fn fresh_name() -> SegmentName {
        SegmentName::new(&FarmName::random(), DaemonId(0))
    }

    #[test]
    fn a_dead_child_not_yet_reaped_is_not_alive() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(process_alive(pid));
        child.kill().unwrap(); // SIGKILL, not reaped: a zombie until `wait`
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !crate::process::is_zombie(pid) {
            assert!(std::time::Instant::now() < until, "{pid} never became a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: signal 0 only checks for existence.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, 0) }, 0, "the zombie still answers kill(pid, 0)");
        assert!(!process_alive(pid), "a zombie counts as dead");
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }

    #[test]
    fn a_created_segment_opens_with_its_header_and_is_removed_on_drop() {
        let name = fresh_name();
        let seg = Segment::create(&name, DaemonId(3)).unwrap();
        let mode = std::fs::metadata(path_of(&name).unwrap()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        let peer = Segment::open(&name).unwrap();
        assert_eq!(peer.daemon_id(), 3);
        assert_eq!(peer.daemon_pid(), std::process::id());
        assert_eq!(peer.state().unwrap(), DaemonState::Starting);
        drop(peer);
        drop(seg);
        assert!(matches!(Segment::open(&name), Err(SegmentError::Missing(_))));
    }

    #[test]
    fn creating_an_existing_segment_fails() {
        let name = fresh_name();
        let _seg = Segment::create(&name, DaemonId(0)).unwrap();
        assert!(matches!(Segment::create(&name, DaemonId(0)), Err(SegmentError::Exists { .. })));
    }

    #[test]
    fn a_request_larger_than_the_segment_grows_it_for_both_sides() {
        let name = fresh_name();
        let mut daemon = Segment::create(&name, DaemonId(0)).unwrap();
        let mut client = Segment::open(&name).unwrap();
        let big = "x".repeat(INITIAL_CAPACITY * 3);
        let req = Request::Compile {
            options: CompileOptions::cubin(SmArch::SM_90),
            units: vec![Unit::new("big.cu", big)],
        };
        let n = client.write_request(&req).unwrap();
        assert!(n > INITIAL_CAPACITY);
        assert!(client.capacity() >= n);
        assert_eq!(daemon.read_request().unwrap(), req);
        assert_eq!(daemon.capacity(), client.capacity());
    }

    #[test]
    fn a_corrupt_length_is_an_error_not_a_crash() {
        let name = fresh_name();
        let daemon = Segment::create(&name, DaemonId(0)).unwrap();
        let mut client = Segment::open(&name).unwrap();
        daemon.header().request_len.store(u64::MAX, Ordering::Release);
        let mut daemon = daemon;
        assert!(daemon.read_request().is_err());
        daemon.header().capacity.store(u64::MAX, Ordering::Release);
        assert!(client.sync_capacity().is_err());
    }

    #[test]
    fn a_second_live_client_is_refused_the_lock() {
        let name = fresh_name();
        let seg = Segment::create(&name, DaemonId(0)).unwrap();
        let me = std::process::id();
        assert_eq!(seg.lock_client(me), Ok(()));
        // pid 1 is always alive.
        seg.unlock_client(me);
        assert_eq!(seg.lock_client(1), Ok(()));
        assert_eq!(seg.lock_client(me), Err(1));
    }

    #[test]
    fn clients_take_their_turns_in_the_order_they_came_and_a_dead_one_holds_up_nobody() {
        let name = fresh_name();
        let seg = Segment::create(&name, DaemonId(0)).unwrap();
        seg.set_state(DaemonState::Available);
        // Live processes stand for the clients (a client is known by its pid).
        let mut kids: Vec<_> =
            (0..4).map(|_| std::process::Command::new("sleep").arg("30").spawn().unwrap()).collect();
        let [a, b, c, d] = [0, 1, 2, 3].map(|k| kids[k].id());
        let mut places: Vec<Place> = (0..4).map(|_| Place::default()).collect();
        assert_eq!(seg.take_turn(a, &mut places[0]), Ok(()));
        assert_eq!(seg.take_turn(d, &mut places[3]), Err(a));
        assert_eq!(seg.take_turn(b, &mut places[1]), Err(a));
        assert_eq!(seg.take_turn(c, &mut places[2]), Err(a));
        let seen = seg.turn().load(Ordering::Acquire);
        seg.let_go(a);
        assert_ne!(seg.turn().load(Ordering::Acquire), seen, "waiting clients are not woken");
        // d came first but died waiting: its seat is freed, and b is next, then c; a, back for
        // more, waits behind c.
        kids[3].kill().unwrap();
        kids[3].wait().unwrap();
        assert_eq!(seg.take_turn(c, &mut places[2]), Err(0), "c went before b");
        assert_eq!(seg.take_turn(a, &mut places[0]), Err(0), "a went before those waiting");
        assert_eq!(seg.take_turn(b, &mut places[1]), Ok(()));
        seg.let_go(b);
        assert_eq!(seg.take_turn(a, &mut places[0]), Err(0), "a went before c");
        assert_eq!(seg.take_turn(c, &mut places[2]), Ok(()));
        seg.let_go(c);
        assert_eq!(seg.take_turn(a, &mut places[0]), Ok(()));
        assert!(seg.header().line.iter().all(|s| s.load(Ordering::Acquire) == 0), "a seat was kept");
        // A client that died while its daemon works for it keeps the lock (its keeper replaces
        // that daemon); once the daemon is idle, the lock is taken over.
        kids[0].kill().unwrap();
        kids[0].wait().unwrap();
        seg.set_state(DaemonState::Processing);
        assert_eq!(seg.take_turn(b, &mut places[1]), Err(a));
        seg.set_state(DaemonState::Available);
        assert_eq!(seg.take_turn(b, &mut places[1]), Ok(()));
        for k in &mut kids[1..3] {
            k.kill().unwrap();
            k.wait().unwrap();
        }
    }

    #[test]
    fn a_lock_left_by_a_dead_client_is_taken_over() {
        let name = fresh_name();
        let seg = Segment::create(&name, DaemonId(0)).unwrap();
        let dead = {
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let pid = child.id();
            child.wait().unwrap();
            pid
        };
        assert_eq!(seg.lock_client(dead), Ok(()));
        assert_eq!(seg.lock_client(std::process::id()), Ok(()));
    }

    #[test]
    fn a_second_link_or_another_mode_makes_a_segment_foreign() {
        use std::os::unix::fs::PermissionsExt;
        let name = fresh_name();
        let _seg = Segment::create(&name, DaemonId(0)).unwrap();
        let path = path_of(&name).unwrap();
        // A link planted under another name of this user's, as an impostor would.
        let twin = fresh_name();
        std::fs::hard_link(&path, path_of(&twin).unwrap()).unwrap();
        for n in [&name, &twin] {
            let e = Segment::open(n).err().expect("a linked segment was opened");
            assert!(matches!(&e, SegmentError::NotOurs { why, .. } if why.contains("2 links")), "{e}");
            assert!(!list_segments().contains(n));
            assert!(impostors().iter().any(|(i, why)| i == n && why.contains("2 links")));
        }
        assert!(remove_stale_segments(Some(&twin.farm)).is_empty(), "an impostor was removed");
        assert!(unlink(&twin));
        assert!(Segment::open(&name).is_ok(), "one link again: the segment is ours");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Segment::open(&name).err().expect("a 0644 segment was opened");
        assert!(e.to_string().contains("mode 0644, not 0600"), "{e}");
    }

    #[test]
    fn a_file_of_another_user_is_refused_before_it_is_mapped() {
        if effective_uid() != 0 {
            eprintln!(
                "SKIPPED a_file_of_another_user_is_refused_before_it_is_mapped: giving a file away needs root"
            );
            return;
        }
        let name = fresh_name();
        let seg = Segment::create(&name, DaemonId(0)).unwrap();
        let path = c_path(&path_of(&name).unwrap());
        // SAFETY: a valid path; 65534 is `nobody`.
        assert_eq!(unsafe { libc::chown(path.as_ptr(), 65534, 65534) }, 0);
        let e = Segment::open(&name).err().expect("another user's file was opened");
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        assert!(!list_segments().contains(&name));
        assert!(remove_stale_segments(Some(&name.farm)).is_empty(), "another user's file was removed");
        let e = Segment::create(&name, DaemonId(0)).err().expect("created over another user's file");
        assert!(e.to_string().contains("someone else holds the name"), "{e}");
        drop(seg);
    }

    #[test]
    fn an_existing_name_says_whose_it_is() {
        let name = fresh_name();
        let _seg = Segment::create(&name, DaemonId(0)).unwrap();
        let e = Segment::create(&name, DaemonId(0)).err().unwrap().to_string();
        // This test process is not a gpfarmd: the name is held by a segment nobody serves.
        assert!(e.contains("its daemon is gone; `gpfarm daemons clean` removes it"), "{e}");
    }

    #[test]
    fn bytes_changed_in_a_message_are_caught_by_its_checksum() {
        use crate::types::{UnitOutcome, UnitResult, UnitTimings};
        let name = fresh_name();
        let mut daemon = Segment::create(&name, DaemonId(0)).unwrap();
        let mut client = Segment::open(&name).unwrap();
        let results = (0..8)
            .map(|i| UnitResult {
                outcome: UnitOutcome::Cubin(vec![i as u8; 4000]),
                log: String::new(),
                timings: UnitTimings::default(),
            })
            .collect();
        let response = Response::Compiled { results, daemon_us: 1, decode_us: 2 };
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut changed = 0;
        for _ in 0..500 {
            let n = daemon.write_response(&response).unwrap();
            let at = (next() as usize) % (n - 32);
            let original = client.data()[at..at + 32].to_vec();
            let noise: Vec<u8> = (0..32).map(|_| next() as u8).collect();
            client.data_mut()[at..at + 32].copy_from_slice(&noise);
            match client.read_response() {
                Err(SegmentError::Corrupt { what: "response", .. }) => changed += 1,
                other => {
                    assert_eq!(noise, original, "32 changed bytes at {at} went unnoticed: {other:?}");
                }
            }
        }
        assert!(changed > 490, "only {changed} of 500 corruptions were real");
        daemon.write_response(&response).unwrap();
        assert_eq!(client.read_response().unwrap(), response);
        let n = client.write_request(&Request::Hello).unwrap();
        client.data_mut()[n - 1] ^= 1;
        assert!(matches!(daemon.read_request(), Err(SegmentError::Corrupt { what: "request", .. })));
    }

    #[test]
    fn segments_of_dead_daemons_are_found_stale_and_removed() {
        let name = fresh_name();
        let seg = Segment::create(&name, DaemonId(0)).unwrap();
        // This test process is not a gpfarmd, so its segment looks abandoned.
        std::mem::forget(seg);
        let removed = remove_stale_segments(Some(&name.farm));
        assert!(removed.contains(&name), "{removed:?}");
        assert!(matches!(Segment::open(&name), Err(SegmentError::Missing(_))));
    }
}
