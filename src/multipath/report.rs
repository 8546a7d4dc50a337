//! What `rlun paths`, `rlun list`, the status line and the
//! `--stats-interval` lines show of a LUN's paths.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::info;

use super::{Policy, Router};

/// One path as `rlun paths` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PathReport {
    pub portal: String,
    /// `iscsi` or `iser`.
    pub transport: String,
    /// The path's session exists (a portal that could not log in at start
    /// has none until it does).
    pub logged_in: bool,
    /// Logged in and its last check passed.
    pub up: bool,
    /// Up and in a state that carries I/O.
    pub usable: bool,
    /// Its asymmetric access state ("active/optimized" without ALUA).
    pub alua_state: String,
    /// Its target port group, when the target reports ALUA.
    pub group: Option<u16>,
    pub preferred: bool,
    /// Commands go to it now.
    pub in_use: bool,
    pub in_flight: u32,
    /// Commands completed through it.
    pub commands: u64,
    /// Times it failed.
    pub errors: u64,
    pub last_failure: Option<String>,
    pub last_failure_seconds_ago: Option<f64>,
}

/// A LUN's paths as `rlun paths` shows them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PathsReport {
    pub policy: String,
    /// Paths that can carry I/O now.
    pub usable: usize,
    /// Times I/O moved off a failed path.
    pub failovers: u64,
    pub last_failover_seconds_ago: Option<f64>,
    pub paths: Vec<PathReport>,
}

impl Router {
    /// What `rlun paths`, `rlun list` and the status line show.
    pub fn report(&self) -> PathsReport {
        let now = Instant::now();
        let s = self.sel();
        let ago = |t: Instant| now.saturating_duration_since(t).as_secs_f64();
        let paths = s
            .paths()
            .iter()
            .zip(&self.set.paths)
            .enumerate()
            .map(|(i, (p, path))| PathReport {
                portal: path.portal.clone(),
                transport: path.transport.scheme().to_string(),
                logged_in: path.session().is_some(),
                up: p.up,
                usable: p.usable(),
                alua_state: p.alua.name().to_string(),
                group: p.group,
                preferred: p.preferred,
                in_use: match s.policy() {
                    Policy::Failover => s.current() == Some(i),
                    _ => {
                        p.usable()
                            && s.paths()
                                .iter()
                                .filter(|q| q.usable())
                                .all(|q| q.alua.rank() >= p.alua.rank())
                    }
                },
                in_flight: p.in_flight,
                commands: p.commands,
                errors: p.errors,
                last_failure: p.last_failure.as_ref().map(|(_, why)| why.clone()),
                last_failure_seconds_ago: p.last_failure.as_ref().map(|(t, _)| ago(*t)),
            })
            .collect();
        PathsReport {
            policy: s.policy().name().to_string(),
            usable: s.usable(),
            failovers: s.failovers,
            last_failover_seconds_ago: s.last_failover.map(ago),
            paths,
        }
    }

    /// Log each path's counters every `every` (`--stats-interval`), beside
    /// the cache's line, while the router lives.
    pub fn start_stats(self: &Arc<Self>, lun: u64, every: Duration) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(r) = weak.upgrade() else { return };
                let report = r.report();
                for p in &report.paths {
                    info!(
                        lun,
                        portal = %p.portal,
                        up = p.up,
                        alua_state = %p.alua_state,
                        in_use = p.in_use,
                        in_flight = p.in_flight,
                        commands = p.commands,
                        errors = p.errors,
                        failovers = report.failovers,
                        "path"
                    );
                }
            }
        });
    }
}
