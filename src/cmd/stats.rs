//! `rlun stats [WHAT] [--watch [INTERVAL]] [--json]`: what serving rlun
//! processes are doing, asked over their control sockets
//! ([`crate::control`]): per LUN, requests and bytes per second, latency
//! percentiles, requests in flight, the cache, reconnects, errors.
//!
//! A process sends raw counters and latency buckets; percentiles are
//! computed here with HDR histograms, since start and, with `--watch`,
//! over each interval (the difference of two samples), as `iostat` does.
//! The JSON written with `--json` is documented in `rlun stats --help`
//! (rlun-stats(8)); keep the two together.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::attach::held;
use super::error::CliError;
use super::rescan::select;
use crate::control::{self, ControlError, LunSnapshot, Snapshot};
use crate::daemon;
use crate::export::meter::{bucket_range, OpCounts};
use crate::service::human_size;
use rlun_iscsi::ErrorKind;

/// The version of the JSON `--json` writes.
const JSON_VERSION: u32 = 1;

/// The control sockets `what` names: of the processes `rlun list` shows
/// (all when `None`), or a control socket named directly.
pub(super) fn sockets(what: Option<&str>) -> Result<Vec<PathBuf>, CliError> {
    let chosen = select(held(&daemon::state_dir()), what);
    if !chosen.is_empty() {
        return Ok(chosen
            .iter()
            .map(|h| control::socket_path(&daemon::state_file(Path::new(&h.what))))
            .collect());
    }
    match what {
        Some(w) if w.ends_with(".sock") || is_socket(w) => Ok(vec![PathBuf::from(w)]),
        Some(w) => Err(CliError::Described {
            message: format!("no rlun of this user serves {w} (`rlun list` shows what they serve)"),
            kind: ErrorKind::NotFound,
        }),
        None => Err(CliError::Described {
            message: "no rlun of this user is mounted, serving or attached".into(),
            kind: ErrorKind::NotFound,
        }),
    }
}

