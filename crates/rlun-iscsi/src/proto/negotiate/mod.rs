//! Operational parameter negotiation during login (RFC 7143 §6.2–§6.6)
//! and the table of login/text keys (RFC 7143 §13, RFC 7144).
//!
//! Everything the RFC says about a key lives in one row of [`KEYS`]: its
//! negotiation rule ([`KeyKind`]), valid range, default, who may send it,
//! whether it is leading-only / session-wide and whether it is irrelevant in
//! a discovery session. [`Negotiator`] applies those rows; it never
//! special-cases a key by name except to store the result in
//! [`OperationalParams`].
//!
//! # How the login state machine uses it
//!
//! ```
//! use rlun_iscsi::proto::negotiate::*;
//! let mut neg = Negotiator::new(InitiatorProposal::default(), SessionType::Normal).unwrap();
//! // First operational-stage Login Request (identity keys only in the
//! // connection's first request):
//! let mut keys = login_identity_keys("iqn.2026-11.org.example:init", None,
//!                                    Some("iqn.2026-11.org.example:disk1"), SessionType::Normal);
//! keys.extend(neg.initial_keys());
//! // ... send, receive a Login Response, collect its text with TextAccumulator ...
//! let target_keys = vec![
//!     ("TargetPortalGroupTag".to_string(), "1".to_string()),
//!     ("HeaderDigest".into(), "None".into()), ("DataDigest".into(), "None".into()),
//!     ("MaxConnections".into(), "1".into()), ("InitialR2T".into(), "Yes".into()),
//!     ("ImmediateData".into(), "Yes".into()), ("MaxBurstLength".into(), "262144".into()),
//!     ("FirstBurstLength".into(), "65536".into()), ("DefaultTime2Wait".into(), "2".into()),
//!     ("DefaultTime2Retain".into(), "0".into()), ("MaxOutstandingR2T".into(), "1".into()),
//!     ("ErrorRecoveryLevel".into(), "0".into()),
//! ];
//! let reply = neg.handle_target_keys(&target_keys).unwrap();
//! // Send `reply` (answers to keys the target offered) in the next Login
//! // Request if it is not empty; keep exchanging while `neg.pending()`.
//! assert!(reply.is_empty() && !neg.pending());
//! // When the target transits to full feature phase:
//! let params = neg.finish().unwrap();
//! assert_eq!(params.max_burst_length, 262144);
//! assert_eq!(params.max_xmit_data_segment_length, 8192); // target declared nothing
//! ```
//!
//! Feed [`Negotiator::handle_target_keys`] every key of every Login
//! Response, those of security-stage responses included: targets send
//! `TargetPortalGroupTag` in the connection's first response, whatever its
//! stage. Security keys (AuthMethod, CHAP_*, see
//! [`super::chap::is_security_key`]) are skipped there; they belong to
//! [`super::chap::ChapInitiator`].
//!
//! # Rules applied (RFC 7143 §6.2)
//!
//! - Answers to our offers are checked against the key's rule: a list answer
//!   must be one of the values we offered; a minimum-rule answer may not
//!   exceed our offer, a maximum-rule answer may not be below it; an AND
//!   answer may not be `Yes` when we offered `No`, an OR answer not `No` when
//!   we offered `Yes`; numbers must be inside the key's range.
//! - `Reject` and `Irrelevant` leave the key at its default; `Reject` of a
//!   list key fails when that default is not among the values we offered
//!   (e.g. we require CRC32C digests). `NotUnderstood` fails for keys every
//!   implementation must support and leaves the others (TaskReporting,
//!   iSCSIProtocolLevel, obsolete keys) at their default.
//! - Keys the target offers on its own get our answer computed by the same
//!   rule (our proposal is our side of it); out-of-range offers are answered
//!   `Reject`; keys irrelevant to a discovery session are answered
//!   `Irrelevant`; unknown keys, including private `X-` and public `X#`
//!   extension keys, are answered `NotUnderstood`.
//! - Declarative keys (MaxRecvDataSegmentLength, TargetAlias,
//!   TargetPortalGroupTag, TargetAddress) are recorded without an answer.
//! - A key the target sends twice in one response, or again after it was
//!   settled, is a protocol error (§6.2: renegotiation is forbidden). An
//!   identical re-declaration of a declarative key is tolerated.
//! - With AND offered `No` or OR offered `Yes` the target need not answer
//!   (§6.2.2); such offers do not count as [`pending`](Negotiator::pending).
//!
//! # Files
//!
//! Bottom up; each file uses only those above it in this list:
//!
//! - `keys.rs`: the key table — every key's rule, range, default, sender,
//!   scope and reference ([`KEYS`], [`KeySpec`]) — and the identity keys of
//!   a first Login Request ([`login_identity_keys`]);
//! - `error.rs`: [`NegotiationError`];
//! - `params.rs`: what was negotiated ([`OperationalParams`]) and what we
//!   want ([`InitiatorProposal`]);
//! - `send_targets.rs`: `TargetAddress` values and SendTargets answers
//!   ([`TargetAddress`], [`parse_send_targets`]; RFC 7143 §13.8,
//!   Appendix C);
//! - `negotiator.rs`: the [`Negotiator`], which applies the table's rules
//!   to one login's exchange.

mod error;
#[cfg(test)]
mod fixtures;
mod keys;
mod negotiator;
mod params;
mod send_targets;

pub use error::NegotiationError;
pub use keys::{
    is_extension_key, key_spec, login_identity_keys, Key, KeyDefault, KeyKind, KeyScope, KeySender,
    KeySpec, KeyUse, SessionType, TaskReporting, KEYS, MAX_SEGMENT_LEN, RFC7143_PROTOCOL_LEVEL,
};
pub use negotiator::Negotiator;
pub use params::{InitiatorProposal, OperationalParams};
pub use send_targets::{parse_send_targets, DiscoveredTarget, TargetAddress, DEFAULT_PORT};
