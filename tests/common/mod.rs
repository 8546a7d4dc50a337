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
//! - [`proxy`]: a fault-injecting proxy to a real target (corrupt or go
//!   silent after every login, delay, drop connections, rewrite the target's
//!   PDUs) — for targets that
//!   accept the login and then misbehave, and for network faults.
//! - [`scripted`]: a scripted target that completes any login, then answers
//!   text exchanges without end (endless continuations, an unbounded
//!   SendTargets reply).
//! - [`backing`]: deterministic pseudo-random backing files and the expected
//!   bytes at any offset.
#![allow(dead_code, unused_imports)]

pub mod backing;
pub mod cli;
pub mod error;
pub mod hostile;
pub mod notify;
pub mod process;
pub mod proxy;
pub mod scripted;
pub mod tgtd;

pub use backing::{fill_pattern, make_backing_file, pattern_bytes};
pub use error::{HarnessError, Result};
pub use hostile::{Behaviour, HostileTarget};
pub use notify::recv_notify;
pub use process::{
    rlun_bin, run_rlun, run_rlun_measured, run_rlun_with_timeout, run_with_timeout, spawn_rlun,
    try_run_with_timeout, ChildGuard, RLUN_TIMEOUT,
};
pub use proxy::{Fault, FaultProxy, Rewrite};
pub use scripted::{ScriptedTarget, TextScript};
pub use tgtd::{TargetBuilder, Tgtd, NULL_LUN_SIZE};
