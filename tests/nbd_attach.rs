//! `rlun attach` / `rlun detach` on the host. The host kernel has no nbd
//! module and no ublk_drv, so what runs here is what rlun checks before any
//! network I/O: not root, the module missing, a malformed device, detaching
//! a device no rlun attached; for `/dev/nbdN` and for `--ublk`. Attaching
//! for real (mkfs, fsck, re-attach, recovery) is the VM-lab scenarios
//! `20-rlun-nbd-ext4` and `35-rlun-ublk`.
//!
//! The portal is 127.0.0.1:1 (nothing listens): had rlun tried the network
//! first it would exit 3 (unreachable), not with the local error.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cli::assert_failure;
use common::{rlun_bin, run_rlun, run_with_timeout};

const URL: &str = "iscsi://127.0.0.1:1/iqn.2026-11.org.example:attach/0";

fn module_loaded() -> bool {
    Path::new("/sys/module/nbd").exists()
}

#[test]
fn attach_without_the_nbd_module_says_modprobe() {
    if module_loaded() {
        eprintln!("SKIP: the nbd module is loaded on this host");
        return;
    }
    let out = run_rlun(["attach", URL], &[]);
    assert_failure(
        &out,
        1,
        &["nbd kernel module is not loaded", "modprobe nbd"],
    );
    let out = run_rlun(["attach", URL, "/dev/nbd0", "--connections", "2"], &[]);
    assert_failure(&out, 1, &["modprobe nbd"]);
}

#[test]
fn attach_as_non_root_is_refused() {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(rlun_bin())
        .args(["attach", URL]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_failure(&out, 1, &["needs root"]);
}

#[test]
fn bad_devices_are_usage_errors() {
    let out = run_rlun(["attach", URL, "/dev/sda"], &[]);
    assert_failure(&out, 2, &["/dev/sda is not an NBD device"]);
    let out = run_rlun(["attach", URL, "--connections", "0"], &[]);
    assert_failure(&out, 2, &["--connections must be at least 1"]);
    let out = run_rlun(["detach", "nbdx"], &[]);
    assert_failure(
        &out,
        2,
        &[
            "nbdx is not a device rlun attaches",
            "/dev/nbd<N> or /dev/ublkb<N>",
        ],
    );
}

#[test]
fn detach_of_a_device_rlun_did_not_attach_fails() {
    let out = run_rlun(["detach", "/dev/nbd15"], &[]);
    assert_failure(&out, 1, &["/dev/nbd15 is not attached by rlun"]);
}

fn ublk_loaded() -> bool {
    Path::new("/dev/ublk-control").exists()
}

#[test]
fn ublk_attach_without_the_driver_says_modprobe_and_the_kernel() {
    if ublk_loaded() {
        eprintln!("SKIP: ublk_drv is loaded on this host");
        return;
    }
    for args in [
        vec!["attach", "--ublk", URL],
        // A /dev/ublkbN device implies --ublk.
        vec!["attach", URL, "/dev/ublkb0"],
        vec!["attach", "--recover", URL, "/dev/ublkb0"],
    ] {
        let out = run_rlun(args, &[]);
        assert_failure(&out, 1, &["modprobe ublk_drv", "Linux 6.0 or later"]);
    }
}

#[test]
fn ublk_attach_as_non_root_is_refused() {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(rlun_bin())
        .args(["attach", "--ublk", URL]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_failure(&out, 1, &["needs root"]);
}

#[test]
fn ublk_usage_errors() {
    // clap's own errors: --recover names the device it takes over;
    // --queues is 1..=64.
    for (args, says) in [
        (vec!["attach", "--recover", URL], "<DEVICE>"),
        (vec!["attach", "--ublk", URL, "--queues", "0"], "--queues"),
    ] {
        let out = run_rlun(args.clone(), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = run_rlun(["attach", "--ublk", URL, "/dev/nbd0x"], &[]);
    assert_failure(&out, 2, &["/dev/nbd0x is not a ublk device"]);
}

#[test]
fn detach_of_a_ublk_device_that_does_not_exist_fails() {
    if ublk_loaded() {
        eprintln!("SKIP: ublk_drv is loaded on this host");
        return;
    }
    let out = run_rlun(["detach", "/dev/ublkb7"], &[]);
    assert_failure(&out, 1, &["/dev/ublkb7 does not exist"]);
}
