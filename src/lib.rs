//! rlun: a userspace iSCSI and iSER initiator.
//!
//! The layers, top to bottom (see ARCHITECTURE.md for the full picture):
//!
//! - [`cli`]: the `rlun` command line (clap), also the source of the man page.
//! - [`client`]: a logged-in session to one target plus typed SCSI helpers
//!   (INQUIRY, READ CAPACITY, READ/WRITE…), with UNIT ATTENTION retry.
//! - [`session`]: the driver task: owns the sans-IO protocol core and a
//!   transport, runs timers and NOP keepalives, turns requests into PDUs.
//! - [`proto`]: the sans-IO RFC 7143 core (PDU codec, digests, text keys,
//!   negotiation, CHAP, login state machine, full-feature command window and
//!   Data-In/R2T/Data-Out sequencing). It never touches a socket or a clock.
//! - [`scsi`]: CDB builders and response/sense parsers (SPC-5, SBC-4).
//! - [`transport`]: TCP framing on tokio; iSER (RDMA CM + verbs).
//! - [`device`]: `LunDevice`, byte-addressed cached I/O on a LUN.
//! - [`fuse`]: the FUSE front end (`rlun mount`): each LUN as a file.
//! - [`url`] and [`config`]: `iscsi://` URLs and credentials.
// `unsafe` is allowed only in the RDMA module (`transport::iser`), each block
// with a `// SAFETY:` comment; `deny` (not `forbid`) so that module can opt in.
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cli;
pub mod client;
pub mod cmd;
pub mod config;
pub mod device;
pub mod fuse;
pub mod proto;
pub mod scsi;
pub mod secret;
pub mod session;
pub mod transport;
pub mod url;
