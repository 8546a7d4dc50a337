//! `rlun paths`: the paths of each LUN a serving rlun reaches through
//! several portals, as its control socket reports them
//! ([`crate::multipath::PathsReport`]).

use std::fmt::Write as _;
use std::io::Write;

use serde_json::json;

use super::error::{stdout_error, CliError};
use super::stats::{control_error, sample, sockets};
use crate::control::Snapshot;

/// "12s ago", "3m ago".
fn ago(secs: f64) -> String {
    match secs {
        s if s < 120.0 => format!("{s:.0}s ago"),
        s if s < 7200.0 => format!("{:.0}m ago", s / 60.0),
        s => format!("{:.0}h ago", s / 3600.0),
    }
}

/// The table for one process.
fn table(s: &Snapshot) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "{} {}: {} at {}", s.kind, s.what, s.target, s.portal);
    for l in &s.luns {
        let Some(m) = &l.multipath else {
            let _ = writeln!(t, "  LUN {}: one path (no --portal)", l.lun);
            continue;
        };
        let last = m
            .last_failover_seconds_ago
            .map_or(String::new(), |a| format!(", the last {}", ago(a)));
        let _ = writeln!(
            t,
            "  LUN {}: {} of {} paths usable, policy {}, {} failover{}{last}",
            l.lun,
            m.usable,
            m.paths.len(),
            m.policy,
            m.failovers,
            if m.failovers == 1 { "" } else { "s" },
        );
        let width = m
            .paths
            .iter()
            .map(|p| p.portal.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let _ = writeln!(
            t,
            "  {:<width$} {:<5} {:>5} {:<20} {:<4} {:<6} {:>8} {:>10} {:>6} LAST FAILURE",
            "PORTAL",
            "VIA",
            "GROUP",
            "ALUA STATE",
            "PATH",
            "IN USE",
            "INFLIGHT",
            "COMMANDS",
            "ERRORS"
        );
        for p in &m.paths {
            let path = match (p.logged_in, p.up) {
                (false, _) => "none",
                (true, true) => "up",
                (true, false) => "down",
            };
            let last = match (&p.last_failure, p.last_failure_seconds_ago) {
                (Some(why), Some(a)) => format!("{}: {why}", ago(a)),
                _ => "-".into(),
            };
            let _ = writeln!(
                t,
                "  {:<width$} {:<5} {:>5} {:<20} {:<4} {:<6} {:>8} {:>10} {:>6} {last}",
                p.portal,
                p.transport,
                p.group.map_or("-".into(), |g| g.to_string()),
                p.alua_state,
                path,
                if p.in_use { "yes" } else { "no" },
                p.in_flight,
                p.commands,
                p.errors,
            );
        }
    }
    t
}

/// `rlun paths`.
pub async fn paths(what: Option<&str>, as_json: bool) -> Result<(), CliError> {
    let socks = sockets(what)?;
    let (now, mut failed) = sample(&socks).await;
    if now.is_empty() {
        return Err(control_error(failed.remove(0)));
    }
    let mut out = std::io::stdout().lock();
    if as_json {
        let v: Vec<_> = now
            .iter()
            .map(|s| {
                json!({
                    "kind": s.kind,
                    "what": s.what,
                    "pid": s.pid,
                    "target": s.target,
                    "luns": s.luns.iter().map(|l| json!({
                        "lun": l.lun,
                        "multipath": l.multipath,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&v).expect("JSON of plain values");
        writeln!(out, "{text}").map_err(stdout_error)?;
    } else {
        for s in &now {
            write!(out, "{}", table(s)).map_err(stdout_error)?;
        }
    }
    for e in &failed {
        eprintln!("rlun: {}", rlun_iscsi::error_chain(e));
    }
    Ok(())
}
