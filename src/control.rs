//! The control socket of a serving rlun (`mount`, `serve`, `attach`): a
//! Unix socket beside the pid file ([`socket_path`]: `<name>.sock` in
//! [`daemon::state_dir`], mode 0600), where `rlun stats` asks what the
//! process is doing.
//!
//! # Protocol (version 1)
//!
//! One request per connection: a line of JSON, `{"version":1,"request":
//! "stats"}`; one answer: a line of JSON, `{"version":1,"ok":true,…}` with
//! the request's fields, or `{"version":1,"ok":false,"error":"…"}` (a
//! garbled request, another version, an unknown request); then the server
//! closes the connection. A request is at most [`MAX_REQUEST`] bytes and
//! must arrive within [`REQUEST_TIMEOUT`]. Only the user running rlun and
//! root are answered (the peer's credentials are checked, besides the
//! socket's mode). Nothing a client sends can disturb the I/O the process
//! serves: each connection is a task of its own that only reads counters.
//!
//! `stats` answers with [`Snapshot`]: the process (pid, uptime, what it
//! serves, reconnects, copied bytes) and each export's request counters
//! and latency buckets ([`crate::export::meter`]) and cache counters.
//!
//! A layer between the serving lifecycle ([`crate::service`], which opens
//! the socket) and the process machinery ([`crate::daemon`]); `rlun stats`
//! ([`crate::cmd`]) is the client ([`query`]).

use std::collections::BTreeMap;
use std::io::ErrorKind as IoKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use crate::client::Lun;
use crate::daemon;
use crate::device::Stats as CacheStats;
use crate::export::meter::OpCounts;
use crate::export::ExportSet;
use crate::session::SessionHandle;
use crate::stats::DataPathStats;
use rlun_iscsi::ErrorKind;

/// The protocol version this rlun speaks.
pub const VERSION: u32 = 1;
/// Longest request line accepted.
pub const MAX_REQUEST: usize = 4096;
/// How long a client may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The control socket of the process whose pid file is `pid_file`.
pub fn socket_path(pid_file: &Path) -> PathBuf {
    pid_file.with_extension("sock")
}

/// A request line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    pub request: String,
}

/// What one export counted, as `stats` sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LunSnapshot {
    pub lun: u64,
    pub size: u64,
    pub read: OpCounts,
    pub write: OpCounts,
    /// Flushes, zeroing, trims.
    pub other: OpCounts,
    /// Failed requests by kind ([`crate::export::meter::ErrorClass::name`]),
    /// the kinds that happened only.
    #[serde(default)]
    pub errors: BTreeMap<String, u64>,
    pub cache: CacheStats,
    /// Its paths, when it is reached through several portals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multipath: Option<crate::multipath::PathsReport>,
}

/// The answer to `stats`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    /// "mounted", "served", "attached".
    pub kind: String,
    /// The mount point, socket, `nbd-ADDR` or device.
    pub what: String,
    pub target: String,
    pub portal: String,
    /// Seconds since the process started serving.
    pub uptime: f64,
    /// Times the session was re-established.
    pub reconnects: u64,
    /// The session has a logged-in connection now.
    #[serde(default)]
    pub session_up: bool,
    /// Seconds the session spent without a connection (reconnecting), the
    /// current outage included.
    #[serde(default)]
    pub down_seconds: f64,
    /// How long the last outage that ended lasted, seconds.
    #[serde(default)]
    pub last_outage_seconds: Option<f64>,
    /// The process's data-path copies ([`crate::stats`]).
    pub data_path: DataPathStats,
    pub luns: Vec<LunSnapshot>,
}

/// What a serving process tells about itself.
pub struct Source {
    pub kind: &'static str,
    pub what: String,
    pub target: String,
    pub portal: String,
    pub started: Instant,
    pub session: SessionHandle,
    pub exports: Arc<ExportSet<Lun>>,
}

