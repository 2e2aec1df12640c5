//! Sizes both sides agree on. Every other module takes its bounds from here, so that the message
//! codecs and the segment layout never need each other for a number.

/// Bytes before a segment's data region (one page).
pub const HEADER_LEN: usize = 4096;
/// Data region of a new segment. The file is sparse: untouched pages cost nothing.
pub const INITIAL_CAPACITY: usize = 4 << 20;
/// Largest data region a segment may grow to; a larger message is refused.
pub const MAX_CAPACITY: usize = 1 << 30;
/// Upper bound on what one decoded daemon message may allocate: what a segment can hold.
pub const DECODE_LIMIT: usize = MAX_CAPACITY;
/// Largest frame the GPU worker and its parent accept on their pipes (a generation's CUBINs).
pub const MAX_WORKER_FRAME: u64 = 4 << 30;
