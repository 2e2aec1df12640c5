//! Arrays of numbers on the worker's pipe as their little-endian bytes, one copy each way,
//! instead of bincode's variable-length integers, which it writes and reads one element at a time
//! (a late Friedman-1 generation's fitting request, about 200 KB, took about a millisecond each
//! way so). Each array is its length (as bincode writes a `u64`) and then its elements' bytes.

use bincode::de::Decoder;
use bincode::de::read::Reader;
use bincode::enc::Encoder;
use bincode::enc::write::Writer;
use bincode::error::{DecodeError, EncodeError};
use bincode::{Decode, Encode};

/// A number sent as its little-endian bytes.
pub(crate) trait Plain: Copy {
    /// Its size in bytes.
    const SIZE: usize;
    /// Writes its bytes into `out` (`SIZE` bytes).
    fn put(self, out: &mut [u8]);
    /// It, from its `SIZE` bytes.
    fn take(bytes: &[u8]) -> Self;
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl Plain for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn take(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("SIZE bytes"))
            }
        }
    )*};
}

plain!(u32, i32, f32, f64);

/// Writes `v`: its length, then its elements' bytes.
pub(crate) fn encode<T: Plain, E: Encoder>(v: &[T], e: &mut E) -> Result<(), EncodeError> {
    (v.len() as u64).encode(e)?;
    let mut bytes = vec![0u8; v.len() * T::SIZE];
    for (out, &x) in bytes.chunks_exact_mut(T::SIZE).zip(v) {
        x.put(out);
    }
    e.writer().write(&bytes)
}

/// Reads what [`encode`] wrote. The length is claimed against the decoder's limit, and the
/// elements are read a few kilobytes at a time, so a frame that lies about it fails having
/// allocated no more than the bytes it holds.
pub(crate) fn decode<T: Plain, D: Decoder>(d: &mut D) -> Result<Vec<T>, DecodeError> {
    let len = u64::decode(d)?;
    let len = usize::try_from(len).map_err(|_| DecodeError::OutsideUsizeRange(len))?;
    d.claim_container_read::<T>(len)?;
    let mut left = len.checked_mul(T::SIZE).ok_or(DecodeError::LimitExceeded)?;
    let mut out = Vec::with_capacity(len.min(CHUNK / T::SIZE));
    // A multiple of every element's size.
    let mut chunk = [0u8; CHUNK];
    while left > 0 {
        let n = left.min(CHUNK);
        d.reader().read(&mut chunk[..n])?;
        out.extend(chunk[..n].chunks_exact(T::SIZE).map(T::take));
        left -= n;
    }
    Ok(out)
}

/// Bytes read at a time.
const CHUNK: usize = 8192;

/// `Encode`, `Decode` and `BorrowDecode` for a struct from one list of its fields, in order: each
/// an array of numbers sent as its bytes (`raw`, [`encode`]) or anything bincode writes (`plain`).
/// One list serves both ways, so they cannot disagree on the order.
macro_rules! raw_message {
    ($name:ident { $($kind:ident $field:ident),* $(,)? }) => {
        impl bincode::Encode for $name {
            fn encode<E: bincode::enc::Encoder>(&self, e: &mut E) -> Result<(), bincode::error::EncodeError> {
                $( $crate::raw::raw_message!(@encode $kind, &self.$field, e); )*
                Ok(())
            }
        }

        impl<C> bincode::Decode<C> for $name {
            fn decode<D: bincode::de::Decoder<Context = C>>(d: &mut D) -> Result<Self, bincode::error::DecodeError> {
                Ok($name { $( $field: $crate::raw::raw_message!(@decode $kind, d), )* })
            }
        }

        bincode::impl_borrow_decode!($name);
    };
    (@encode raw, $v:expr, $e:ident) => { $crate::raw::encode($v, $e)? };
    (@encode plain, $v:expr, $e:ident) => { bincode::Encode::encode($v, $e)? };
    (@decode raw, $d:ident) => { $crate::raw::decode($d)? };
    (@decode plain, $d:ident) => { bincode::Decode::decode($d)? };
}

pub(crate) use raw_message;
