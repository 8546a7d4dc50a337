//! The router's look at its paths: that each reaches the same logical
//! unit (VPD pages 0x80 and 0x83), their target port groups and ALUA
//! states (REPORT TARGET PORT GROUPS), and the checker that sends TEST
//! UNIT READY through every path each check interval and brings paths
//! back.

use std::sync::Arc;
use std::time::Instant;

use rlun_iscsi::proto::connection::{CommandRequest, CommandResult};
use rlun_iscsi::proto::pdu::TaskAttr;
use rlun_iscsi::scsi::alua::{self, AluaSense, PortIdentity, TargetPortGroups};
use rlun_iscsi::scsi::vpd::DeviceIdentification;
use rlun_iscsi::scsi::{cdb, Cdb, ScsiError, Status};
use tracing::{info, warn};

use super::{Router, SameUnit, MIN_CHECK_TIMEOUT};
use crate::session::SessionError;

impl Router {
    /// Send `c` through path `i` only, without retries.
    async fn on_path(&self, i: usize, c: &Cdb) -> Result<CommandResult, SessionError> {
        let session = self.set.paths[i].session().ok_or(SessionError::Closed)?;
        let read_len = match c.direction() {
            cdb::DataDirection::Read => c.expected_transfer_len(),
            _ => 0,
        };
        session
            .command(CommandRequest {
                lun: self.lun,
                cdb: c.padded(),
                data_out: bytes::Bytes::new(),
                read_len,
                attr: TaskAttr::Simple,
            })
            .await
    }

    /// A VPD page through path `i` (`None` when it cannot be read).
    async fn vpd_on(&self, i: usize, page: u8) -> Option<bytes::Bytes> {
        match self.on_path(i, &cdb::inquiry_vpd(page, 1024)).await {
            Ok(r) if Status::from(r.status).is_success() => Some(r.data),
            _ => None,
        }
    }

    /// Check, through every logged-in path, that it reaches the logical
    /// unit `same_unit` accepts, and learn each path's target port. The
    /// first path that reaches another one is the error (its portal).
    /// `alua`: the LUN reported TPGS, so its groups are read and followed.
    pub async fn verify(&self, same_unit: SameUnit, alua: bool) -> Result<(), String> {
        let _ = self.alua.set(alua);
        for i in 0..self.set.paths.len() {
            if self.set.paths[i].session().is_none() {
                continue;
            }
            if !self.check_unit(i, &same_unit).await {
                return Err(self.set.paths[i].portal.clone());
            }
        }
        let _ = self.same_unit.set(same_unit);
        self.read_groups().await;
        Ok(())
    }

    /// Whether path `i` reaches the expected unit (reading its port too).
    async fn check_unit(&self, i: usize, same_unit: &SameUnit) -> bool {
        let serial = self.vpd_on(i, 0x80).await;
        let ident = self.vpd_on(i, 0x83).await;
        if !same_unit(serial.as_deref(), ident.as_deref()) {
            return false;
        }
        let port = ident
            .as_deref()
            .and_then(|b| DeviceIdentification::parse(b).ok())
            .map(|d| PortIdentity::from_page(&d));
        self.ports.lock().unwrap_or_else(|p| p.into_inner())[i] = port;
        true
    }

    /// REPORT TARGET PORT GROUPS through a path that is up, and every
    /// path's state from it (the LUN has ALUA only).
    pub(super) async fn read_groups(&self) {
        if self.alua.get() != Some(&true) {
            return;
        }
        let c = match alua::report_target_port_groups(4096) {
            Ok(c) => c,
            Err(_) => return,
        };
        let ups: Vec<usize> = {
            let s = self.sel();
            (0..self.set.paths.len())
                .filter(|&i| s.paths()[i].up)
                .collect()
        };
        for i in ups {
            let Ok(r) = self.on_path(i, &c).await else {
                continue;
            };
            if !Status::from(r.status).is_success() {
                continue;
            }
            let Ok(groups) = TargetPortGroups::parse(&r.data) else {
                continue;
            };
            self.apply_groups(&groups);
            return;
        }
    }

