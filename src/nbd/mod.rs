//! NBD front end: remote LUNs as NBD exports (`rlun serve`).
//!
//! - [`proto`]: the sans-IO protocol (handshake state machine, request
//!   parsing and validation, reply encoding).
//! - [`server`]: the tokio server over TCP, Unix sockets and TLS, one
//!   export per LUN, all connections sharing one `LunDevice` per LUN.
//! - [`kernel`]: the kernel NBD client (`/dev/nbdN`) over generic netlink.

pub mod kernel;
pub mod proto;
pub mod server;