fn is_socket(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

pub(super) fn control_error(e: ControlError) -> CliError {
    CliError::Described {
        kind: e.kind(),
        message: e.to_string(),
    }
}

/// Ask every socket; the snapshots, and a message for each that failed.
pub(super) async fn sample(socks: &[PathBuf]) -> (Vec<Snapshot>, Vec<ControlError>) {
    let mut got = Vec::new();
    let mut failed = Vec::new();
    for s in socks {
        let answer = control::query(s, "stats").await.and_then(|v| {
            serde_json::from_value::<Snapshot>(v).map_err(|e| ControlError::Garbled {
                path: s.clone(),
                detail: e.to_string(),
            })
        });
        match answer {
            Ok(snap) => got.push(snap),
            Err(e) => failed.push(e),
        }
    }
    (got, failed)
}

/// Latency percentiles in microseconds, from a meter's buckets.
fn percentiles(buckets: &[(u32, u64)]) -> Value {
    let Ok(mut h) = Histogram::<u64>::new_with_bounds(1, 1 << 42, 3) else {
        return Value::Null;
    };
    for &(i, n) in buckets {
        let (low, width) = bucket_range(i as usize);
        let _ = h.record_n((low + width / 2).max(1), n);
    }
    if h.is_empty() {
        return Value::Null;
    }
    let us = |q: f64| (h.value_at_quantile(q) as f64 / 1000.0 * 1000.0).round() / 1000.0;
    json!({"p50": us(0.5), "p99": us(0.99), "p99_9": us(0.999)})
}

/// `now - before`, bucket by bucket.
fn minus(now: &OpCounts, before: Option<&OpCounts>) -> OpCounts {
    let Some(b) = before else {
        return now.clone();
    };
    let old: HashMap<u32, u64> = b.latency.iter().copied().collect();
    OpCounts {
        count: now.count.saturating_sub(b.count),
        bytes: now.bytes.saturating_sub(b.bytes),
        errors: now.errors.saturating_sub(b.errors),
        in_flight: now.in_flight,
        latency_sum: now.latency_sum.saturating_sub(b.latency_sum),
        latency: now
            .latency
            .iter()
            .filter_map(|&(i, n)| {
                let d = n.saturating_sub(old.get(&i).copied().unwrap_or(0));
                (d > 0).then_some((i, d))
            })
            .collect(),
    }
}

/// The request counters of one LUN over a window.
fn requests(read: &OpCounts, write: &OpCounts, other: &OpCounts) -> Value {
    json!({
        "reads": read.count,
        "read_bytes": read.bytes,
        "read_errors": read.errors,
        "writes": write.count,
        "write_bytes": write.bytes,
        "write_errors": write.errors,
        "other": other.count,
        "other_errors": other.errors,
        "read_latency_us": percentiles(&read.latency),
        "write_latency_us": percentiles(&write.latency),
    })
}

/// One LUN as `--json` writes it; `before`: the same LUN one interval ago.
fn lun_json(l: &LunSnapshot, before: Option<&LunSnapshot>) -> Value {
    let c = &l.cache;
    let looked = c.hits + c.misses;
    let interval = before.map(|b| {
        requests(
            &minus(&l.read, Some(&b.read)),
            &minus(&l.write, Some(&b.write)),
            &minus(&l.other, Some(&b.other)),
        )
    });
    json!({
        "lun": l.lun,
        "size": l.size,
        "in_flight": l.read.in_flight + l.write.in_flight + l.other.in_flight,
        "total": requests(&l.read, &l.write, &l.other),
        "interval": interval,
        "errors": l.errors,
        "cache": {
            "hits": c.hits,
            "misses": c.misses,
            "hit_ratio": if looked == 0 { Value::Null } else { json!(c.hits as f64 / looked as f64) },
            "readahead_pages": c.readahead_pages,
            "readahead_hits": c.readahead_hits,
            "readahead_wasted": c.readahead_wasted,
            "bypassed_reads": c.bypassed_reads,
            "evictions": c.evictions,
            "cached_bytes": c.cached_bytes,
            "cache_size": c.cache_size,
            "dirty_bytes": c.dirty_bytes,
            "dirty_age": c.dirty_age_ms as f64 / 1000.0,
            "writebacks": c.writebacks,
            "flushes": c.flushes,
        },
    })
}

/// Everything `--json` writes for one sample.
fn sample_json(now: &[Snapshot], before: &[Snapshot], failed: &[ControlError]) -> Value {
    let interval = interval_of(now, before);
    let processes: Vec<Value> = now
        .iter()
        .map(|s| {
            let prev = before.iter().find(|b| b.pid == s.pid);
            let luns: Vec<Value> = s
                .luns
                .iter()
                .map(|l| lun_json(l, prev.and_then(|p| p.luns.iter().find(|x| x.lun == l.lun))))
                .collect();
            json!({
                "pid": s.pid,
                "kind": s.kind,
                "what": display_what(&s.what),
                "target": s.target,
                "portal": s.portal,
                "uptime": s.uptime,
                "reconnects": s.reconnects,
                "session_up": s.session_up,
                "down_seconds": s.down_seconds,
                "last_outage_seconds": s.last_outage_seconds,
                "copied_bytes": s.data_path.copied_bytes,
                "cache_copied_bytes": s.data_path.cache_copied_bytes,
                "data_path_registrations": s.data_path.data_path_registrations,
                "luns": luns,
            })
        })
        .collect();
    let errors: Vec<String> = failed.iter().map(|e| e.to_string()).collect();
    json!({
        "version": JSON_VERSION,
        "interval": interval,
        "processes": processes,
        "errors": errors,
    })
}

/// The seconds between two samples (of the first process both have).
fn interval_of(now: &[Snapshot], before: &[Snapshot]) -> Option<f64> {
    now.iter().find_map(|s| {
        before
            .iter()
            .find(|b| b.pid == s.pid)
            .map(|b| s.uptime - b.uptime)
    })
}

fn display_what(what: &str) -> String {
    match what.strip_prefix("nbd-") {
        Some(addr) => format!("nbd://{addr}"),
        None => what.to_string(),
    }
}

/// The table: one line per LUN, rates over the interval (or since start).
fn table(now: &[Snapshot], before: &[Snapshot]) -> String {
    let mut out = format!(
        "{:<24} {:>4} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>5} {:>6} {:>10} {:>6} {:>6} {:>5}\n",
        "WHAT", "LUN", "r/s", "rMiB/s", "r_p50ms", "r_p99ms", "r_p999ms", "w/s", "wMiB/s",
        "w_p50ms", "w_p99ms", "w_p999ms", "inflt", "hit%", "dirty", "age_s", "reconn", "err"
    );
    for s in now {
        let prev = before.iter().find(|b| b.pid == s.pid);
        let secs = prev.map_or(s.uptime, |b| s.uptime - b.uptime).max(1e-9);
        for l in &s.luns {
            let b = prev.and_then(|p| p.luns.iter().find(|x| x.lun == l.lun));
            let r = minus(&l.read, b.map(|b| &b.read));
            let w = minus(&l.write, b.map(|b| &b.write));
            let o = minus(&l.other, b.map(|b| &b.other));
            let lat = |c: &OpCounts, k: &str| match &percentiles(&c.latency)[k] {
                Value::Number(n) => format!("{:.3}", n.as_f64().unwrap_or(0.0) / 1000.0),
                _ => "-".into(),
            };
            let (hits, misses) = match b {
                Some(b) => (
                    l.cache.hits.saturating_sub(b.cache.hits),
                    l.cache.misses.saturating_sub(b.cache.misses),
                ),
                None => (l.cache.hits, l.cache.misses),
            };
            let hit = if hits + misses == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", 100.0 * hits as f64 / (hits + misses) as f64)
            };
            let mib = |bytes: u64| bytes as f64 / secs / (1 << 20) as f64;
            out += &format!(
                "{:<24} {:>4} {:>9.1} {:>8.2} {:>8} {:>8} {:>8} {:>9.1} {:>8.2} {:>8} {:>8} {:>8} {:>5} {:>6} {:>10} {:>6} {:>6} {:>5}\n",
                display_what(&s.what),
                l.lun,
                r.count as f64 / secs,
                mib(r.bytes),
                lat(&r, "p50"),
                lat(&r, "p99"),
                lat(&r, "p99_9"),
                w.count as f64 / secs,
                mib(w.bytes),
                lat(&w, "p50"),
                lat(&w, "p99"),
                lat(&w, "p99_9"),
                l.read.in_flight + l.write.in_flight + l.other.in_flight,
                hit,
                human_size(l.cache.dirty_bytes),
                if l.cache.dirty_bytes == 0 {
                    "-".to_string()
                } else {
                    format!("{:.1}", l.cache.dirty_age_ms as f64 / 1000.0)
                },
                s.reconnects,
                r.errors + w.errors + o.errors,
            );
        }
    }
    out
}

