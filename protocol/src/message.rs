//! Requests (client → daemon) and responses (daemon → client), encoded with bincode 2.
//!
//! Decoding is bounded: a length prefix read from shared memory can never make the decoder
//! allocate more than [`DECODE_LIMIT`] bytes, and any malformed input is an error, not a panic.

use bincode::config::{self, Configuration, Limit, LittleEndian, Varint};
use bincode::{Decode, Encode};
use thiserror::Error;

use crate::names::DaemonId;
use crate::types::{CompileOptions, Unit, UnitResult};

pub use crate::limits::DECODE_LIMIT;

type Config = Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT>>;

fn config() -> Config {
    config::standard().with_limit::<DECODE_LIMIT>()
}

/// What a client asks of a daemon.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Request {
    /// Describe yourself (the handshake).
    Hello,
    /// Compile every unit with the same options; answer with one result per unit, in order.
    Compile {
        /// Options shared by all units.
        options: CompileOptions,
        /// The units.
        units: Vec<Unit>,
    },
    /// Exit cleanly, removing the segment.
    Shutdown,
}

/// A borrowed [`Request::Compile`]: encodes to exactly the same bytes, without copying the units.
pub struct CompileRef<'a> {
    /// Options shared by all units.
    pub options: &'a CompileOptions,
    /// The units.
    pub units: &'a [&'a Unit],
}

impl Encode for CompileRef<'_> {
    fn encode<E: bincode::enc::Encoder>(&self, e: &mut E) -> Result<(), bincode::error::EncodeError> {
        // Variant index of `Request::Compile`, then its fields in order; a slice encodes as a Vec.
        1u32.encode(e)?;
        self.options.encode(e)?;
        self.units.encode(e)
    }
}

/// What a daemon reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct DaemonInfo {
    /// Its id within the farm.
    pub id: DaemonId,
    /// Its process id.
    pub pid: u32,
    /// NVRTC version it loaded, (major, minor).
    pub nvrtc_version: (u32, u32),
    /// Where that NVRTC came from (a path).
    pub nvrtc_path: String,
    /// Name of the GPU whose context it holds, if any.
    pub gpu: Option<String>,
    /// How long loading and warming NVRTC took at start-up, in microseconds.
    pub warmup_us: u64,
}

/// What a daemon answers.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Response {
    /// Answer to [`Request::Hello`].
    Hello(DaemonInfo),
    /// Answer to [`Request::Compile`].
    Compiled {
        /// One per unit, in request order.
        results: Vec<UnitResult>,
        /// Time from reading the request to having written the results' start, microseconds.
        daemon_us: u64,
        /// Time spent decoding the request, microseconds.
        decode_us: u64,
    },
    /// Answer to [`Request::Shutdown`]: the daemon is exiting.
    Bye,
    /// The request could not be served at all (e.g. it did not decode).
    Error(String),
}

/// A message that failed to encode or decode.
#[derive(Debug, Error)]
pub enum MessageError {
    /// The bytes are not a valid message of this protocol version.
    #[error("malformed message")]
    Decode(#[from] bincode::error::DecodeError),
    /// The message did not fit where it was written.
    #[error("message does not fit")]
    Encode(#[from] bincode::error::EncodeError),
    /// The bytes decoded but left bytes over, which a well-formed peer never sends.
    #[error("malformed message: {0} trailing bytes")]
    Trailing(usize),
}

fn decode_exact<T: Decode<()>>(bytes: &[u8]) -> Result<T, MessageError> {
    let (value, used) = bincode::decode_from_slice(bytes, config())?;
    if used != bytes.len() {
        return Err(MessageError::Trailing(bytes.len() - used));
    }
    Ok(value)
}

/// Decodes a request; any byte string is safe to pass.
pub fn decode_request(bytes: &[u8]) -> Result<Request, MessageError> {
    decode_exact(bytes)
}

/// Decodes a response; any byte string is safe to pass.
pub fn decode_response(bytes: &[u8]) -> Result<Response, MessageError> {
    decode_exact(bytes)
}

/// Encodes `msg` into `buf`, returning the bytes written, or an error if it does not fit.
pub fn encode_into<T: Encode>(msg: &T, buf: &mut [u8]) -> Result<usize, MessageError> {
    Ok(bincode::encode_into_slice(msg, buf, config())?)
}

/// Encodes `msg` into a fresh vector (used when it did not fit and the segment must grow).
pub fn encode_to_vec<T: Encode>(msg: &T) -> Result<Vec<u8>, MessageError> {
    Ok(bincode::encode_to_vec(msg, config())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CompileMode, FailureKind, SmArch, UnitOutcome, UnitTimings};
    use proptest::prelude::*;

    fn sample_request() -> Request {
        Request::Compile {
            options: CompileOptions {
                arch: SmArch(90),
                mode: CompileMode::Cubin,
                flags: vec!["-default-device".into()],
                link_flags: vec!["-O0".into()],
            },
            units: vec![Unit::new("a.cu", "__global__ void k(){}"), Unit::new("b.cu", "")],
        }
    }

    #[test]
    fn requests_round_trip() {
        let req = sample_request();
        let bytes = encode_to_vec(&req).unwrap();
        assert_eq!(decode_request(&bytes).unwrap(), req);
    }

    #[test]
    fn responses_round_trip() {
        let resp = Response::Compiled {
            results: vec![
                UnitResult {
                    outcome: UnitOutcome::Cubin(vec![0x7f, b'E', b'L', b'F']),
                    log: String::new(),
                    timings: UnitTimings { compile_us: 5, extract_us: 1, jit_us: 0 },
                },
                UnitResult::failed(FailureKind::Compilation, "syntax error"),
            ],
            daemon_us: 42,
            decode_us: 1,
        };
        let bytes = encode_to_vec(&resp).unwrap();
        assert_eq!(decode_response(&bytes).unwrap(), resp);
    }

    #[test]
    fn a_truncated_request_is_an_error() {
        let bytes = encode_to_vec(&sample_request()).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode_request(&bytes[..cut]).is_err(), "prefix of {cut} decoded");
        }
    }

    #[test]
    fn a_borrowed_compile_request_encodes_like_the_owned_one() {
        let owned = sample_request();
        let Request::Compile { options, units } = &owned else { unreachable!() };
        let refs: Vec<&Unit> = units.iter().collect();
        let borrowed = CompileRef { options, units: &refs };
        assert_eq!(encode_to_vec(&borrowed).unwrap(), encode_to_vec(&owned).unwrap());
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = encode_to_vec(&Request::Hello).unwrap();
        bytes.push(0);
        assert!(matches!(decode_request(&bytes), Err(MessageError::Trailing(1))));
    }

    #[test]
    fn encoding_into_a_short_buffer_fails_instead_of_truncating() {
        let mut buf = [0u8; 8];
        assert!(encode_into(&sample_request(), &mut buf).is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
        }

        #[test]
        fn huge_length_prefixes_do_not_allocate(len in (1u64 << 40)..u64::MAX) {
            // Variant 1 (Compile), then a varint u64 length claiming an enormous flags vector.
            let mut bytes = vec![1u8, 90, 0, 253];
            bytes.extend_from_slice(&len.to_le_bytes());
            prop_assert!(decode_request(&bytes).is_err());
        }
    }
}
