//! Shared harness for rlun's integration tests.
//!
//! Every integration test file does `mod common;` and so compiles this module
//! on its own; a file that uses only part of it would warn about the rest,
//! hence the crate-wide allows below.
//!
//! - [`tgtd`]: one private `tgtd` per test (own portal port and control port),
//!   with a builder for targets and LUNs, kill/restart and pause/resume.
//! - [`hostile`]: a scripted raw-TCP "target" that answers a login request
//!   with deliberately malformed bytes, plus raw login PDU helpers.
//! - [`process`]: run the `rlun` binary (or any command) with a timeout, so a
//!   hung process fails the test instead of hanging it.
//! - [`cli`]: assertions on an rlun run (exit code, the `rlun: ` error
//!   line, no panic) and parsers for its and libiscsi's output.
//! - [`stall`]: a proxy to a real target that lets logins through and then
//!   swallows everything (a target that accepts the login and misbehaves).
//! - [`backing`]: deterministic pseudo-random backing files and the expected
//!   bytes at any offset.
#![allow(dead_code, unused_imports)]

pub mod backing;
pub mod cli;
pub mod error;
pub mod hostile;
pub mod process;
pub mod stall;
pub mod tgtd;

pub use backing::{fill_pattern, make_backing_file, pattern_bytes};
pub use error::{HarnessError, Result};
pub use hostile::{Behaviour, HostileTarget};
pub use process::{
    rlun_bin, run_rlun, run_rlun_with_timeout, run_with_timeout, spawn_rlun, try_run_with_timeout,
    ChildGuard, RLUN_TIMEOUT,
};
pub use tgtd::{TargetBuilder, Tgtd, NULL_LUN_SIZE};
