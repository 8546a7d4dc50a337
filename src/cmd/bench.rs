//! `rlun bench`: IOPS, throughput, latency percentiles and CPU time of one
//! access pattern on one LUN. `benches/compare.sh` runs it beside libiscsi's
//! `iscsi-perf` on the same LUN and prints the ratios.
//!
//! Latency: an I/O counts from the end of the one before it in the same
//! worker to the driver turn that handled its response (see
//! [`crate::clock`]): no clock read of its own per I/O, which under
//! software emulation is a system call.

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tracing::info;

use super::context::device_config;
use super::context::Ctx;
use super::error::CliError;
use crate::cli::{CacheOpts, ConnectOpts, OnOff, Pattern};
use crate::client::{Lun, Target};
use crate::clock;
use crate::config::settings::Effective;
use crate::device::LunDevice;
use crate::stats::DataPathStats;
use rlun_iscsi::iobuf::IoBuf;

pub struct Options {
    pub pattern: Pattern,
    pub bs: u64,
    pub qd: u32,
    pub duration: Duration,
    pub size: Option<u64>,
    pub json: bool,
    pub allow_write: bool,
    pub cache: CacheOpts,
}

/// Where the benchmark's I/O goes: straight to the LUN, or through the page
/// cache (`--cache`).
#[derive(Clone)]
enum Io {
    Lun(Box<Lun>),
    Device(Arc<LunDevice<Lun>>),
}

#[derive(Debug, thiserror::Error)]
enum IoError {
    #[error(transparent)]
    Lun(#[from] crate::client::ClientError),
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
}

impl From<IoError> for CliError {
    fn from(e: IoError) -> CliError {
        match e {
            IoError::Lun(e) => e.into(),
            IoError::Device(e) => CliError::Other(rlun_iscsi::error_chain(&e)),
        }
    }
}

/// Peak resident set size of this process in bytes (VmHWM in
/// /proc/self/status), `None` where that file is unavailable.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// CPU time (user + system) this process has used so far, from
/// /proc/self/stat (fields 14 and 15, in USER_HZ = 100 ticks per second on
/// Linux's stable ABI).
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces; fields after ')' are fixed.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// A tiny xorshift generator: the benchmark needs cheap, not strong, randomness.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Every I/O's latency in microseconds, to three significant digits: a
/// record is a few dozen instructions and no allocation, where keeping
/// every sample and sorting them at the end cost about 300 per I/O (a
/// measurable share of what `benches/instructions.sh` counts).
struct Latencies(Histogram<u64>);

impl Latencies {
    fn new() -> Latencies {
        // 1 µs to about 71 minutes; slower I/Os are clamped to the top.
        Latencies(Histogram::new_with_bounds(1, 1 << 32, 3).expect("valid histogram bounds"))
    }

    fn record(&mut self, d: Duration) {
        self.0
            .saturating_record(d.as_micros().min(u64::MAX as u128) as u64);
    }

    fn merge(&mut self, other: &Latencies) {
        // Both have the same bounds: adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    fn count(&self) -> u64 {
        self.0.len()
    }

