//! `--metrics-listen ADDR:PORT`: the counters of a serving rlun (the same
//! [`Snapshot`] the control socket gives `rlun stats`) as a Prometheus
//! scrape target, `GET /metrics`, in the OpenMetrics text format written
//! by the `prometheus-client` crate.
//!
//! Names follow Prometheus' conventions: counters end in `_total`, units
//! are base units (`_bytes`, `_seconds`); every series carries `target`
//! (the IQN) and, per LUN, `lun`. `rlun_command_duration_seconds` is a
//! histogram of the export layer's request latencies (the buckets of
//! [`crate::export::meter`] folded into [`BOUNDS`], each at its middle).
//! Every scrape reads the counters afresh; nothing is kept between
//! scrapes, and nothing of the request path changes.
//!
//! The listener is loopback-only unless `--metrics-allow-remote`: the
//! metrics name targets, LUNs and load, and the endpoint has no
//! authentication. The HTTP server is the least that Prometheus needs:
//! one `GET` per connection, answered and closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info};

use crate::control::{Snapshot, Source};
use crate::export::meter::{bucket_range, ErrorClass, OpCounts};
use rlun_iscsi::ErrorKind;

/// Upper bounds (seconds) of the buckets of `rlun_command_duration_seconds`.
pub const BOUNDS: [f64; 16] = [
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3,
    1.0, 5.0, 30.0,
];

/// Longest request head read, and how long a client may take to send it.
const MAX_HEAD: usize = 8192;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The content types served: OpenMetrics to clients that accept it
/// (Prometheus does), the Prometheus text format to others.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Where to listen, from `--metrics-listen` and `--metrics-allow-remote`.
#[derive(Debug, Clone, Copy)]
pub struct Listen {
    pub addr: SocketAddr,
    pub allow_remote: bool,
}

/// Why the metrics endpoint could not be set up.
#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("--metrics-listen {addr} is not a loopback address: the metrics endpoint has no authentication; add --metrics-allow-remote if the network is trusted")]
    NotLoopback { addr: SocketAddr },
    #[error("cannot listen for metrics on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl MetricsError {
    /// How this failure is classified ([`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            MetricsError::NotLoopback { .. } => ErrorKind::Usage,
            MetricsError::Bind { .. } => ErrorKind::LocalFile,
        }
    }
}

/// Check `listen` and bind it (before the login, so a bad address fails
/// the command at once).
pub async fn bind(listen: Listen) -> Result<TcpListener, MetricsError> {
    let addr = listen.addr;
    if !addr.ip().is_loopback() && !listen.allow_remote {
        return Err(MetricsError::NotLoopback { addr });
    }
    TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })
}

/// The metrics endpoint while it serves; stops when dropped.
pub struct MetricsServer(tokio::task::JoinHandle<()>);

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serve `GET /metrics` on `listener` from `source`.
pub fn serve(listener: TcpListener, source: Arc<Source>) -> MetricsServer {
    if let Ok(a) = listener.local_addr() {
        info!("metrics at http://{a}/metrics");
    }
    MetricsServer(tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, source.clone()));
                }
                Err(e) => {
                    debug!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }))
}

/// Read one request head and answer it.
async fn answer(mut stream: TcpStream, source: Arc<Source>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() <= MAX_HEAD {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    });
    if !matches!(read.await, Ok(true)) {
        return;
    }
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next().unwrap_or_default();
    let openmetrics = text.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("accept:") && l.contains("application/openmetrics-text")
    });
    let mut words = line.split_whitespace();
    let (status, kind, body) = match (words.next(), words.next()) {
        _ if head.len() > MAX_HEAD => (
            "431 Request Header Fields Too Large",
            "text/plain",
            String::new(),
        ),
        (Some("GET"), Some(path)) if path == "/metrics" || path.starts_with("/metrics?") => {
            let body = render(&source.snapshot());
            if openmetrics {
                ("200 OK", OPENMETRICS, body)
            } else {
                ("200 OK", TEXT_FORMAT, to_text_format(&body))
            }
        }
        (Some("GET"), Some(_)) => (
            "404 Not Found",
            "text/plain",
            "rlun serves its metrics at /metrics\n".to_string(),
        ),
        _ => ("405 Method Not Allowed", "text/plain", String::new()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Err(e) = stream.write_all(reply.as_bytes()).await {
        debug!(error = %e, "metrics client left before the answer");
    }
    let _ = stream.shutdown().await;
}

/// The exposition of one snapshot.
pub fn render(snapshot: &Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(snapshot.clone())));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        debug!(error = %e, "cannot encode the metrics");
    }
    out
}

