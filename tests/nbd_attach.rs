//! `rlun attach` / `rlun detach` on the host. The host kernel has no nbd
//! module, so what runs here is what rlun checks before any network I/O:
//! not root, the module missing, a malformed device, detaching a device
//! no rlun attached. Attaching for real (mkfs, fsck, re-attach) is the
//! VM-lab scenario `20-rlun-nbd-ext4`.
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
    assert_failure(&out, 2, &["not an NBD device"]);
}

#[test]
fn detach_of_a_device_rlun_did_not_attach_fails() {
    let out = run_rlun(["detach", "/dev/nbd15"], &[]);
    assert_failure(&out, 1, &["/dev/nbd15 is not attached by rlun"]);
}
