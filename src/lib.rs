//! rlun: a userspace iSCSI and iSER initiator.
//!
//! The layers, top to bottom (see ARCHITECTURE.md for the full picture):
//!
//! - [`cmd`]: the subcommands, and the dispatcher `main.rs` calls.
//! - [`cli`]: the `rlun` command line (clap), also the source of the man page.
//! - [`service`]: the serving lifecycle `mount`, `serve` and `attach` share
//!   (login, exports, readiness, pid file, write-back, logout).
//! - [`daemon`]: the process machinery of serving commands: `--daemon`,
//!   readiness (pipe and systemd), pid files, signals.
//! - [`client`]: a logged-in session to one target plus typed SCSI helpers
//!   (INQUIRY, READ CAPACITY, READ/WRITE…), with UNIT ATTENTION retry.
//! - [`session`]: the driver task: a thin tokio loop that does the I/O and
//!   the timers around the sans-IO recovery machine and a transport.
//! - [`proto`]: the sans-IO RFC 7143 core (PDU codec, digests, text keys,
//!   negotiation, CHAP, login state machine, full-feature command window and
//!   Data-In/R2T/Data-Out sequencing, and the recovery policy: retries,
//!   aborts, reconnects, logout). It never touches a socket or a clock.
//! - [`scsi`]: CDB builders and response/sense parsers (SPC-5, SBC-4).
//! - [`transport`]: the `Transport` trait the driver is generic over; TCP
//!   (in-band data movement) and iSER (direct: RDMA CM + verbs).
//! - [`device`]: `LunDevice`, byte-addressed cached I/O on a LUN.
//! - [`remote`]: a remote LUN (`client::Lun`) as the device layer's
//!   backend: `BlockBackend` and `LunBackend` for it, client errors
//!   classified for the device layer.
//! - [`export`]: the export layer every front end stands on: a target's
//!   LUNs as exports, clipping, ENOSPC, unmap-or-zero, FUA, flush, capacity
//!   changes, shutdown and lost-data reports; typed errors with one errno
//!   mapping.
//! - [`fuse`]: the FUSE front end (`rlun mount`): each export as a file.
//! - [`url`] and [`config`]: `iscsi://` URLs and credentials.
//! - [`exit`]: the documented exit codes.
//!
//! # No `unsafe` here
//!
//! The crate forbids `unsafe_code`. What needs `unsafe` to talk to C
//! interfaces — rdma-core for iSER, the nbd ioctls of kernel attach — is in
//! the crate `rlun-sys`, behind safe wrappers (see its crate docs for the
//! safety design of each).
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod daemon;
pub mod device;
pub mod entropy;
pub mod exit;
pub mod export;
pub mod fuse;
pub mod nbd;
pub mod remote;
pub mod service;
pub mod session;
pub mod stats;
pub mod transport;
pub mod url;