/// OpenMetrics text as the Prometheus text format (0.0.4): a counter's
/// family is named with its `_total`, as its samples are, and there is no
/// `# EOF`.
pub fn to_text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for l in openmetrics.lines() {
        if l == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE ", "# UNIT "]
            .into_iter()
            .find(|p| l.starts_with(p));
        match meta {
            Some(p) => {
                let rest = &l[p.len()..];
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out += &format!("{p}{name}_total {tail}\n");
                } else {
                    out += l;
                    out.push('\n');
                }
            }
            None => {
                out += l;
                out.push('\n');
            }
        }
    }
    out
}

/// One scrape's snapshot as a collector.
#[derive(Debug)]
struct Scrape(Snapshot);

type Labels = Vec<(&'static str, String)>;
/// What a gauge reads of a LUN.
type LunValue<'a> = &'a dyn Fn(&crate::control::LunSnapshot) -> i64;

impl Scrape {
    fn process_labels(&self) -> Labels {
        vec![("target", self.0.target.clone())]
    }

    fn lun_labels(&self, lun: u64) -> Labels {
        vec![("target", self.0.target.clone()), ("lun", lun.to_string())]
    }

    /// A counter per LUN.
    fn per_lun(
        &self,
        e: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: impl Fn(&crate::control::LunSnapshot) -> u64,
    ) -> Result<(), std::fmt::Error> {
        let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
        for l in &self.0.luns {
            let labels = self.lun_labels(l.lun);
            ConstCounter::new(value(l)).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// A gauge per LUN and value of a label.
    fn gauge_by(
        &self,
        e: &mut DescriptorEncoder,
        (name, help, label): (&str, &str, &'static str),
        values: &[(&str, LunValue)],
    ) -> Result<(), std::fmt::Error> {
        let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for l in &self.0.luns {
            for (v, f) in values {
                let mut labels = self.lun_labels(l.lun);
                if !label.is_empty() {
                    labels.push((label, v.to_string()));
                }
                ConstGauge::new(f(l)).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The histogram of a meter: sum (s), count, and the count in each
/// bucket of [`BOUNDS`] then +Inf (each bucket alone: the encoder adds
/// them up).
fn histogram(c: &OpCounts) -> (f64, u64, Vec<(f64, u64)>) {
    let mut buckets: Vec<(f64, u64)> = BOUNDS
        .iter()
        .chain([&f64::INFINITY])
        .map(|&ub| (ub, 0))
        .collect();
    let mut total = 0;
    for &(i, n) in &c.latency {
        let (low, width) = bucket_range(i as usize);
        let mid = (low + width / 2) as f64 / 1e9;
        let b = BOUNDS
            .iter()
            .position(|&ub| mid <= ub)
            .unwrap_or(BOUNDS.len());
        buckets[b].1 += n;
        total += n;
    }
    (c.latency_sum as f64 / 1e9, total, buckets)
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let process = self.process_labels();
        let mut m = e.encode_descriptor(
            "rlun_session_up",
            "1 when the iSCSI session has a logged-in connection",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(s.session_up)).encode(m.encode_family(&process)?)?;
        let mut m = e.encode_descriptor(
            "rlun_reconnects",
            "times the iSCSI session was re-established",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(s.reconnects).encode(m.encode_family(&process)?)?;
        let mut m = e.encode_descriptor(
            "rlun_session_down_seconds",
            "time the iSCSI session spent without a connection (reconnecting)",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(s.down_seconds).encode(m.encode_family(&process)?)?;
        let mut m = e.encode_descriptor(
            "rlun_copied_bytes",
            "SCSI data bytes copied between the network and command buffers",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(s.data_path.copied_bytes).encode(m.encode_family(&process)?)?;
        let mut m = e.encode_descriptor(
            "rlun_cache_copied_bytes",
            "bytes the page cache copied into or out of its pages",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(s.data_path.cache_copied_bytes).encode(m.encode_family(&process)?)?;
        let mut m = e.encode_descriptor(
            "rlun_data_path_registrations",
            "iSER memory registrations made while sending a command",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(s.data_path.data_path_registrations)
            .encode(m.encode_family(&process)?)?;

        self.per_lun(&mut e, "rlun_reads", "read requests completed", |l| {
            l.read.count
        })?;
        self.per_lun(&mut e, "rlun_writes", "write requests completed", |l| {
            l.write.count
        })?;
        self.per_lun(&mut e, "rlun_read_bytes", "bytes read", |l| l.read.bytes)?;
        self.per_lun(&mut e, "rlun_write_bytes", "bytes written", |l| {
            l.write.bytes
        })?;
        let mut m = e.encode_descriptor(
            "rlun_request_errors",
            "requests that failed, by kind",
            None,
            MetricType::Counter,
        )?;
        for l in &s.luns {
            for class in ErrorClass::ALL {
                let mut labels = self.lun_labels(l.lun);
                labels.push(("kind", class.name().to_string()));
                let n = l.errors.get(class.name()).copied().unwrap_or(0);
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        self.per_lun(
            &mut e,
            "rlun_cache_hits",
            "page lookups served from the cache",
            |l| l.cache.hits,
        )?;
        self.per_lun(
            &mut e,
            "rlun_cache_misses",
            "page lookups that waited for the target",
            |l| l.cache.misses,
        )?;
        self.per_lun(&mut e, "rlun_cache_evictions", "clean pages dropped", |l| {
            l.cache.evictions
        })?;
        self.per_lun(&mut e, "rlun_readahead_pages", "pages read ahead", |l| {
            l.cache.readahead_pages
        })?;
        self.per_lun(
            &mut e,
            "rlun_readahead_hits",
            "pages read ahead and then read",
            |l| l.cache.readahead_hits,
        )?;
        self.per_lun(
            &mut e,
            "rlun_readahead_wasted_pages",
            "pages read ahead and evicted unread",
            |l| l.cache.readahead_wasted,
        )?;
        let mut m = e.encode_descriptor(
            "rlun_cache_dirty_age_seconds",
            "how long the oldest data not yet written back has waited (0 when none)",
            None,
            MetricType::Gauge,
        )?;
        for l in &s.luns {
            let labels = self.lun_labels(l.lun);
            ConstGauge::new(l.cache.dirty_age_ms as f64 / 1000.0)
                .encode(m.encode_family(&labels)?)?;
        }
        self.gauge_by(
            &mut e,
            (
                "rlun_cache_bytes",
                "memory of cached pages, and of those dirty",
                "state",
            ),
            &[
                ("cached", &|l| as_i64(l.cache.cached_bytes)),
                ("dirty", &|l| as_i64(l.cache.dirty_bytes)),
            ],
        )?;
        self.gauge_by(
            &mut e,
            ("rlun_requests_in_flight", "requests being served", ""),
            &[("", &|l| {
                as_i64(l.read.in_flight + l.write.in_flight + l.other.in_flight)
            })],
        )?;
        self.gauge_by(
            &mut e,
            ("rlun_lun_size_bytes", "size of the LUN", ""),
            &[("", &|l| as_i64(l.size))],
        )?;

        let mut m = e.encode_descriptor(
            "rlun_command_duration_seconds",
            "time from a request reaching the export layer to its answer",
            None,
            MetricType::Histogram,
        )?;
        for l in &s.luns {
            for (op, c) in [("read", &l.read), ("write", &l.write), ("other", &l.other)] {
                let mut labels = self.lun_labels(l.lun);
                labels.push(("op", op.to_string()));
                let (sum, count, buckets) = histogram(c);
                m.encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::meter::bucket_of;

    #[test]
    fn histogram_buckets_hold_each_request_once() {
        let c = OpCounts {
            count: 3,
            latency_sum: 2_000_000 + 80_000 + 20_000,
            latency: vec![
                (bucket_of(20_000) as u32, 1),
                (bucket_of(80_000) as u32, 1),
                (bucket_of(2_000_000) as u32, 1),
            ],
            ..OpCounts::default()
        };

        let (sum, count, buckets) = histogram(&c);

        assert_eq!(count, 3);
        assert!((sum - 0.0021).abs() < 1e-9, "{sum}");
        let at = |ub: f64| buckets.iter().find(|(b, _)| *b == ub).unwrap().1;
        assert_eq!(at(25e-6), 1);
        assert_eq!(at(100e-6), 1);
        assert_eq!(at(2.5e-3), 1);
        assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), 3);
        assert_eq!(buckets.last(), Some(&(f64::INFINITY, 0)));
    }
}
