//! NBD front end: remote LUNs as NBD exports (`rlun serve`).
//!
//! - [`proto`]: the sans-IO protocol (handshake state machine, request
//!   parsing and validation, reply encoding).
//! - [`server`]: the tokio server over TCP, Unix sockets and TLS, one
//!   export per LUN, all connections sharing one `LunDevice` per LUN;
//!   READs and WRITEs of any length, those over 32 MiB streamed in 4 MiB
//!   pieces ([`server::big`]) so a connection's memory stays bounded.
//! - [`kernel`]: the kernel NBD client (`/dev/nbdN`) over generic netlink.

pub mod kernel;
pub mod proto;
pub mod server;
