//! Times a fitting request's frame of about the size of a late Friedman-1 generation's (924
//! programs of 100 words, 20 values each): encoding, decoding, and both through a pipe between
//! two threads. `cargo run --release -p gpfarm-protocol --example frame_speed`.

use std::io::{BufReader, BufWriter};
use std::time::Instant;

use gpfarm_protocol::worker::{Request, WireFit, read_frame, write_frame};

fn main() {
    let mut fit = WireFit::new(1000);
    for k in 0..924u32 {
        let words: Vec<u32> =
            (0..100).map(|i| (k * 7919 + i * 104_729) % 60_000 + (i % 5) * 100_000).collect();
        let values: Vec<f32> = (0..20).map(|i| (k as f32 + i as f32) * 0.37 - 3.0).collect();
        fit.push_with(&words, &values, k % 3 == 0, None);
    }
    let request = Request::Fit { fit, iterations: 10, code: Vec::new() };
    for _ in 0..3 {
        let t = Instant::now();
        let mut bytes = Vec::new();
        write_frame(&mut bytes, &request).unwrap();
        let encoded = t.elapsed();
        let t = Instant::now();
        let back: Request = read_frame(&mut bytes.as_slice()).unwrap();
        let decoded = t.elapsed();
        assert!(back == request);
        let (r, w) = std::io::pipe().unwrap();
        let t = Instant::now();
        let sender = {
            let request = request.clone();
            std::thread::spawn(move || write_frame(&mut BufWriter::new(w), &request).unwrap())
        };
        let got: Request = read_frame(&mut BufReader::new(r)).unwrap();
        sender.join().unwrap();
        let piped = t.elapsed();
        assert!(got == request);
        println!(
            "{} bytes: encoded in {:.3} ms, decoded in {:.3} ms, through a pipe in {:.3} ms",
            bytes.len(),
            encoded.as_secs_f64() * 1e3,
            decoded.as_secs_f64() * 1e3,
            piped.as_secs_f64() * 1e3
        );
    }
}