    fn apply_groups(&self, groups: &TargetPortGroups) {
        let ports = self.ports.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (i, port) in ports.iter().enumerate() {
            let Some(port) = port else { continue };
            let group = port
                .relative_port
                .and_then(|p| groups.group_of_port(p))
                .or_else(|| port.port_group.and_then(|g| groups.group(g)));
            let Some(g) = group else { continue };
            let switch = {
                let mut s = self.sel();
                let (was, known) = (s.paths()[i].alua, s.paths()[i].group.is_some());
                if !known {
                    info!(
                        portal = %self.set.paths[i].portal,
                        group = g.id,
                        state = %g.state,
                        preferred = g.preferred,
                        "ALUA: the path's target port group"
                    );
                } else if was != g.state {
                    info!(
                        portal = %self.set.paths[i].portal,
                        group = g.id,
                        from = %was,
                        to = %g.state,
                        "ALUA state of the path changed"
                    );
                }
                s.set_alua(i, g.state, Some(g.id), g.preferred)
            };
            self.log_switch(switch, "the target port groups changed");
        }
        self.changed.notify_waiters();
    }

    /// One round of the checker: TEST UNIT READY through every path, the
    /// groups when the LUN has ALUA.
    async fn check(&self) {
        let interval = self.set.config.check_interval;
        let now = Instant::now();
        for i in 0..self.set.paths.len() {
            if self.refused.lock().unwrap_or_else(|p| p.into_inner())[i] {
                continue;
            }
            let Some(session) = self.set.paths[i].session() else {
                continue;
            };
            if !session.is_up() {
                if self.sel().paths()[i].up {
                    self.fail(i, "connection lost");
                }
                continue;
            }
            let known = self.ports.lock().unwrap_or_else(|p| p.into_inner())[i].is_some();
            if !known {
                // A path that joined late: is it the same unit?
                if let Some(same) = self.same_unit.get() {
                    if !self.check_unit(i, same).await {
                        warn!(
                            portal = %self.set.paths[i].portal,
                            "path refused: it reaches another logical unit than the first path"
                        );
                        self.refused.lock().unwrap_or_else(|p| p.into_inner())[i] = true;
                        self.sel().set_up(i, false, now);
                        continue;
                    }
                }
            }
            let tur = tokio::time::timeout(
                interval.max(MIN_CHECK_TIMEOUT),
                self.on_path(i, &cdb::test_unit_ready()),
            )
            .await;
            let verdict = match tur {
                Ok(Ok(r)) => {
                    let err = ScsiError::from_status_and_sense_bytes(
                        Status::from(r.status),
                        r.sense.as_deref().unwrap_or(&[]),
                    );
                    if let Some(state) = AluaSense::of(&err).and_then(AluaSense::implied_state) {
                        let mut s = self.sel();
                        let p = &s.paths()[i];
                        let (group, preferred) = (p.group, p.preferred);
                        let switch = s.set_alua(i, state, group, preferred);
                        drop(s);
                        self.log_switch(switch, &format!("the target reports the path {state}"));
                    }
                    Ok(())
                }
                Ok(Err(e)) => Err(rlun_iscsi::error_chain(&e)),
                Err(_) => Err(format!(
                    "TEST UNIT READY unanswered for {:?}",
                    interval.max(MIN_CHECK_TIMEOUT)
                )),
            };
            let was_up = self.sel().paths()[i].up;
            match verdict {
                Ok(()) if !was_up => {
                    info!(portal = %self.set.paths[i].portal, "path is back");
                    let switch = self.sel().set_up(i, true, Instant::now());
                    self.log_switch(switch, "a path came back");
                    self.changed.notify_waiters();
                }
                Err(reason) if was_up => {
                    let reason = format!("check failed: {reason}");
                    // Its commands in flight move on after the path
                    // timeout from now, not after the ping timeout too.
                    session.abandon(reason.clone());
                    self.fail(i, &reason);
                }
                _ => {}
            }
        }
        self.read_groups().await;
    }

    /// Start the checker: a task that checks every path each check
    /// interval (sooner when ALUA sense was seen) while the router lives.
    pub fn start_checker(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let look = self.look.clone();
        // A path's connection lost (NOP-Out unanswered, a reset): the path
        // fails now, not when the checker next looks (it may be waiting
        // out a TEST UNIT READY on that very path), so that what it keeps
        // moves on at once.
        for (i, p) in self.set.paths.iter().enumerate() {
            let Some(s) = p.session() else { continue };
            let mut losses = s.losses();
            let look = look.clone();
            let weak = weak.clone();
            tokio::spawn(async move {
                while losses.changed().await.is_ok() {
                    let Some(r) = weak.upgrade() else { return };
                    let down = r.set.paths[i].session().is_some_and(|s| !s.is_up());
                    if down && r.sel().paths()[i].up {
                        r.fail(i, "connection lost");
                    }
                    look.notify_one();
                }
            });
        }
        let interval = self.set.config.check_interval;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = look.notified() => {}
                }
                // Held only for a round: the router goes when its LUN does.
                let Some(r) = weak.upgrade() else { return };
                r.check().await;
            }
        });
    }
}