impl Source {
    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let luns = self
            .exports
            .exports()
            .iter()
            .map(|e| {
                let m = e.meter();
                LunSnapshot {
                    lun: e.number(),
                    size: e.size(),
                    read: m.read.counts(),
                    write: m.write.counts(),
                    other: m.other.counts(),
                    errors: m.errors(),
                    cache: e.device().stats(),
                    multipath: e.device().backend().route().router().map(|r| r.report()),
                }
            })
            .collect();
        let (down, last_outage) = self.session.downtime();
        Snapshot {
            pid: std::process::id(),
            kind: self.kind.to_string(),
            what: self.what.clone(),
            target: self.target.clone(),
            portal: self.portal.clone(),
            uptime: self.started.elapsed().as_secs_f64(),
            reconnects: self.session.reconnects(),
            session_up: self.session.is_up(),
            down_seconds: down.as_secs_f64(),
            last_outage_seconds: last_outage.map(|d| d.as_secs_f64()),
            data_path: DataPathStats::now(),
            luns,
        }
    }
}

/// The answer to one request line.
fn answer(line: &[u8], source: &Source) -> serde_json::Value {
    let fail = |error: String| serde_json::json!({"version": VERSION, "ok": false, "error": error});
    let req: Request = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => {
            return fail(format!(
                "not a request: {e} (expected one line of JSON such as {{\"version\":{VERSION},\"request\":\"stats\"}})"
            ))
        }
    };
    if req.version != VERSION {
        return fail(format!(
            "protocol version {} is not spoken here: this rlun speaks version {VERSION}",
            req.version
        ));
    }
    match req.request.as_str() {
        "stats" => {
            let mut v = serde_json::to_value(source.snapshot()).unwrap_or_default();
            v["version"] = VERSION.into();
            v["ok"] = true.into();
            v
        }
        other => fail(format!("unknown request {other:?} (known: \"stats\")")),
    }
}

/// A listening control socket, removed when dropped.
pub struct ControlSocket {
    path: PathBuf,
    /// The socket file's device and inode, so that drop removes only ours.
    id: (u64, u64),
    task: tokio::task::JoinHandle<()>,
}

impl ControlSocket {
    /// Listen at `path` (replacing a stale socket there) and answer
    /// requests from `source` on a task of their own. `None`, with a
    /// warning, when the socket cannot be made: serving goes on without it.
    pub fn open(path: PathBuf, source: Arc<Source>) -> Option<ControlSocket> {
        let _ = std::fs::remove_file(&path);
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot open the control socket; `rlun stats` will not see this process");
                return None;
            }
        };
        let meta = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::metadata(&path));
        let meta = match meta {
            Ok(m) => m,
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot restrict the control socket to this user; closed");
                let _ = std::fs::remove_file(&path);
                return None;
            }
        };
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(serve_one(stream, source.clone()));
                    }
                    Err(e) => {
                        debug!(error = %e, "control socket accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Some(ControlSocket {
            path,
            id: (meta.dev(), meta.ino()),
            task,
        })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.task.abort();
        if std::fs::metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether the peer of `stream` may ask: the user running rlun, or root.
fn allowed(stream: &UnixStream) -> Result<(), String> {
    let me = daemon::current_uid();
    match stream.peer_cred() {
        Ok(c) if c.uid() == me || c.uid() == 0 => Ok(()),
        Ok(c) => Err(format!(
            "user {} may not ask the rlun of user {me} (only that user and root may)",
            c.uid()
        )),
        Err(e) => Err(format!("cannot tell who is asking: {e}")),
    }
}

/// Answer one connection: one request line, one answer line.
async fn serve_one(mut stream: UnixStream, source: Arc<Source>) {
    // The request is read (bounded, within the timeout) before anyone is
    // refused, so that a refused client reads the reason instead of
    // failing its write on a closed socket.
    let (read, _) = stream.split();
    let mut reader = BufReader::new(read).take(MAX_REQUEST as u64 + 1);
    let mut line = Vec::new();
    let got = tokio::time::timeout(REQUEST_TIMEOUT, reader.read_until(b'\n', &mut line));
    let reply = match (got.await, allowed(&stream)) {
        (Err(_), _) => {
            debug!("control socket: no request within the timeout");
            return;
        }
        (Ok(Err(e)), _) => {
            debug!(error = %e, "control socket: reading the request failed");
            return;
        }
        (Ok(Ok(_)), Err(error)) => {
            serde_json::json!({"version": VERSION, "ok": false, "error": error})
        }
        (Ok(Ok(_)), Ok(())) if line.len() > MAX_REQUEST => serde_json::json!({
            "version": VERSION, "ok": false,
            "error": format!("request longer than {MAX_REQUEST} bytes"),
        }),
        (Ok(Ok(_)), Ok(())) => answer(line.trim_ascii(), &source),
    };
    let mut text = reply.to_string();
    text.push('\n');
    if let Err(e) = stream.write_all(text.as_bytes()).await {
        debug!(error = %e, "control socket: the client left before the answer");
    }
    let _ = stream.shutdown().await;
}