    /// The latency at quantile `q` (0.5 for the median); 0 with no I/O.
    fn percentile(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(q) as f64
    }
}

pub async fn run(ctx: &Ctx, arg: &str, o: Options, conn: &ConnectOpts) -> Result<(), CliError> {
    if o.pattern.is_write() && !o.allow_write {
        return Err(CliError::Usage(format!(
            "--pattern {} overwrites the LUN's data; add --allow-write to confirm",
            o.pattern.name()
        )));
    }
    if o.qd == 0 {
        return Err(CliError::Usage("--qd must be at least 1".into()));
    }
    if o.duration.is_zero() {
        // Nothing would run: 0 IOPS and NaN CPU seconds per GiB.
        return Err(CliError::Usage("--duration must be greater than 0".into()));
    }
    if o.bs == 0 {
        return Err(CliError::Usage("--bs must be greater than 0".into()));
    }
    // The cache mode comes from --cache alone (bench measures the LUN
    // unless told otherwise); the cache's other settings as for mount.
    let settings = ctx.settings_for_arg(arg, &o.cache.settings());
    let (target, lun) = ctx.open_lun(arg, conn).await?;
    let Measured {
        all,
        elapsed,
        cpu,
        flush_seconds,
        data_path,
        cache_json,
    } = target
        .scope(async |_: &Target| measure(lun, &o, &settings).await)
        .await?;
    let ios = all.count();
    let bytes = ios * o.bs;
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let v = json!({
        "pattern": o.pattern.name(),
        "bs": o.bs,
        "qd": o.qd,
        "seconds": elapsed,
        "ios": ios,
        "bytes": bytes,
        "iops": ios as f64 / elapsed,
        // MB/s (10^6) as fio and the compare scripts report it; MiB/s as
        // rlun's text and sizes use binary units.
        "mb_per_s": bytes as f64 / elapsed / 1e6,
        "mib_per_s": bytes as f64 / elapsed / (1u64 << 20) as f64,
        "p50_us": all.percentile(0.50),
        "p99_us": all.percentile(0.99),
        "cpu_seconds": cpu,
        "cpu_s_per_gib": if gib > 0.0 { cpu / gib } else { f64::NAN },
        "flush_seconds": flush_seconds,
        "peak_rss_bytes": peak_rss_bytes(),
        "copied_bytes": data_path.copied_bytes,
        "cache_copied_bytes": data_path.cache_copied_bytes,
        "data_path_registrations": data_path.data_path_registrations,
        "pool_registrations": data_path.pool_registrations,
        "cache": cache_json,
    });
    if o.json {
        out!("{v}");
    } else {
        out!(
            "{} bs={} qd={}: {:.0} IOPS, {:.1} MiB/s, p50 {:.0} us, p99 {:.0} us, CPU {:.2} s ({:.2} s/GiB) over {:.1} s, {} bytes copied",
            o.pattern.name(),
            o.bs,
            o.qd,
            v["iops"].as_f64().unwrap_or(0.0),
            v["mib_per_s"].as_f64().unwrap_or(0.0),
            v["p50_us"].as_f64().unwrap_or(0.0),
            v["p99_us"].as_f64().unwrap_or(0.0),
            cpu,
            v["cpu_s_per_gib"].as_f64().unwrap_or(f64::NAN),
            elapsed,
            data_path.copied_bytes
        );
    }
    Ok(())
}

/// What one benchmark run measured.
struct Measured {
    /// Every I/O's latency.
    all: Latencies,
    elapsed: f64,
    cpu: f64,
    flush_seconds: f64,
    data_path: DataPathStats,
    cache_json: serde_json::Value,
}

/// Check the options against `lun`, run the workload and measure it.
async fn measure(lun: Lun, o: &Options, settings: &Effective) -> Result<Measured, CliError> {
    let bs_block = lun.block_size() as u64;
    if o.bs == 0 || !o.bs.is_multiple_of(bs_block) {
        return Err(CliError::Usage(format!(
            "--bs {} is not a multiple of the LUN's {}-byte blocks",
            o.bs, bs_block
        )));
    }
    if o.bs > lun.max_transfer_bytes() {
        return Err(CliError::Usage(format!(
            "--bs {} exceeds the LUN's maximum transfer of {} bytes",
            o.bs,
            lun.max_transfer_bytes()
        )));
    }
    let region = o.size.unwrap_or(lun.capacity_bytes());
    if region > lun.capacity_bytes() {
        return Err(CliError::Usage(format!(
            "--size {} is larger than the LUN ({} bytes)",
            region,
            lun.capacity_bytes()
        )));
    }
    let slots = region / o.bs;
    if slots == 0 {
        return Err(CliError::Usage(
            "the region is smaller than one block of --bs".into(),
        ));
    }
    let blocks_per_io = (o.bs / bs_block) as u32;
    let io = match o.cache.cache {
        None => Io::Lun(Box::new(lun.clone())),
        Some(mode) => {
            let cfg = device_config(settings, mode.mode());
            let dev = LunDevice::new(lun.clone(), cfg)
                .map_err(|e| CliError::Usage(rlun_iscsi::error_chain(&e)))?;
            Io::Device(Arc::new(dev))
        }
    };
    // From the registered pool when the transport is iSER (`rlun_iscsi::iobuf`).
    let payload = IoBuf::copy_from_slice(&vec![0xa5u8; o.bs as usize]).into_bytes();
    let data0 = DataPathStats::now();
    let logger = match (&io, settings.stats_interval) {
        // With --cache the device logs its counters (copied_bytes included).
        (Io::Lun(_), Some(every)) => Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let d = DataPathStats::now().since(&data0);
                info!(
                    copied_bytes = d.copied_bytes,
                    data_path_registrations = d.data_path_registrations,
                    pool_registrations = d.pool_registrations,
                    "data path"
                );
            }
        })),
        _ => None,
    };
    let next_seq = Arc::new(AtomicU64::new(0));
    let cpu0 = process_cpu_seconds();
    let start = Instant::now();
    let deadline = start + o.duration;
    let mut workers = Vec::new();
    if let Io::Lun(lun) = &io {
        // Straight to the LUN: one task keeps all `qd` I/Os in flight
        // through a queue and is woken once per driver turn with every
        // I/O that finished in it (see `LunQueue`), instead of a task per
        // I/O slot woken per completion.
        let mut q = lun.queue();
        let payload = payload.clone();
        let pattern = o.pattern;
        let qd = o.qd as usize;
        let next_seq = next_seq.clone();
        workers.push(tokio::spawn(async move {
            let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ 0xbf58_476d_1ce4_e5b9);
            let mut next_lba = move || {
                let slot = if pattern.is_random() {
                    rng.next() % slots
                } else {
                    next_seq.fetch_add(1, Ordering::Relaxed) % slots
                };
                slot * blocks_per_io as u64
            };
            let mut submit = |q: &mut crate::client::LunQueue, tag: u64| {
                let lba = next_lba();
                if pattern.is_write() {
                    q.write(lba, payload.clone(), tag)
                } else {
                    q.read(lba, blocks_per_io, tag)
                }
            };
            let mut lat = Latencies::new();
            // When each slot's current I/O started: the end of the one
            // before it (see the per-worker loop below for the clock).
            let now = clock::now();
            let mut started = vec![now; qd];
            if now < deadline {
                for tag in 0..qd as u64 {
                    submit(&mut q, tag)?;
                }
            }
            let mut done = Vec::with_capacity(qd);
            while q.in_flight() > 0 {
                q.completions(&mut done).await;
                let turn = clock::recent();
                for (tag, r) in done.drain(..) {
                    r?;
                    let t = started[tag as usize];
                    let end = if turn > t { turn } else { clock::now() };
                    lat.record(end - t);
                    if end < deadline {
                        started[tag as usize] = end;
                        submit(&mut q, tag)?;
                    }
                }
            }
            Ok::<_, IoError>(lat)
        }));
    }
    for w in 0..o.qd {
        if matches!(io, Io::Lun(_)) {
            break;
        }
        let io = io.clone();
        let next_seq = next_seq.clone();
        let payload = payload.clone();
        let pattern = o.pattern;
        workers.push(tokio::spawn(async move {
            let mut rng = XorShift(
                0x9e37_79b9_7f4a_7c15 ^ (w as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            );
            let mut lat = Latencies::new();
            // An I/O's end is the next one's start. The end is the time
            // of the driver turn that completed it (`clock::recent`, no
            // system call; the turn read the clock when the response
            // arrived); only when no turn read the clock since the start —
            // a cache hit, no network round trip — does this read it.
            let mut now = clock::now();
            while now < deadline {
                let slot = if pattern.is_random() {
                    rng.next() % slots
                } else {
                    next_seq.fetch_add(1, Ordering::Relaxed) % slots
                };
                let lba = slot * blocks_per_io as u64;
                let t = now;
                match (&io, pattern.is_write()) {
                    (Io::Lun(lun), true) => lun.write(lba, payload.clone(), false).await?,
                    (Io::Lun(lun), false) => {
                        lun.read(lba, blocks_per_io).await?;
                    }
                    (Io::Device(d), true) => d.write_at(lba * bs_block, payload.clone()).await?,
                    (Io::Device(d), false) => {
                        d.read_at(lba * bs_block, payload.len()).await?;
                    }
                }
                let turn = clock::recent();
                now = if turn > t { turn } else { clock::now() };
                lat.record(now - t);
            }
            Ok::<_, IoError>(lat)
        }));
    }
    let mut all = Latencies::new();
    let mut first_err = None;
    for w in workers {
        match w.await {
            Ok(Ok(l)) => all.merge(&l),
            Ok(Err(e)) => {
                first_err.get_or_insert(CliError::from(e));
            }
            Err(e) => {
                first_err.get_or_insert(CliError::Other(format!("benchmark task failed: {e}")));
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let data_path = DataPathStats::now().since(&data0);
    if let Some(l) = logger {
        l.abort();
    }
    let cpu = match (cpu0, process_cpu_seconds()) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    };
    // Written data still in the cache is flushed after the timed run; how
    // long that took is reported separately.
    let (cache_json, flush_seconds) = match &io {
        Io::Lun(_) => (serde_json::Value::Null, 0.0),
        Io::Device(d) => {
            let t = Instant::now();
            if o.pattern.is_write() && first_err.is_none() {
                if let Err(e) = d.flush().await {
                    first_err = Some(IoError::from(e).into());
                }
            }
            let flush = t.elapsed().as_secs_f64();
            let mut v = serde_json::to_value(d.stats()).unwrap_or_default();
            if let Some(m) = v.as_object_mut() {
                m.insert("mode".into(), json!(d.mode().name()));
                m.insert("page_size".into(), json!(d.page_size()));
                m.insert("readahead".into(), json!(settings.readahead == OnOff::On));
            }
            (v, flush)
        }
    };
    drop(io);
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(Measured {
        all,
        elapsed,
        cpu,
        flush_seconds,
        data_path,
        cache_json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_sample() {
        let mut a = Latencies::new();
        let mut b = Latencies::new();
        assert_eq!(a.percentile(0.5), 0.0);
        for us in 1..=50 {
            a.record(Duration::from_micros(us));
        }
        for us in 51..=100 {
            b.record(Duration::from_micros(us));
        }
        a.merge(&b);
        assert_eq!(a.count(), 100);
        assert_eq!(a.percentile(0.5), 50.0);
        assert_eq!(a.percentile(0.99), 99.0);
        // Three significant digits, and an I/O slower than the top is
        // counted at the top rather than lost.
        a.record(Duration::from_micros(123_456));
        a.record(Duration::from_secs(1 << 40));
        assert_eq!(a.count(), 102);
        assert!((a.percentile(1.0) - (1u64 << 32) as f64).abs() / ((1u64 << 32) as f64) < 1e-3);
    }

    #[test]
    fn peak_rss_is_readable_and_plausible() {
        let rss = peak_rss_bytes().expect("/proc/self/status readable");
        assert!(rss > 1 << 20 && rss < 1 << 40, "{rss}");
    }

    #[test]
    fn cpu_time_is_readable_and_grows() {
        let a = process_cpu_seconds().expect("/proc/self/stat readable");
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(200) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let b = process_cpu_seconds().unwrap();
        assert!(b > a, "CPU time grew from {a} to {b} (spun {x} times)");
    }
}