/// Write one sample: JSON (one line) or the table.
fn print(
    as_json: bool,
    now: &[Snapshot],
    before: &[Snapshot],
    failed: &[ControlError],
    redraw: Option<Duration>,
) -> Result<(), CliError> {
    if as_json {
        out!("{}", sample_json(now, before, failed));
        return Ok(());
    }
    let mut text = String::new();
    if let Some(every) = redraw {
        text += "\x1b[H\x1b[2J";
        text += &format!("rlun stats, every {every:?}; q or Ctrl-C to quit\n\n");
    }
    text += &table(now, before);
    for e in failed {
        text += &format!("rlun: {}\n", rlun_iscsi::error_chain(e));
    }
    out!("{text}");
    Ok(())
}

/// `rlun stats`.
pub async fn stats(
    what: Option<&str>,
    watch: Option<Duration>,
    as_json: bool,
) -> Result<(), CliError> {
    let socks = sockets(what)?;
    let (now, mut failed) = sample(&socks).await;
    if now.is_empty() {
        return Err(control_error(failed.remove(0)));
    }
    let Some(every) = watch else {
        print(as_json, &now, &[], &failed, None)?;
        for e in &failed {
            eprintln!("rlun: {}", rlun_iscsi::error_chain(e));
        }
        return Ok(());
    };
    if every.is_zero() {
        return Err(CliError::Usage("--watch needs an interval above 0".into()));
    }
    let redraw = (!as_json && std::io::stdout().is_terminal()).then_some(every);
    // Caught before the terminal is changed, so Ctrl-C restores it.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| CliError::Other(format!("cannot catch Ctrl-C: {e}")))?;
    let keys = Keys::start();
    let mut before = now;
    let mut quit = keys.quit.clone();
    if redraw.is_none() {
        print(as_json, &before, &[], &failed, None)?;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = interrupt.recv() => break,
            _ = quit.changed() => break,
        }
        let (now, failed) = sample(&socks).await;
        if now.is_empty() {
            drop(keys);
            return Err(failed.into_iter().next().map_or_else(
                || CliError::Other("every rlun watched has gone".into()),
                control_error,
            ));
        }
        print(as_json, &now, &before, &failed, redraw)?;
        before = now;
    }
    Ok(())
}

/// Reads single keys from a terminal on standard input (no Enter needed:
/// `stty -icanon -echo`, restored on drop) and says when `q` came.
struct Keys {
    quit: tokio::sync::watch::Receiver<bool>,
    saved: Option<String>,
}

impl Keys {
    fn start() -> Keys {
        let (tx, quit) = tokio::sync::watch::channel(false);
        if !std::io::stdin().is_terminal() {
            return Keys { quit, saved: None };
        }
        let saved = stty(&["-g"]).filter(|_| stty(&["-icanon", "-echo"]).is_some());
        std::thread::spawn(move || {
            use std::io::Read;
            let mut b = [0u8; 1];
            while let Ok(1) = std::io::stdin().lock().read(&mut b) {
                if b[0] == b'q' || b[0] == b'Q' {
                    let _ = tx.send(true);
                    return;
                }
            }
        });
        Keys { quit, saved }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        if let Some(s) = &self.saved {
            let _ = stty(&[s.trim()]);
        }
    }
}

/// Run `stty` on the terminal on standard input; its output.
fn stty(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("stty")
        .args(args)
        .stdin(std::process::Stdio::inherit())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
