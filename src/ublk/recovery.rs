//! Sans-IO: the recovery decisions — whether a device may be taken over,
//! whether it is an orphan of a LUN, and what the guard of a device does
//! next. The driver's view comes in as [`DevState`]; unit-tested without a
//! kernel.

use std::time::Duration;

use super::UblkFailure;

/// The driver's view of a device, and whether its server process lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevState {
    /// UBLK_S_DEV_LIVE.
    pub live: bool,
    /// UBLK_S_DEV_QUIESCED: its server died, the kernel holds its I/O.
    pub quiesced: bool,
    /// The pid that started (or last recovered) it.
    pub server_pid: i32,
    /// That pid is a live process.
    pub served: bool,
}

/// Whether `/dev/ublkb{id}` (`state`, with the URL an rlun stored for it)
/// may be recovered for `url`: it exists, no live process serves it, and
/// it was attached to the same LUN (a device whose URL was not stored is
/// not refused: it may come from an rlun that never wrote one).
pub fn may_recover(
    id: u32,
    state: Option<DevState>,
    stored: Option<&str>,
    url: &str,
) -> Result<(), UblkFailure> {
    let state = state.ok_or(UblkFailure::NoSuchDevice(id))?;
    if state.live && state.served {
        return Err(UblkFailure::Alive {
            id,
            pid: state.server_pid,
        });
    }
    match stored {
        Some(stored) if stored != url => Err(UblkFailure::OtherLun {
            id,
            stored: stored.to_owned(),
            asked: url.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Whether a device is one an rlun attached to `url` and then died: a
/// plain `attach --ublk` of the same URL takes it over.
pub fn is_orphan_of(state: Option<DevState>, stored: Option<&str>, url: &str) -> bool {
    stored == Some(url) && state.is_some_and(|s| s.quiesced || !s.served)
}

/// What the guard of a device does after one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardStep {
    /// Its rlun lives, or has been dead for less than the timeout.
    Wait,
    /// The device is gone, or another rlun recovered it (with a guard of
    /// its own).
    Leave,
    /// Its rlun died `timeout` ago and nobody took over: delete it.
    Delete,
}

/// One look of the guard of the device `server` started: `state` is the
/// driver's view (`None`: no such device), `dead_for` how long `server`
/// has been seen dead (`None`: it lives).
pub fn guard_step(
    state: Option<DevState>,
    server: u32,
    dead_for: Option<Duration>,
    timeout: Duration,
) -> GuardStep {
    let Some(state) = state else {
        return GuardStep::Leave;
    };
    let Some(dead_for) = dead_for else {
        return GuardStep::Wait;
    };
    if state.served && state.server_pid > 0 && state.server_pid as u32 != server {
        return GuardStep::Leave;
    }
    if dead_for >= timeout {
        GuardStep::Delete
    } else {
        GuardStep::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "iscsi://10.0.0.5/iqn.2026-11.org.example:store/1";

    fn st(live: bool, quiesced: bool, pid: i32, served: bool) -> Option<DevState> {
        Some(DevState {
            live,
            quiesced,
            server_pid: pid,
            served,
        })
    }

    #[test]
    fn recovery_needs_a_device_without_a_live_server_and_the_same_lun() {
        assert!(matches!(
            may_recover(3, None, None, URL),
            Err(UblkFailure::NoSuchDevice(3))
        ));
        assert!(matches!(
            may_recover(0, st(true, false, 42, true), Some(URL), URL),
            Err(UblkFailure::Alive { id: 0, pid: 42 })
        ));
        // Quiesced after its server died: the usual case.
        assert!(may_recover(0, st(false, true, 42, false), Some(URL), URL).is_ok());
        // Still LIVE for the moment before the driver notices the death.
        assert!(may_recover(0, st(true, false, 42, false), Some(URL), URL).is_ok());
        let e = may_recover(
            0,
            st(false, true, 42, false),
            Some("iscsi://other/iqn.x/0"),
            URL,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("iscsi://other/iqn.x/0") && e.contains(URL),
            "{e}"
        );
        // No stored URL (another tool's device file): not refused here.
        assert!(may_recover(0, st(false, true, 42, false), None, URL).is_ok());
    }

    #[test]
    fn an_orphan_is_a_device_of_the_same_url_whose_server_is_gone() {
        assert!(is_orphan_of(st(false, true, 42, false), Some(URL), URL));
        assert!(is_orphan_of(st(true, false, 42, false), Some(URL), URL));
        assert!(!is_orphan_of(st(true, false, 42, true), Some(URL), URL));
        assert!(!is_orphan_of(
            st(false, true, 42, false),
            Some("iscsi://h/iqn.y/0"),
            URL
        ));
        assert!(!is_orphan_of(st(false, true, 42, false), None, URL));
        assert!(!is_orphan_of(None, Some(URL), URL));
    }

    #[test]
    fn the_guard_waits_for_a_recovery_then_deletes() {
        let t = Duration::from_secs(60);
        let s = |d: u64| Some(Duration::from_secs(d));
        // Its rlun lives.
        assert_eq!(
            guard_step(st(true, false, 7, true), 7, None, t),
            GuardStep::Wait
        );
        // Dead, the device held for less than the timeout.
        assert_eq!(
            guard_step(st(false, true, 7, false), 7, s(59), t),
            GuardStep::Wait
        );
        assert_eq!(
            guard_step(st(false, true, 7, false), 7, s(60), t),
            GuardStep::Delete
        );
        // Another rlun recovered it: that one guards it.
        assert_eq!(
            guard_step(st(true, false, 9, true), 7, s(600), t),
            GuardStep::Leave
        );
        // Gone (detached, deleted by hand).
        assert_eq!(guard_step(None, 7, s(1), t), GuardStep::Leave);
        // A recovery in progress is not one yet.
        assert_eq!(
            guard_step(st(false, true, 9, false), 7, s(61), t),
            GuardStep::Delete
        );
    }
}
