//! `rlun rescan [WHAT]`: ask a serving rlun (mount, serve, attach) to look
//! at its target again, wait for it and print what changed.
//!
//! The serving rlun rescans on SIGHUP (`crate::service`): REPORT LUNS, and
//! READ CAPACITY of every export. After each look it rewrites the
//! description beside its pid file (`rlun list` reads it too) with
//! `rescans` (the SIGHUPs it had seen when the look began) and `changes`
//! (what that look found). So this command reads `rescans`, signals, and
//! waits until a look that began after its signal is described.

use std::path::Path;
use std::time::Duration;

use rlun_iscsi::ErrorKind;

use super::attach::{held, Held};
use super::error::CliError;
use crate::daemon;

/// The processes `what` names (all of them when `None`).
pub(super) fn select(all: Vec<Held>, what: Option<&str>) -> Vec<Held> {
    let Some(what) = what else {
        return all;
    };
    let canonical = std::fs::canonicalize(what)
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let addr = what.strip_prefix("nbd://").map(|a| format!("nbd-{a}"));
    all.into_iter()
        .filter(|h| {
            h.what == what
                || canonical.as_deref() == Some(h.what.as_str())
                || addr.as_deref() == Some(h.what.as_str())
                || endpoints(h).iter().any(|e| e == what)
        })
        .collect()
}

fn info(h: &Held) -> serde_json::Value {
    daemon::read_info(&daemon::state_file(Path::new(&h.what)), h.pid).unwrap_or_default()
}

fn endpoints(h: &Held) -> Vec<String> {
    info(h)["endpoints"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn rescans(h: &Held) -> u64 {
    info(h)["rescans"].as_u64().unwrap_or(0)
}

/// `rlun rescan`.
pub async fn rescan(what: Option<&str>, timeout: Duration) -> Result<(), CliError> {
    let all = held(&daemon::state_dir());
    let chosen = select(all, what);
    if chosen.is_empty() {
        let message = match what {
            Some(w) => {
                format!("no rlun of this user serves {w} (`rlun list` shows what they serve)")
            }
            None => "no rlun of this user is mounted, serving or attached".to_string(),
        };
        return Err(CliError::Described {
            message,
            kind: ErrorKind::NotFound,
        });
    }
    let mut failed = None;
    for h in &chosen {
        let before = rescans(h);
        let status = tokio::process::Command::new("kill")
            .args(["-HUP", &h.pid.to_string()])
            .status()
            .await;
        if !status.is_ok_and(|s| s.success()) {
            failed = Some(format!("cannot signal rlun (pid {})", h.pid));
            continue;
        }
        let start = tokio::time::Instant::now();
        let described = loop {
            let v = info(h);
            if v["rescans"].as_u64().unwrap_or(0) > before {
                break Some(v);
            }
            if start.elapsed() >= timeout || !daemon::process_alive(h.pid) {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let Some(v) = described else {
            failed = Some(format!(
                "rlun (pid {}) serving {} did not finish the rescan in {timeout:?}",
                h.pid, h.what
            ));
            continue;
        };
        let changes: Vec<&str> = v["changes"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
            .unwrap_or_default();
        let what = v["what"].as_str().unwrap_or(&h.what);
        for c in &changes {
            println!("{what}: {c}");
        }
        if let Some(e) = v["rescan_error"].as_str() {
            failed = Some(format!("the rescan of {what} failed: {e}"));
        } else if changes.is_empty() {
            println!("{what}: no change");
        }
    }
    match failed {
        Some(message) => Err(CliError::Other(message)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(kind: &'static str, what: &str) -> Held {
        Held {
            kind,
            what: what.into(),
            pid: 1,
        }
    }

    #[test]
    fn what_names_a_mount_point_a_device_or_an_nbd_address() {
        let all = || {
            vec![
                held("mounted", "/mnt/x"),
                held("attached", "/dev/nbd3"),
                held("served", "nbd-127.0.0.1:10809"),
            ]
        };
        let pick = |w: Option<&str>| -> Vec<String> {
            select(all(), w).into_iter().map(|h| h.what).collect()
        };

        assert_eq!(pick(None).len(), 3);
        assert_eq!(pick(Some("/dev/nbd3")), ["/dev/nbd3"]);
        assert_eq!(pick(Some("nbd://127.0.0.1:10809")), ["nbd-127.0.0.1:10809"]);
        assert_eq!(pick(Some("/mnt/x")), ["/mnt/x"]);
        assert!(pick(Some("/mnt/y")).is_empty());
    }
}
