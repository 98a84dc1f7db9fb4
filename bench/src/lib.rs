//! What the comparison benches share: interleaved sampling, percentiles and
//! the side-by-side table they print.

use std::time::{Duration, Instant};

/// True under `cargo bench`; `cargo test --all-targets` runs each bench once, small, as a smoke test.
pub fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One variant under test: `calls` calls of `f` make one sample (fast
/// variants batch calls, since one is below the clock's resolution).
pub struct Variant<'a> {
    pub name: String,
    pub calls: u32,
    pub f: Box<dyn FnMut() + 'a>,
    pub samples: Vec<Duration>,
}

impl<'a> Variant<'a> {
    pub fn new(name: impl Into<String>, calls: u32, f: impl FnMut() + 'a) -> Variant<'a> {
        Variant {
            name: name.into(),
            calls,
            f: Box::new(f),
            samples: Vec::new(),
        }
    }

    fn sample(&mut self) {
        let t = Instant::now();
        for _ in 0..self.calls {
            (self.f)();
        }
        self.samples.push(t.elapsed() / self.calls);
    }

    pub fn p50(&self) -> Duration {
        percentile(&self.samples, 0.5)
    }

    pub fn p99(&self) -> Duration {
        percentile(&self.samples, 0.99)
    }
}

/// `default`, or `BENCH_ROUNDS` when it is set (longer runs for a profiler).
pub fn rounds(default: usize) -> usize {
    std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

/// Keep only the variants whose name contains `BENCH_ONLY`, when it is set
/// (for profiling one variant: `BENCH_ONLY=Rust perf record ...`).
pub fn only(variants: &mut Vec<Variant>) {
    if let Ok(filter) = std::env::var("BENCH_ONLY") {
        variants.retain(|v| v.name.contains(&filter));
    }
}

/// `rounds` samples of every variant, interleaved in blocks of `block`
/// samples (so machine noise hits each alike, while one variant's memory
/// traffic does not land on the next one's every sample), after `warmup`
/// unmeasured calls of each; samples come back sorted.
pub fn interleave(variants: &mut [Variant], warmup: usize, rounds: usize) {
    interleave_blocks(variants, warmup, rounds, 1)
}

pub fn interleave_blocks(variants: &mut [Variant], warmup: usize, rounds: usize, block: usize) {
    for _ in 0..warmup {
        for v in variants.iter_mut() {
            (v.f)();
        }
    }
    let block = block.max(1);
    let mut done = 0;
    while done < rounds {
        let n = block.min(rounds - done);
        for v in variants.iter_mut() {
            (v.f)(); // the first call after a switch warms this variant up again
            for _ in 0..n {
                v.sample();
            }
        }
        done += n;
    }
    for v in variants.iter_mut() {
        v.samples.sort();
    }
}

pub fn micros(d: Duration) -> String {
    let us = d.as_nanos() as f64 / 1000.0;
    if us < 10.0 {
        format!("{us:.2} us")
    } else if us < 10_000.0 {
        format!("{us:.1} us")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// The table: p50, p99, calls per second at p50, and p50 as a multiple of the first row's.
pub fn table(title: &str, variants: &[Variant]) {
    if variants.is_empty() {
        return;
    }
    let floor = variants[0].p50().as_nanos().max(1) as f64;
    println!("\n{title}");
    println!(
        "{:<52} {:>11} {:>11} {:>12} {:>10}",
        "variant", "p50", "p99", "per second", "vs first"
    );
    for v in variants {
        let p50 = v.p50();
        println!(
            "{:<52} {:>11} {:>11} {:>12.0} {:>9.1}x",
            v.name,
            micros(p50),
            micros(v.p99()),
            1e9 / p50.as_nanos().max(1) as f64,
            p50.as_nanos() as f64 / floor
        );
    }
}

/// Resident memory of this process now, and its peak, in bytes (Linux).
pub fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// An OTLP/HTTP receiver on loopback that answers every request with 200 and
/// counts what it got: where the benches send telemetry when they measure it on.
pub struct OtlpSink {
    pub endpoint: String,
    /// Requests and bytes received so far (the proof that telemetry was on).
    pub received: std::sync::Arc<(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)>,
}

impl OtlpSink {
    pub fn requests_and_bytes(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.received.0.load(Relaxed), self.received.1.load(Relaxed))
    }
}

pub fn otlp_sink() -> OtlpSink {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::Ordering::Relaxed;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = std::sync::Arc::new((
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    ));
    let counts = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counts = counts.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end().to_ascii_lowercase();
                        if h.is_empty() {
                            break;
                        }
                        if let Some(v) = h.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    counts.0.fetch_add(1, Relaxed);
                    counts.1.fetch_add(len as u64, Relaxed);
                    let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                }
            });
        }
    });
    OtlpSink {
        endpoint: format!("http://127.0.0.1:{port}"),
        received,
    }
}
