//! `rlun list`: what this user's rlun processes have mounted, served and
//! attached. The pid files in the state directory say which processes
//! there are ([`held`]); each one's control socket ([`crate::control`])
//! says what it serves and how it is doing now — the session up or
//! reconnecting, dirty bytes, reconnects. A process that does not answer
//! (an older rlun, or one too busy to answer within the timeout) is listed
//! from the description beside its pid file, with its state unknown.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};

use super::attach::held;
use super::error::{stdout_error, CliError};
use crate::control::{self, Snapshot};
use crate::daemon;
use crate::service::human_size;

/// One process as `rlun list --json` writes it (fields in rlun-list(8)).
async fn row(what: &str, kind: &str, pid: u32) -> Value {
    let pid_file = daemon::state_file(Path::new(what));
    let info = daemon::read_info(&pid_file, pid).unwrap_or_default();
    let shown = match what.strip_prefix("nbd-") {
        Some(addr) => format!("nbd://{addr}"),
        None => what.to_string(),
    };
    let live = control::query(&control::socket_path(&pid_file), "stats")
        .await
        .map_err(|e| e.to_string())
        .and_then(|v| serde_json::from_value::<Snapshot>(v).map_err(|e| e.to_string()));
    let mut r = json!({
        "kind": kind,
        "what": shown,
        "endpoints": info.get("endpoints").cloned().unwrap_or_else(|| json!([shown])),
        "target": info.get("target"),
        "portal": info.get("portal"),
        "luns": info.get("luns").cloned().unwrap_or_else(|| json!([])),
        "pid": pid,
    });
    match live {
        Ok(s) => {
            r["target"] = json!(s.target);
            r["portal"] = json!(s.portal);
            r["luns"] = json!(s.luns.iter().map(|l| l.lun).collect::<Vec<_>>());
            r["session_up"] = json!(s.session_up);
            r["reconnects"] = json!(s.reconnects);
            r["down_seconds"] = json!(s.down_seconds);
            r["dirty_bytes"] = json!(s.luns.iter().map(|l| l.cache.dirty_bytes).sum::<u64>());
            r["health"] = json!(crate::service::health(&s));
            if let Some((usable, all)) = crate::service::paths_usable(&s) {
                r["paths_usable"] = json!(usable);
                r["paths"] = json!(all);
            }
        }
        Err(e) => {
            r["session_up"] = Value::Null;
            r["control_error"] = json!(e);
        }
    }
    r
}

/// The STATE column: `up`, `down` (reconnecting), or `?` when the process
/// did not answer; with several paths, the usable ones out of all (`2/2`).
fn state(r: &Value) -> String {
    if let (Some(u), Some(n)) = (r["paths_usable"].as_u64(), r["paths"].as_u64()) {
        return format!("{u}/{n}");
    }
    match r["session_up"].as_bool() {
        Some(true) => "up".into(),
        Some(false) => "down".into(),
        None => "?".into(),
    }
}

/// `rlun list`: kind, where (mount point, device, socket, `nbd://ADDR`),
/// pid, LUNs, session state, dirty bytes and target — a table, or JSON.
pub async fn list(as_json: bool) -> Result<(), CliError> {
    let mut rows = Vec::new();
    for h in held(&daemon::state_dir()) {
        rows.push(row(&h.what, h.kind, h.pid).await);
    }
    let mut out = std::io::stdout().lock();
    if as_json {
        let text = serde_json::to_string_pretty(&rows).expect("JSON of plain values");
        return writeln!(out, "{text}").map_err(stdout_error);
    }
    if rows.is_empty() {
        return Ok(());
    }
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let width = rows
        .iter()
        .map(|r| s(&r["what"]).len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "{:<8} {:<width$} {:>7} {:<6} {:<5} {:>10} TARGET",
        "KIND", "WHAT", "PID", "LUNS", "STATE", "DIRTY"
    )
    .map_err(stdout_error)?;
    for r in &rows {
        let luns: Vec<String> = r["luns"]
            .as_array()
            .map(|a| a.iter().map(&s).collect())
            .unwrap_or_default();
        let luns = if luns.is_empty() {
            "-".into()
        } else {
            luns.join(",")
        };
        let dirty = r["dirty_bytes"]
            .as_u64()
            .map_or_else(|| "-".into(), human_size);
        let target = match (&r["target"], &r["portal"]) {
            (Value::String(t), Value::String(p)) => format!("{t} at {p}"),
            (t, _) => s(t),
        };
        writeln!(
            out,
            "{:<8} {:<width$} {:>7} {:<6} {:<5} {:>10} {}",
            s(&r["kind"]),
            s(&r["what"]),
            s(&r["pid"]),
            luns,
            state(r),
            dirty,
            target
        )
        .map_err(stdout_error)?;
    }
    Ok(())
}