/// Why asking a control socket failed.
#[derive(Debug, Error)]
pub enum ControlError {
    #[error("no control socket at {}", path.display())]
    Missing { path: PathBuf },
    #[error("{} is not a socket", path.display())]
    NotASocket { path: PathBuf },
    #[error("{} belongs to user {owner}: only that user (or root) can ask its rlun", path.display())]
    OtherUser { path: PathBuf, owner: u32 },
    #[error("nobody listens on {}: the rlun that made it is gone (a stale socket; it is swept when the next rlun starts serving, or remove it)", path.display())]
    Stale { path: PathBuf },
    #[error("cannot ask the rlun at {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the rlun at {} did not answer within {:?}", path.display(), REQUEST_TIMEOUT)]
    Timeout { path: PathBuf },
    #[error("the rlun at {} answered something that is not version-{VERSION} JSON: {detail}", path.display())]
    Garbled { path: PathBuf, detail: String },
    #[error("the rlun at {} refused the request: {message}", path.display())]
    Refused { path: PathBuf, message: String },
}

impl ControlError {
    /// How this failure is classified ([`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ControlError::Missing { .. } | ControlError::Stale { .. } => ErrorKind::NotFound,
            ControlError::NotASocket { .. } => ErrorKind::Usage,
            ControlError::OtherUser { .. } => ErrorKind::Auth,
            ControlError::Io { .. } | ControlError::Timeout { .. } => ErrorKind::Failure,
            ControlError::Garbled { .. } | ControlError::Refused { .. } => ErrorKind::Protocol,
        }
    }
}

/// Send `request` to the control socket at `path` and return the answer
/// (its `ok` was true).
pub async fn query(path: &Path, request: &str) -> Result<serde_json::Value, ControlError> {
    use std::os::unix::fs::FileTypeExt;
    let p = || path.to_path_buf();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == IoKind::NotFound => return Err(ControlError::Missing { path: p() }),
        Err(source) => return Err(ControlError::Io { path: p(), source }),
    };
    if !meta.file_type().is_socket() {
        return Err(ControlError::NotASocket { path: p() });
    }
    let me = daemon::current_uid();
    if meta.uid() != me && me != 0 {
        return Err(ControlError::OtherUser {
            path: p(),
            owner: meta.uid(),
        });
    }
    let exchange = async {
        let mut stream = match UnixStream::connect(path).await {
            Ok(s) => s,
            Err(e) if e.kind() == IoKind::ConnectionRefused => {
                return Err(ControlError::Stale { path: p() })
            }
            Err(source) => return Err(ControlError::Io { path: p(), source }),
        };
        let line = serde_json::json!({"version": VERSION, "request": request}).to_string() + "\n";
        let io = |source| ControlError::Io { path: p(), source };
        stream.write_all(line.as_bytes()).await.map_err(io)?;
        let mut answer = String::new();
        BufReader::new(stream)
            .read_line(&mut answer)
            .await
            .map_err(io)?;
        Ok(answer)
    };
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| ControlError::Timeout { path: p() })??;
    let garbled = |detail: String| ControlError::Garbled { path: p(), detail };
    let v: serde_json::Value =
        serde_json::from_str(&answer).map_err(|e| garbled(format!("{e}")))?;
    if v["version"].as_u64() != Some(u64::from(VERSION)) {
        return Err(garbled(format!("version {}", v["version"])));
    }
    if v["ok"].as_bool() != Some(true) {
        let message = v["error"].as_str().unwrap_or("no reason given").to_string();
        return Err(ControlError::Refused { path: p(), message });
    }
    Ok(v)
}
