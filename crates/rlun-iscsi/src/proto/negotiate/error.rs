//! What can go wrong in operational negotiation (RFC 7143 §6.2): nearly
//! always the target breaking a rule of the exchange, which ends the login.

use thiserror::Error;

use crate::proto::text::TextError;

/// Errors from operational negotiation. Most mean the target broke a rule
/// of RFC 7143 §6.2; the login must then be abandoned (drop the connection).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NegotiationError {
    /// The target answered RDMAExtensions=No on a normal session over
    /// iSER: it refuses iSCSI Extensions for RDMA here (RFC 7145 §6.3).
    #[error("the target refused RDMAExtensions=Yes, which the iSER transport needs (it does not offer iSER for this target; use iscsi:// and its TCP portal)")]
    RdmaRefused,
    #[error("invalid initiator proposal: {0}")]
    InvalidProposal(String),
    #[error("target sent {key} twice in one response")]
    DuplicateKey { key: String },
    #[error("target sent {key}, which {reason}")]
    UnexpectedKey { key: String, reason: &'static str },
    #[error("target sent {key} again after it was settled (renegotiation is forbidden)")]
    Renegotiation { key: String },
    #[error("target sent {key}={value} although we never offered {key}")]
    ReservedValueOffered { key: String, value: String },
    #[error("target answered {key}=NotUnderstood, but every iSCSI target must support {key}")]
    NotUnderstood { key: String },
    #[error("target rejected {key}={offered}, and the default {key} is not acceptable to us")]
    Rejected { key: String, offered: String },
    #[error("target answered {key}={answer} to our offer {key}={offered}: {rule}")]
    AnswerBreaksRule {
        key: String,
        offered: String,
        answer: String,
        rule: &'static str,
    },
    #[error("{key}={value} is outside the valid range {min}..={max}")]
    OutOfRange {
        key: String,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("target sent an invalid value for {key}")]
    BadValue {
        key: String,
        #[source]
        source: TextError,
    },
    #[error("target never answered our offers of {}", keys.join(", "))]
    Unanswered { keys: Vec<String> },
    #[error("negotiated values are inconsistent: {0}")]
    Inconsistent(String),
    #[error("invalid TargetAddress {value:?}: {reason}")]
    BadTargetAddress { value: String, reason: &'static str },
    #[error("SendTargets response has a TargetAddress before any TargetName")]
    AddressWithoutTarget,
}
