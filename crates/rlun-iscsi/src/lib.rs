//! rlun-iscsi: a sans-IO iSCSI initiator core (RFC 7143, with the iSER
//! data movement of RFC 7145) and the SCSI commands it carries (SPC-5,
//! SBC-4).
//!
//! It is the protocol half of rlun, a userspace iSCSI/iSER initiator, and
//! knows nothing of rlun's driver, transports or front ends: everything
//! here is usable to build another initiator, or (through the PDU codec
//! and the SCSI types) the target side of tests.
//!
//! # Sans-IO
//!
//! Nothing in this crate opens a socket or a file, reads a clock, draws a
//! random number, spawns a task or blocks (`#![forbid(unsafe_code)]`, no
//! async runtime). The state machines are driven from outside, in the style
//! of quinn-proto and rustls:
//!
//! - **inputs** are `handle_*` calls: a PDU the caller received
//!   ([`Connection::handle_pdu`](proto::connection::Connection::handle_pdu)),
//!   a request from above (`submit`, `abort_task`, …), the passing of time
//!   ([`Connection::handle_timeout`](proto::connection::Connection::handle_timeout));
//!   each one that depends on time takes the current [`Instant`] as an
//!   argument;
//! - **outputs** are polled: `poll_transmit` (PDUs to send, in order),
//!   `poll_event` / `poll_output` (completed tasks, target events, orders
//!   to the driver) and `poll_timeout` (the `Instant` at which
//!   `handle_timeout` wants to be called);
//! - what would need randomness is **passed in**: the ISID
//!   ([`LoginConfig::isid`](proto::login::LoginConfig::isid)) and mutual
//!   CHAP's identifier and challenge
//!   ([`LoginConfig::chap_nonce`](proto::login::LoginConfig::chap_nonce)).
//!
//! So the same code runs over TCP and over RDMA, and a test drives a whole
//! login, a 128-deep command window or a reconnect deterministically, with
//! instants that are a fixed start plus offsets.
//!
//! [`Instant`]: std::time::Instant
//!
//! # Modules
//!
//! Bottom up; a module uses only those below it:
//!
//! | module | what | specification |
//! | --- | --- | --- |
//! | [`error`], [`secret`], [`iobuf`] | error classification and printing; secrets that never print; fixed-address I/O buffers | — |
//! | [`scsi`] | CDB builders, response and sense parsers, the SCSI status → errno mapping | SPC-5, SBC-4 |
//! | [`proto::pdu`] | PDU codec: a typed header per opcode, framing, digests, the encoded form for one vectored write | RFC 7143 §11 |
//! | [`proto::text`] | `key=value` text segments | RFC 7143 §6.1 |
//! | [`proto::digest`] | CRC32C header and data digests | RFC 7143 §13.1, RFC 3385 |
//! | [`proto::idmap`] | tables keyed by the ids the initiator allocates | — |
//! | [`proto::chap`] | CHAP, one-way and mutual | RFC 1994, RFC 7143 §12.1.3 |
//! | [`proto::negotiate`] | the key table, operational negotiation, SendTargets answers | RFC 7143 §6.2, §13; RFC 7145 §6 |
//! | [`proto::connection`] | one connection's full feature phase: command window, task table, data movement, NOP, text, task management, logout | RFC 7143 §4.2, §11; RFC 7145 |
//! | [`proto::login`] | the login phase as a chain of owned states | RFC 7143 §6.3, §11.12, §11.13 |
//! | [`proto::recovery`] | what outlives one connection: kept commands, timeouts, task management escalation, reconnect and logout policy | RFC 7143 §7, §13.15 |
//! | `testing` | canned target PDUs for the tests of crates built on this one (feature `test-utils`) | — |
//!
//! # Data movement
//!
//! [`FeatureParams::data_movement`](proto::connection::FeatureParams::data_movement)
//! says who moves SCSI data, and the transport decides:
//!
//! - [`DataMovement::InBand`](proto::connection::DataMovement::InBand)
//!   (iSCSI on TCP): Data-In PDUs carry read data, which the core checks
//!   and places in the command's read buffer — lent to the receive path so
//!   it reads each payload straight into it
//!   ([`Connection::lend_read_buffer`](proto::connection::Connection::lend_read_buffer)),
//!   or copied from a PDU; write data leaves as immediate data, unsolicited
//!   Data-Out and Data-Out for each R2T, sliced from the caller's buffer
//!   without a copy.
//! - [`DataMovement::Direct`](proto::connection::DataMovement::Direct)
//!   (iSER): the target moves the data by RDMA. `poll_transmit` hands the
//!   transport each SCSI Command with the task's buffers
//!   ([`DirectBuffers`](proto::connection::DirectBuffers)) to register;
//!   the SCSI Response completes the task with the data already in place.
//!
//! In both modes a command's buffers belong to its task until the task
//! ends, whatever happens to the caller meanwhile.
//!
//! # Errors
//!
//! Each layer has its own error type, with messages about its own step
//! and the cause as its `source()`: [`PduError`](proto::pdu::PduError)
//! (a malformed frame), [`LoginError`](proto::login::LoginError),
//! [`NegotiationError`](proto::negotiate::NegotiationError),
//! [`TaskError`](proto::connection::TaskError) (one task failed; the
//! connection goes on), [`ProtocolError`](proto::connection::ProtocolError)
//! (the target broke the protocol or stopped answering: at
//! ErrorRecoveryLevel 0 the connection must go), and
//! [`ScsiError`](scsi::ScsiError) (a command ended with CHECK CONDITION).
//! The errors that cross the crate's edge classify themselves with a
//! `kind()` into one [`ErrorKind`], which keeps apart what an operator must
//! tell apart: the network lost ([`ErrorKind::Unreachable`]), the target
//! refused ([`ErrorKind::Auth`], [`ErrorKind::NotFound`], [`ErrorKind::Io`])
//! and the target misbehaved ([`ErrorKind::Protocol`]).
//! [`error_chain`] prints an error with all its causes on one line.
//!
//! # Example: a login and a READ(10) against canned target PDUs
//!
//! The initiator side is the crate's state machines; the target side is
//! built from the same PDU types, the way a test of an initiator — or a
//! small target — would build it. Every PDU crosses a "wire": encoded to
//! bytes, framed and decoded as a receiver would.
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! use bytes::Bytes;
//! use rlun_iscsi::proto::connection::{
//!     CommandRequest, Connection, DataMovement, Event, FeatureParams, TransmitKind,
//! };
//! use rlun_iscsi::proto::login::{Login, LoginConfig, LoginStep};
//! use rlun_iscsi::proto::negotiate::{InitiatorProposal, SessionType};
//! use rlun_iscsi::proto::pdu::{
//!     self, Bhs, DataIn, Digests, FrameLimits, LoginResponse, Pdu, Residual, ScsiResponse,
//!     Stage, TaskAttr, RESERVED_TAG,
//! };
//! use rlun_iscsi::proto::text::{encode_text, parse_text};
//! use rlun_iscsi::scsi::{cdb, lun_to_bytes, Status};
//!
//! /// Sends `p` over a pretend wire: its bytes, framed and decoded again.
//! fn wire(p: &Pdu) -> Pdu {
//!     let bytes = p.encode(Digests::default()).to_vec();
//!     let limits = FrameLimits::default();
//!     // A receiver learns a PDU's length from its first 48 bytes.
//!     assert_eq!(pdu::frame_length(&bytes[..48], &limits), Ok(Some(bytes.len())));
//!     pdu::decode(Bytes::from(bytes), &limits).expect("a well-formed PDU")
//! }
//!
//! /// What a target answers to `request` (a Login Request): success, with
//! /// `keys`, moving from stage `csg` to `nsg`.
//! fn login_response(
//!     request: &Pdu,
//!     csg: Stage,
//!     nsg: Stage,
//!     stat_sn: u32,
//!     keys: &[(&str, &str)],
//! ) -> Pdu {
//!     let Bhs::LoginRequest(req) = &request.bhs else { panic!("not a Login Request") };
//!     Pdu::with_data(
//!         Bhs::LoginResponse(LoginResponse {
//!             transit: true,
//!             continue_: false,
//!             csg,
//!             nsg,
//!             version_max: 0,
//!             version_active: 0,
//!             isid: req.isid,
//!             tsih: if nsg == Stage::FullFeature { 1 } else { 0 },
//!             itt: req.itt,
//!             stat_sn,
//!             exp_cmd_sn: req.cmd_sn,
//!             max_cmd_sn: req.cmd_sn + 31,
//!             status_class: 0,
//!             status_detail: 0,
//!         }),
//!         Bytes::from(encode_text(keys)),
//!     )
//! }
//!
//! // The caller's clock and randomness: the core reads neither.
//! let now = Instant::now();
//! let isid = [0x80, 0x12, 0x34, 0x56, 0x00, 0x00]; // random-type ISID (RFC 7143 §11.12.5)
//!
//! // ---- Login (RFC 7143 §6.3): no CHAP, so security stage straight to operational.
//! let (login, request) = Login::start(LoginConfig {
//!     initiator_name: "iqn.2026-11.org.example:initiator".into(),
//!     initiator_alias: None,
//!     target_name: Some("iqn.2026-11.org.example:disk1".into()),
//!     session_type: SessionType::Normal,
//!     isid,
//!     tsih: 0,
//!     cid: 0,
//!     cmd_sn: 1,
//!     chap: None,
//!     chap_nonce: None,
//!     proposal: InitiatorProposal::default(),
//! })
//! .expect("a valid configuration");
//! let request = wire(&request);
//! let keys = parse_text(&request.data).expect("login text");
//! assert!(keys.contains(&("AuthMethod".into(), "None".into())));
//!
//! // The target accepts no authentication and moves on to operational negotiation.
//! let answer = login_response(&request, Stage::Security, Stage::Operational, 0, &[
//!     ("AuthMethod", "None"),
//!     ("TargetPortalGroupTag", "1"),
//! ]);
//! let LoginStep::Send { next: login, pdu: request } =
//!     login.handle_response(wire(&answer)).expect("security stage accepted")
//! else {
//!     panic!("the operational stage comes next")
//! };
//! let request = wire(&request);
//! let offered = parse_text(&request.data).expect("login text");
//! assert!(offered.contains(&("MaxBurstLength".into(), "16777215".into())));
//!
//! // It answers every offer the way tgtd does and enters the full feature phase.
//! let answer = login_response(&request, Stage::Operational, Stage::FullFeature, 1, &[
//!     ("HeaderDigest", "None"), ("DataDigest", "None"), ("MaxConnections", "1"),
//!     ("InitialR2T", "Yes"), ("ImmediateData", "Yes"), ("MaxBurstLength", "262144"),
//!     ("FirstBurstLength", "65536"), ("DefaultTime2Wait", "2"), ("DefaultTime2Retain", "0"),
//!     ("MaxOutstandingR2T", "1"), ("DataPDUInOrder", "Yes"), ("DataSequenceInOrder", "Yes"),
//!     ("ErrorRecoveryLevel", "0"),
//! ]);
//! let LoginStep::Complete(logged_in) = login.handle_response(wire(&answer)).expect("login")
//! else {
//!     panic!("the login is complete")
//! };
//! let p = &logged_in.params;
//! assert_eq!((logged_in.tsih, p.max_burst_length, p.first_burst_length), (1, 262144, 65536));
//!
//! // ---- Full feature phase on this connection (RFC 7143 §4.2.5, §11.3–§11.7).
//! let mut conn = Connection::new(
//!     FeatureParams {
//!         immediate_data: p.immediate_data,
//!         initial_r2t: p.initial_r2t,
//!         first_burst_length: p.first_burst_length,
//!         max_burst_length: p.max_burst_length,
//!         max_xmit_data_segment_length: p.xmit_data_segment_limit(),
//!         max_recv_data_segment_length: p.recv_data_segment_limit(),
//!         queue_depth: 32,
//!         nop_interval: Some(Duration::from_secs(5)),
//!         nop_timeout: Duration::from_secs(10),
//!         data_movement: DataMovement::InBand, // a TCP transport
//!     },
//!     logged_in.numbers,
//! );
//! conn.start(now);
//!
//! // READ(10) of one 512-byte block at LBA 0 of LUN 1 (SBC-4 §5.13).
//! let read = cdb::read10(0, 1, 512).expect("fits the CDB");
//! let lun = lun_to_bytes(1);
//! let task = conn.submit(CommandRequest {
//!     lun,
//!     cdb: read.padded(),
//!     data_out: Bytes::new(),
//!     read_len: read.expected_transfer_len(),
//!     attr: TaskAttr::Simple,
//! });
//! let transmit = conn.poll_transmit().expect("the command goes out at once");
//! assert_eq!(transmit.kind, TransmitKind::ScsiCommand);
//! assert!(transmit.direct.is_none(), "in-band: no buffers for the transport");
//! assert!(conn.poll_transmit().is_none());
//! let Bhs::ScsiCommand(command) = wire(&transmit.pdu).bhs else { panic!("a SCSI Command") };
//! assert!(command.read && command.final_ && command.expected_data_transfer_length == 512);
//!
//! // The target sends the block in one Data-In, then a SCSI Response with GOOD status.
//! let block: Vec<u8> = (0..512).map(|i| i as u8).collect();
//! let data_in = Pdu::with_data(
//!     Bhs::DataIn(DataIn {
//!         final_: true,
//!         ack: false,
//!         status_present: false,
//!         residual: Residual::default(),
//!         status: 0,
//!         lun,
//!         itt: command.itt,
//!         ttt: RESERVED_TAG,
//!         stat_sn: 0, // not valid without status
//!         exp_cmd_sn: command.cmd_sn + 1,
//!         max_cmd_sn: command.cmd_sn + 32,
//!         data_sn: 0,
//!         buffer_offset: 0,
//!     }),
//!     Bytes::from(block.clone()),
//! );
//! let response = Pdu::new(Bhs::ScsiResponse(ScsiResponse {
//!     bidi_overflow: false,
//!     bidi_underflow: false,
//!     residual: Residual::default(),
//!     response: 0, // command completed at the target
//!     status: Status::Good.as_u8(),
//!     itt: command.itt,
//!     snack_tag: 0,
//!     stat_sn: command.exp_stat_sn,
//!     exp_cmd_sn: command.cmd_sn + 1,
//!     max_cmd_sn: command.cmd_sn + 32,
//!     exp_data_sn: 1,
//!     bidi_read_residual_count: 0,
//! }));
//! let later = now + Duration::from_millis(1);
//! conn.handle_pdu(wire(&data_in), later).expect("an in-order Data-In");
//! assert!(conn.poll_event().is_none(), "no status yet");
//! conn.handle_pdu(wire(&response), later).expect("a valid SCSI Response");
//!
//! let Some(Event::Command { id, result }) = conn.poll_event() else { panic!("a completion") };
//! let result = result.expect("the target answered");
//! assert_eq!(id, task);
//! assert_eq!(Status::from(result.status), Status::Good);
//! assert_eq!(result.data, block);
//! assert_eq!(conn.outstanding(), 0);
//! // Nothing to send; the keepalive wants to be woken 5 s after the target was last heard.
//! assert!(conn.poll_transmit().is_none());
//! assert_eq!(conn.poll_timeout(), Some(later + Duration::from_secs(5)));
//! ```
#![forbid(unsafe_code)]

pub mod error;
pub mod iobuf;
pub mod proto;
pub mod scsi;
pub mod secret;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

pub use error::{error_chain, ErrorKind};
