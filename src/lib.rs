//! rlun: a userspace iSCSI and iSER initiator — the application crate.
//!
//! The protocol itself (PDUs, login, negotiation, CHAP, one connection's
//! full feature phase, the recovery policy, CDBs and SCSI parsers) is the
//! sans-IO crate [`rlun_iscsi`]; everything here does I/O around it. The
//! layers, top to bottom, as the architecture check holds them (see
//! ARCHITECTURE.md; a module may use only the ones below it):
//!
//! - [`cmd`]: the subcommands, and the dispatcher `main.rs` calls.
//! - [`cli`]: the `rlun` command line (clap), also the source of the man page.
//! - [`service`]: the serving lifecycle `mount`, `serve` and `attach` share
//!   (login, exports, readiness, pid file, write-back, logout).
//! - [`daemon`]: the process machinery of serving commands: `--daemon`,
//!   readiness (pipe and systemd), pid files, signals.
//! - [`fuse`], [`nbd`] and [`ublk`]: the front ends — each export as a
//!   file in a FUSE mount; NBD exports over TCP, Unix sockets and TLS, and
//!   the kernel's `/dev/nbdN`; the kernel's `/dev/ublkbN` (io_uring).
//! - [`export`]: the export layer every front end stands on: a target's
//!   LUNs as exports, clipping, ENOSPC, unmap-or-zero, FUA, flush, capacity
//!   changes, shutdown and lost-data reports; typed errors with one errno
//!   mapping.
//! - [`remote`]: a remote LUN (`client::Lun`) as the device layer's
//!   backend: `BlockBackend` and `LunBackend` for it, client errors
//!   classified for the device layer.
//! - [`device`] and [`client`]: `LunDevice`, byte-addressed cached I/O on
//!   any block backend; a logged-in target (`client::LoggedIn`) and its
//!   LUNs with typed SCSI operations and UNIT ATTENTION retry.
//! - [`session`]: one iSCSI session: a tokio driver task around the
//!   recovery machine of [`rlun_iscsi`] and a transport.
//! - [`transport`]: the `Transport` trait the driver is generic over; TCP
//!   (in-band data movement) and iSER (direct, over `rlun_sys::rdma`).
//! - [`config`] and [`url`]: `rlun.toml`, credentials, `iscsi://` URLs.
//! - [`clock`], [`entropy`], [`stats`], [`exit`], [`logging`]: leaves — the
//!   clock read once per driver turn, the ISID and CHAP nonce, data-path
//!   counters, the documented exit codes, where log messages go (text,
//!   JSON, the systemd journal).
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
pub mod control;
pub mod daemon;
pub mod device;
pub mod entropy;
pub mod exit;
pub mod export;
pub mod fuse;
pub mod logging;
pub mod metrics;
pub mod multipath;
pub mod nbd;
pub mod remote;
pub mod service;
pub mod session;
pub mod stats;
pub mod transport;
pub mod ublk;
pub mod url;
