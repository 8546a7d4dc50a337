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
//! use rlun::proto::negotiate::*;
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

use std::collections::{HashMap, HashSet};

use thiserror::Error;

use super::chap::is_security_key;
use super::digest::DigestType;
use super::text::{
    self, bool_value, join_list, parse_bool, parse_list, parse_number, TextError, MAX_VALUE_LEN,
};

/// The iSCSIProtocolLevel this crate implements: RFC 7143 is level 1
/// (RFC 7143 §13.24, RFC 7144).
pub const RFC7143_PROTOCOL_LEVEL: u32 = 1;

/// Largest data segment length / burst length a key may carry: 2^24 - 1
/// (DataSegmentLength is a 24-bit field).
pub const MAX_SEGMENT_LEN: u32 = (1 << 24) - 1;

/// `SessionType` (RFC 7143 §13.21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SessionType {
    #[default]
    Normal,
    Discovery,
}

impl SessionType {
    pub const fn key_value(self) -> &'static str {
        match self {
            SessionType::Normal => "Normal",
            SessionType::Discovery => "Discovery",
        }
    }
}

/// `TaskReporting` values (RFC 7143 §13.23).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TaskReporting {
    /// RFC 3720 semantics (the default).
    #[default]
    Rfc3720,
    /// ResponseFence semantics (RFC 7143 §4.2.2.3.3).
    ResponseFence,
    /// FastAbort multi-task abort semantics (RFC 7143 §4.2.3.4).
    FastAbort,
}

impl TaskReporting {
    pub const fn key_value(self) -> &'static str {
        match self {
            TaskReporting::Rfc3720 => "RFC3720",
            TaskReporting::ResponseFence => "ResponseFence",
            TaskReporting::FastAbort => "FastAbort",
        }
    }

    pub fn from_key_value(v: &str) -> Option<Self> {
        match v {
            "RFC3720" => Some(TaskReporting::Rfc3720),
            "ResponseFence" => Some(TaskReporting::ResponseFence),
            "FastAbort" => Some(TaskReporting::FastAbort),
            _ => None,
        }
    }
}

/// How a key's value is settled (RFC 7143 §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// The acceptor answers with the first value of the offered list that it
    /// supports, or `Reject` (§6.2.1).
    List,
    /// Numerical; the result is the smaller of offer and answer (§6.2.2).
    NumericMin,
    /// Numerical; the result is the larger of offer and answer (§6.2.2).
    NumericMax,
    /// Boolean; the result is offer AND answer (§6.2.2).
    BoolAnd,
    /// Boolean; the result is offer OR answer (§6.2.2).
    BoolOr,
    /// Declared by its sender, never answered (§6.2, §13).
    Declarative,
    /// An RFC 3720 marker key obsoleted by RFC 7143 ("Obsoleted Keys" in
    /// §13), answered `Irrelevant` since markers are off (OFMarkInt,
    /// IFMarkInt). IFMarker/OFMarker are plain AND keys we answer `No`.
    ObsoleteIrrelevant,
    /// Numerical, minimum rule, where 0 means "no limit" and so loses to
    /// every other value (MaxOutstandingUnexpectedPDUs, RFC 7145 §6.3).
    NumericMinZeroUnlimited,
}

/// When a key may be sent ("Use" in RFC 7143 §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// IO: only during login (any connection).
    InitializeOnly,
    /// LO: only during login of the leading connection of a session.
    LeadingOnly,
    /// FFPO: only in full feature phase (Text Requests).
    FullFeatureOnly,
    /// ALL: during login and in full feature phase.
    All,
}

/// Who may send a key ("Senders" in RFC 7143 §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySender {
    Initiator,
    Target,
    Both,
}

/// Where a settled value applies ("Scope" in RFC 7143 §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyScope {
    /// CO: this connection only.
    Connection,
    /// SW: the whole session.
    Session,
}

/// The default a key has when it is not negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDefault {
    Number(u64),
    Bool(bool),
    Text(&'static str),
    /// No default (names, addresses).
    None,
}

/// Every key this crate knows. The discriminant indexes [`KEYS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    HeaderDigest,
    DataDigest,
    MaxConnections,
    SendTargets,
    TargetName,
    InitiatorName,
    TargetAlias,
    InitiatorAlias,
    TargetAddress,
    TargetPortalGroupTag,
    InitialR2T,
    ImmediateData,
    MaxRecvDataSegmentLength,
    MaxBurstLength,
    FirstBurstLength,
    DefaultTime2Wait,
    DefaultTime2Retain,
    MaxOutstandingR2T,
    DataPduInOrder,
    DataSequenceInOrder,
    ErrorRecoveryLevel,
    SessionType,
    TaskReporting,
    IscsiProtocolLevel,
    IfMarker,
    OfMarker,
    IfMarkInt,
    OfMarkInt,
    RdmaExtensions,
    TargetRecvDataSegmentLength,
    InitiatorRecvDataSegmentLength,
    MaxOutstandingUnexpectedPdus,
}

impl Key {
    /// This key's row in [`KEYS`].
    pub fn spec(self) -> &'static KeySpec {
        &KEYS[self as usize]
    }

    /// The key name as sent on the wire.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Looks a key up by its wire name (case-sensitive, RFC 7143 §6.1).
    pub fn from_name(name: &str) -> Option<Key> {
        KEYS.iter().find(|s| s.name == name).map(|s| s.key)
    }
}

/// One row of the key table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub key: Key,
    pub name: &'static str,
    pub kind: KeyKind,
    /// Valid numeric range (numeric keys, numeric declaratives).
    pub range: Option<(u64, u64)>,
    /// Defined values (list keys and enumerated declaratives); empty when
    /// the value is free-form or numeric.
    pub values: &'static [&'static str],
    pub default: KeyDefault,
    pub usage: KeyUse,
    pub sender: KeySender,
    pub scope: KeyScope,
    /// "Irrelevant when: SessionType=Discovery".
    pub irrelevant_in_discovery: bool,
    /// Every implementation must understand it: a `NotUnderstood` answer is
    /// an error (RFC 7143 §6.2: keys of the standard "MUST be supported").
    pub required: bool,
    /// "Irrelevant when: RDMAExtensions=No" (the iSER keys of RFC 7145):
    /// offered only over a direct (RDMA) transport, answered `Irrelevant`
    /// otherwise.
    pub needs_rdma: bool,
    /// Where the key is defined.
    pub reference: &'static str,
}

impl KeySpec {
    /// Only sent on the leading connection of a session (LO).
    pub fn leading_only(&self) -> bool {
        self.usage == KeyUse::LeadingOnly
    }

    /// The settled value applies to the whole session (SW).
    pub fn session_wide(&self) -> bool {
        self.scope == KeyScope::Session
    }
}

const SEG: Option<(u64, u64)> = Some((512, MAX_SEGMENT_LEN as u64));
const DIGESTS: &[&str] = &["CRC32C", "None"];

macro_rules! row {
    ($key:ident, $name:literal, $kind:ident, $range:expr, $values:expr, $default:expr,
     $usage:ident, $sender:ident, $scope:ident, disc_irrelevant: $irr:literal,
     required: $req:literal, $reference:literal) => {
        KeySpec {
            key: Key::$key,
            name: $name,
            kind: KeyKind::$kind,
            range: $range,
            values: $values,
            default: $default,
            usage: KeyUse::$usage,
            sender: KeySender::$sender,
            scope: KeyScope::$scope,
            irrelevant_in_discovery: $irr,
            required: $req,
            needs_rdma: false,
            reference: $reference,
        }
    };
    ($key:ident, $name:literal, $kind:ident, $range:expr, $default:expr,
     $usage:ident, $scope:ident, iser, $reference:literal) => {
        KeySpec {
            needs_rdma: true,
            ..row!($key, $name, $kind, $range, &[], $default, $usage, Both, $scope,
                   disc_irrelevant: true, required: false, $reference)
        }
    };
}

use KeyDefault::{Bool as B, None as NoDefault, Number as N, Text as T};

/// The key table, indexed by [`Key`]. RFC 7143 §13 unless noted; the iSER
/// keys from RFC 7145 §6 (what Linux and libiscsi do with them is in the
/// comments of [`InitiatorProposal`]).
#[rustfmt::skip]
pub static KEYS: [KeySpec; 32] = [
    row!(HeaderDigest, "HeaderDigest", List, None, DIGESTS, T("None"),
         InitializeOnly, Both, Connection, disc_irrelevant: false, required: true, "RFC 7143 §13.1"),
    row!(DataDigest, "DataDigest", List, None, DIGESTS, T("None"),
         InitializeOnly, Both, Connection, disc_irrelevant: false, required: true, "RFC 7143 §13.1"),
    row!(MaxConnections, "MaxConnections", NumericMin, Some((1, 65535)), &[], N(1),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.2"),
    row!(SendTargets, "SendTargets", Declarative, None, &[], NoDefault,
         FullFeatureOnly, Initiator, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.3"),
    row!(TargetName, "TargetName", Declarative, None, &[], NoDefault,
         InitializeOnly, Both, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.4"),
    row!(InitiatorName, "InitiatorName", Declarative, None, &[], NoDefault,
         InitializeOnly, Initiator, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.5"),
    row!(TargetAlias, "TargetAlias", Declarative, None, &[], NoDefault,
         All, Target, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.6"),
    row!(InitiatorAlias, "InitiatorAlias", Declarative, None, &[], NoDefault,
         All, Initiator, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.7"),
    row!(TargetAddress, "TargetAddress", Declarative, None, &[], NoDefault,
         All, Target, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.8"),
    row!(TargetPortalGroupTag, "TargetPortalGroupTag", Declarative, Some((0, 65535)), &[], NoDefault,
         InitializeOnly, Target, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.9"),
    row!(InitialR2T, "InitialR2T", BoolOr, None, &[], B(true),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.10"),
    row!(ImmediateData, "ImmediateData", BoolAnd, None, &[], B(true),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.11"),
    row!(MaxRecvDataSegmentLength, "MaxRecvDataSegmentLength", Declarative, SEG, &[], N(8192),
         All, Both, Connection, disc_irrelevant: false, required: true, "RFC 7143 §13.12"),
    row!(MaxBurstLength, "MaxBurstLength", NumericMin, SEG, &[], N(262_144),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.13"),
    row!(FirstBurstLength, "FirstBurstLength", NumericMin, SEG, &[], N(65_536),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.14"),
    row!(DefaultTime2Wait, "DefaultTime2Wait", NumericMax, Some((0, 3600)), &[], N(2),
         LeadingOnly, Both, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.15"),
    row!(DefaultTime2Retain, "DefaultTime2Retain", NumericMin, Some((0, 3600)), &[], N(20),
         LeadingOnly, Both, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.16"),
    row!(MaxOutstandingR2T, "MaxOutstandingR2T", NumericMin, Some((1, 65535)), &[], N(1),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.17"),
    row!(DataPduInOrder, "DataPDUInOrder", BoolOr, None, &[], B(true),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.18"),
    row!(DataSequenceInOrder, "DataSequenceInOrder", BoolOr, None, &[], B(true),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: true, "RFC 7143 §13.19"),
    row!(ErrorRecoveryLevel, "ErrorRecoveryLevel", NumericMin, Some((0, 2)), &[], N(0),
         LeadingOnly, Both, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.20"),
    row!(SessionType, "SessionType", Declarative, None, &["Discovery", "Normal"], T("Normal"),
         LeadingOnly, Initiator, Session, disc_irrelevant: false, required: true, "RFC 7143 §13.21"),
    row!(TaskReporting, "TaskReporting", List, None, &["RFC3720", "ResponseFence", "FastAbort"], T("RFC3720"),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: false, "RFC 7143 §13.23"),
    row!(IscsiProtocolLevel, "iSCSIProtocolLevel", NumericMin, Some((0, 31)), &[], N(RFC7143_PROTOCOL_LEVEL as u64),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: false, "RFC 7144; RFC 7143 §13.24"),
    row!(IfMarker, "IFMarker", BoolAnd, None, &[], B(false),
         InitializeOnly, Both, Connection, disc_irrelevant: false, required: false, "RFC 3720 App. A.3.1; obsoleted by RFC 7143"),
    row!(OfMarker, "OFMarker", BoolAnd, None, &[], B(false),
         InitializeOnly, Both, Connection, disc_irrelevant: false, required: false, "RFC 3720 App. A.3.1; obsoleted by RFC 7143"),
    row!(IfMarkInt, "IFMarkInt", ObsoleteIrrelevant, None, &[], NoDefault,
         InitializeOnly, Both, Connection, disc_irrelevant: false, required: false, "RFC 3720 App. A.3.2; obsoleted by RFC 7143"),
    row!(OfMarkInt, "OFMarkInt", ObsoleteIrrelevant, None, &[], NoDefault,
         InitializeOnly, Both, Connection, disc_irrelevant: false, required: false, "RFC 3720 App. A.3.2; obsoleted by RFC 7143"),
    // iSER. RDMAExtensions itself is relevant on every normal session (a
    // target may offer it on TCP; AND with our No keeps it off).
    row!(RdmaExtensions, "RDMAExtensions", BoolAnd, None, &[], B(false),
         LeadingOnly, Both, Session, disc_irrelevant: true, required: false, "RFC 7145 §6.3"),
    row!(TargetRecvDataSegmentLength, "TargetRecvDataSegmentLength", NumericMin, SEG, N(8192),
         InitializeOnly, Connection, iser, "RFC 7145 §6.4"),
    row!(InitiatorRecvDataSegmentLength, "InitiatorRecvDataSegmentLength", NumericMin, SEG, N(8192),
         InitializeOnly, Connection, iser, "RFC 7145 §6.5"),
    row!(MaxOutstandingUnexpectedPdus, "MaxOutstandingUnexpectedPDUs", NumericMinZeroUnlimited,
         Some((0, u32::MAX as u64)), N(0),
         LeadingOnly, Session, iser, "RFC 7145 §6.6"),
];

/// The table row for a wire key name, if the key is known.
pub fn key_spec(name: &str) -> Option<&'static KeySpec> {
    Key::from_name(name).map(Key::spec)
}

/// True for private (`X-`) and public (`X#`) extension keys
/// (RFC 7143 §13.22, §6.1 / IANA iSCSI key registry). We support none and
/// answer them `NotUnderstood`.
pub fn is_extension_key(name: &str) -> bool {
    name.starts_with("X-") || name.starts_with("X#")
}

const NOT_UNDERSTOOD: &str = "NotUnderstood";
const IRRELEVANT: &str = "Irrelevant";
const REJECT: &str = "Reject";

fn is_reserved_answer(v: &str) -> bool {
    matches!(v, NOT_UNDERSTOOD | IRRELEVANT | REJECT)
}

/// The negotiated operational parameters of a session and connection.
/// `Default` gives the RFC 7143 §13 defaults, read from [`KEYS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationalParams {
    pub session_type: SessionType,
    pub header_digest: DigestType,
    pub data_digest: DigestType,
    pub max_connections: u32,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    /// What we declared: the largest data segment the target may send us.
    pub max_recv_data_segment_length: u32,
    /// What the target declared (its MaxRecvDataSegmentLength): the largest
    /// data segment we may send it; 8192 when it declared nothing.
    pub max_xmit_data_segment_length: u32,
    pub max_burst_length: u32,
    pub first_burst_length: u32,
    pub default_time2wait: u32,
    pub default_time2retain: u32,
    pub max_outstanding_r2t: u32,
    pub data_pdu_in_order: bool,
    pub data_sequence_in_order: bool,
    pub error_recovery_level: u32,
    pub task_reporting: TaskReporting,
    pub protocol_level: u32,
    /// The target's `TargetAlias`, if it sent one.
    pub target_alias: Option<String>,
    /// The target's `TargetPortalGroupTag`, if it sent one.
    pub target_portal_group_tag: Option<u16>,
    /// iSER-assisted mode (RFC 7145): the target moves SCSI data by RDMA.
    pub rdma_extensions: bool,
    /// iSER: the largest data segment the target may send us (replaces
    /// MaxRecvDataSegmentLength in that direction).
    pub initiator_recv_data_segment_length: u32,
    /// iSER: the largest data segment we may send the target (replaces its
    /// MaxRecvDataSegmentLength).
    pub target_recv_data_segment_length: u32,
    /// iSER: most unexpected PDUs (commands, NOP-Out, TMF, Text, Logout)
    /// outstanding at once; 0 means no limit.
    pub max_outstanding_unexpected_pdus: u32,
}

impl Default for OperationalParams {
    fn default() -> Self {
        let mut p = OperationalParams {
            session_type: SessionType::Normal,
            header_digest: DigestType::None,
            data_digest: DigestType::None,
            max_connections: 0,
            initial_r2t: false,
            immediate_data: false,
            max_recv_data_segment_length: 0,
            max_xmit_data_segment_length: 0,
            max_burst_length: 0,
            first_burst_length: 0,
            default_time2wait: 0,
            default_time2retain: 0,
            max_outstanding_r2t: 0,
            data_pdu_in_order: false,
            data_sequence_in_order: false,
            error_recovery_level: 0,
            task_reporting: TaskReporting::Rfc3720,
            protocol_level: 0,
            target_alias: None,
            target_portal_group_tag: None,
            rdma_extensions: false,
            initiator_recv_data_segment_length: 0,
            target_recv_data_segment_length: 0,
            max_outstanding_unexpected_pdus: 0,
        };
        for spec in &KEYS {
            match spec.default {
                KeyDefault::Number(n) => p.apply(spec.key, Typed::Num(n)),
                KeyDefault::Bool(b) => p.apply(spec.key, Typed::Bool(b)),
                KeyDefault::Text(t) => p.apply(spec.key, Typed::Text(t)),
                KeyDefault::None => {}
            }
        }
        // The one declarative default that applies in both directions.
        p.max_recv_data_segment_length = p.max_xmit_data_segment_length;
        p
    }
}

impl OperationalParams {
    /// The most unsolicited data (immediate plus unsolicited Data-Out) we
    /// may send for one command: `FirstBurstLength`, or 0 when
    /// `InitialR2T=Yes` and `ImmediateData=No` (RFC 7143 §13.14).
    pub fn max_unsolicited_data(&self) -> u32 {
        if self.initial_r2t && !self.immediate_data {
            0
        } else {
            self.first_burst_length
        }
    }

    /// The most immediate data one SCSI Command PDU may carry: 0 without
    /// ImmediateData, else the smaller of FirstBurstLength and the target's
    /// MaxRecvDataSegmentLength (RFC 7143 §13.11, §13.12).
    pub fn max_immediate_data(&self) -> u32 {
        if self.immediate_data {
            self.first_burst_length
                .min(self.max_xmit_data_segment_length)
        } else {
            0
        }
    }

    /// The largest data segment the target may send us: with
    /// RDMAExtensions=Yes InitiatorRecvDataSegmentLength (RFC 7145 §6.5),
    /// else our MaxRecvDataSegmentLength.
    pub fn recv_data_segment_limit(&self) -> u32 {
        if self.rdma_extensions {
            self.initiator_recv_data_segment_length
        } else {
            self.max_recv_data_segment_length
        }
    }

    /// The largest data segment we may send: with RDMAExtensions=Yes
    /// TargetRecvDataSegmentLength (RFC 7145 §6.4), else the target's
    /// MaxRecvDataSegmentLength.
    pub fn xmit_data_segment_limit(&self) -> u32 {
        if self.rdma_extensions {
            self.target_recv_data_segment_length
        } else {
            self.max_xmit_data_segment_length
        }
    }

    /// Stores a value, already validated against the key's rule and range.
    /// This match is the only place that maps keys to fields.
    fn apply(&mut self, key: Key, value: Typed<'_>) {
        let num = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        match (key, value) {
            (Key::HeaderDigest, Typed::Text(t)) => {
                self.header_digest = DigestType::from_key_value(t).unwrap_or(self.header_digest)
            }
            (Key::DataDigest, Typed::Text(t)) => {
                self.data_digest = DigestType::from_key_value(t).unwrap_or(self.data_digest)
            }
            (Key::MaxConnections, Typed::Num(n)) => self.max_connections = num(n),
            (Key::InitialR2T, Typed::Bool(b)) => self.initial_r2t = b,
            (Key::ImmediateData, Typed::Bool(b)) => self.immediate_data = b,
            // Only the target's declaration is applied here; ours is set
            // from the proposal.
            (Key::MaxRecvDataSegmentLength, Typed::Num(n)) => {
                self.max_xmit_data_segment_length = num(n)
            }
            (Key::MaxBurstLength, Typed::Num(n)) => self.max_burst_length = num(n),
            (Key::FirstBurstLength, Typed::Num(n)) => self.first_burst_length = num(n),
            (Key::DefaultTime2Wait, Typed::Num(n)) => self.default_time2wait = num(n),
            (Key::DefaultTime2Retain, Typed::Num(n)) => self.default_time2retain = num(n),
            (Key::MaxOutstandingR2T, Typed::Num(n)) => self.max_outstanding_r2t = num(n),
            (Key::DataPduInOrder, Typed::Bool(b)) => self.data_pdu_in_order = b,
            (Key::DataSequenceInOrder, Typed::Bool(b)) => self.data_sequence_in_order = b,
            (Key::ErrorRecoveryLevel, Typed::Num(n)) => self.error_recovery_level = num(n),
            (Key::SessionType, Typed::Text(t)) => {
                if t == "Discovery" {
                    self.session_type = SessionType::Discovery
                } else {
                    self.session_type = SessionType::Normal
                }
            }
            (Key::TaskReporting, Typed::Text(t)) => {
                self.task_reporting =
                    TaskReporting::from_key_value(t).unwrap_or(self.task_reporting)
            }
            (Key::IscsiProtocolLevel, Typed::Num(n)) => self.protocol_level = num(n),
            (Key::TargetAlias, Typed::Text(t)) => self.target_alias = Some(t.to_owned()),
            (Key::TargetPortalGroupTag, Typed::Num(n)) => {
                self.target_portal_group_tag = u16::try_from(n).ok()
            }
            (Key::RdmaExtensions, Typed::Bool(b)) => self.rdma_extensions = b,
            (Key::TargetRecvDataSegmentLength, Typed::Num(n)) => {
                self.target_recv_data_segment_length = num(n)
            }
            (Key::InitiatorRecvDataSegmentLength, Typed::Num(n)) => {
                self.initiator_recv_data_segment_length = num(n)
            }
            (Key::MaxOutstandingUnexpectedPdus, Typed::Num(n)) => {
                self.max_outstanding_unexpected_pdus = num(n)
            }
            // Keys without a parameter: names, SendTargets, TargetAddress
            // (kept by the negotiator), markers.
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Typed<'a> {
    Num(u64),
    Bool(bool),
    Text(&'a str),
}

/// What the initiator wants; the input to [`Negotiator::new`].
///
/// The defaults suit a fast initiator talking to tgtd or LIO: values under a
/// minimum rule are offered at their maximum so the target's own limit
/// decides (tgtd answers MaxBurstLength=262144, FirstBurstLength=65536),
/// and the boolean offers ask for the faster write path (immediate data,
/// no initial R2T), which the target may still refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitiatorProposal {
    /// HeaderDigest values we accept, most preferred first. Default
    /// `[None, Crc32c]`: no digest, but a target that insists on CRC32C can
    /// have it. Leave out `None` to require digests.
    pub header_digest: Vec<DigestType>,
    /// DataDigest values we accept, most preferred first. Default as
    /// `header_digest`.
    pub data_digest: Vec<DigestType>,
    /// Default 1: this initiator runs one connection per session.
    pub max_connections: u32,
    /// Default `false` (offer InitialR2T=No, OR rule: the target may force
    /// Yes).
    pub initial_r2t: bool,
    /// Default `true` (offer ImmediateData=Yes, AND rule).
    pub immediate_data: bool,
    /// Our declared MaxRecvDataSegmentLength. Default 262144.
    pub max_recv_data_segment_length: u32,
    /// Default 2^24-1, the largest allowed: the target's maximum wins.
    pub max_burst_length: u32,
    /// Default 2^24-1: the target's maximum wins (and stays ≤ its
    /// MaxBurstLength when it follows RFC 7143 §13.14).
    pub first_burst_length: u32,
    /// Default 2 (maximum rule: the target may ask for longer).
    pub default_time2wait: u32,
    /// Default 0 (minimum rule): at ErrorRecoveryLevel 0 tasks are not
    /// reassigned after a connection loss, so nothing needs retaining
    /// (open-iscsi offers the same).
    pub default_time2retain: u32,
    /// Default 1: R2Ts per task outstanding at once (minimum rule).
    pub max_outstanding_r2t: u32,
    /// Default `true` (OR rule: `Yes` is then the result whatever the target
    /// says).
    pub data_pdu_in_order: bool,
    /// Default `true` (OR rule).
    pub data_sequence_in_order: bool,
    /// Default 0 (minimum rule).
    pub error_recovery_level: u32,
    /// `Some(list)`: offer TaskReporting with these values, most preferred
    /// first (must include `Rfc3720`, RFC 7143 §13.23). `None` (default):
    /// do not offer it; accept only RFC3720 if the target offers it.
    pub task_reporting: Option<Vec<TaskReporting>>,
    /// `Some(level)`: offer iSCSIProtocolLevel. `None` (default): do not
    /// offer it (tgtd does not know the key) and answer a target's offer
    /// with at most [`RFC7143_PROTOCOL_LEVEL`].
    pub protocol_level: Option<u32>,
    /// Offer RDMAExtensions=Yes (iSER, RFC 7145 §6.3). Default `false`; the
    /// session driver sets it when its transport moves data directly.
    /// Then, on a normal session, the iSER keys below are offered and
    /// digests, markers and MaxRecvDataSegmentLength are not (iSER has no
    /// digests and its own segment keys: Linux's initiator omits them, LIO
    /// maps its limits from the iSER keys), and a target answering No
    /// fails the login. Ignored in discovery sessions.
    pub rdma_extensions: bool,
    /// iSER: InitiatorRecvDataSegmentLength we offer, the data segment we
    /// can receive (minimum rule). Default 262144, like Linux's initiator;
    /// LIO's default is the same.
    pub initiator_recv_data_segment_length: u32,
    /// iSER: TargetRecvDataSegmentLength we offer (minimum rule). Default
    /// 8192, like Linux's initiator: LIO posts 8192-byte receive buffers.
    pub target_recv_data_segment_length: u32,
    /// iSER: `Some(n)` offers MaxOutstandingUnexpectedPDUs=n (0 = no limit,
    /// else at least 2). Default `None`: not offered (Linux, libiscsi and
    /// LIO never send it).
    pub max_outstanding_unexpected_pdus: Option<u32>,
}

impl Default for InitiatorProposal {
    fn default() -> Self {
        InitiatorProposal {
            header_digest: vec![DigestType::None, DigestType::Crc32c],
            data_digest: vec![DigestType::None, DigestType::Crc32c],
            max_connections: 1,
            initial_r2t: false,
            immediate_data: true,
            max_recv_data_segment_length: 262_144,
            max_burst_length: MAX_SEGMENT_LEN,
            first_burst_length: MAX_SEGMENT_LEN,
            default_time2wait: 2,
            default_time2retain: 0,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: 0,
            task_reporting: None,
            protocol_level: None,
            rdma_extensions: false,
            initiator_recv_data_segment_length: 262_144,
            target_recv_data_segment_length: 8192,
            max_outstanding_unexpected_pdus: None,
        }
    }
}

/// Our side of a key: the value we offer, or answer a target's offer with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ours {
    List(Vec<&'static str>),
    Num(u64),
    Bool(bool),
}

impl Ours {
    fn wire(&self) -> String {
        match self {
            Ours::List(l) => join_list(l),
            Ours::Num(n) => n.to_string(),
            Ours::Bool(b) => bool_value(*b).to_owned(),
        }
    }
}

impl InitiatorProposal {
    /// Our side of a negotiated key; `None` for declarative and unknown keys.
    fn ours(&self, key: Key) -> Option<Ours> {
        let digests = |l: &[DigestType]| Ours::List(l.iter().map(|d| d.key_value()).collect());
        let n = |v: u32| Some(Ours::Num(u64::from(v)));
        match key {
            Key::HeaderDigest => Some(digests(&self.header_digest)),
            Key::DataDigest => Some(digests(&self.data_digest)),
            Key::MaxConnections => n(self.max_connections),
            Key::InitialR2T => Some(Ours::Bool(self.initial_r2t)),
            Key::ImmediateData => Some(Ours::Bool(self.immediate_data)),
            Key::MaxBurstLength => n(self.max_burst_length),
            Key::FirstBurstLength => n(self.first_burst_length),
            Key::DefaultTime2Wait => n(self.default_time2wait),
            Key::DefaultTime2Retain => n(self.default_time2retain),
            Key::MaxOutstandingR2T => n(self.max_outstanding_r2t),
            Key::DataPduInOrder => Some(Ours::Bool(self.data_pdu_in_order)),
            Key::DataSequenceInOrder => Some(Ours::Bool(self.data_sequence_in_order)),
            Key::ErrorRecoveryLevel => n(self.error_recovery_level),
            Key::TaskReporting => Some(Ours::List(match &self.task_reporting {
                Some(list) => list.iter().map(|t| t.key_value()).collect(),
                None => vec![TaskReporting::Rfc3720.key_value()],
            })),
            Key::IscsiProtocolLevel => n(self.protocol_level.unwrap_or(RFC7143_PROTOCOL_LEVEL)),
            Key::RdmaExtensions => Some(Ours::Bool(self.rdma_extensions)),
            Key::TargetRecvDataSegmentLength => n(self.target_recv_data_segment_length),
            Key::InitiatorRecvDataSegmentLength => n(self.initiator_recv_data_segment_length),
            // Not offering it means no limit of ours.
            Key::MaxOutstandingUnexpectedPdus => {
                n(self.max_outstanding_unexpected_pdus.unwrap_or(0))
            }
            // We never want markers (RFC 7143 dropped them).
            Key::IfMarker | Key::OfMarker => Some(Ours::Bool(false)),
            _ => None,
        }
    }

    /// Checks every value against its key's range and the cross-key rules.
    pub fn validate(&self) -> Result<(), NegotiationError> {
        let invalid = |msg: String| Err(NegotiationError::InvalidProposal(msg));
        for (name, list) in [
            ("HeaderDigest", &self.header_digest),
            ("DataDigest", &self.data_digest),
        ] {
            if list.is_empty() {
                return invalid(format!("{name} needs at least one digest type"));
            }
            if list.iter().collect::<HashSet<_>>().len() != list.len() {
                return invalid(format!("{name} lists a digest type twice"));
            }
        }
        if let Some(list) = &self.task_reporting {
            if !list.contains(&TaskReporting::Rfc3720) {
                return invalid(
                    "TaskReporting offers must include RFC3720 (RFC 7143 §13.23)".into(),
                );
            }
            if list.iter().collect::<HashSet<_>>().len() != list.len() {
                return invalid("TaskReporting lists a value twice".into());
            }
        }
        let mut numbers = vec![(
            Key::MaxRecvDataSegmentLength,
            self.max_recv_data_segment_length,
        )];
        for spec in &KEYS {
            if let Some(Ours::Num(v)) = self.ours(spec.key) {
                numbers.push((spec.key, u32::try_from(v).unwrap_or(u32::MAX)));
            }
        }
        for (key, value) in numbers {
            if let Some((min, max)) = key.spec().range {
                if !(min..=max).contains(&u64::from(value)) {
                    return invalid(format!("{}={value} is outside {min}..={max}", key.name()));
                }
            }
        }
        if self.first_burst_length > self.max_burst_length {
            return invalid(format!(
                "FirstBurstLength {} exceeds MaxBurstLength {} (RFC 7143 §13.14)",
                self.first_burst_length, self.max_burst_length
            ));
        }
        if self.max_outstanding_unexpected_pdus == Some(1) {
            return invalid(
                "MaxOutstandingUnexpectedPDUs=1 is not allowed: 0 (no limit) or at least 2 \
                 (RFC 7145 §6.6)"
                    .into(),
            );
        }
        Ok(())
    }
}

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

#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyState {
    /// We sent this value and wait for the answer.
    Offered(String),
    /// Answered, or declared (declarations keep their value to compare
    /// repeats with).
    Done(Option<String>),
}

/// Operational negotiation for the login of one (leading) connection.
/// See the module doc for the protocol flow and rules.
#[derive(Debug, Clone)]
pub struct Negotiator {
    proposal: InitiatorProposal,
    session_type: SessionType,
    params: OperationalParams,
    state: HashMap<Key, KeyState>,
    /// Declaratives we sent (so a reserved answer to them is no offer).
    declared: HashSet<Key>,
    target_addresses: Vec<String>,
}

impl Negotiator {
    /// A negotiator for a new session's leading connection. Fails if the
    /// proposal is invalid ([`InitiatorProposal::validate`]).
    pub fn new(
        proposal: InitiatorProposal,
        session_type: SessionType,
    ) -> Result<Self, NegotiationError> {
        proposal.validate()?;
        let mut proposal = proposal;
        if proposal.rdma_extensions {
            // iSER carries no digests (RFC 7145 §6.1): answer a target's
            // digest offer with None only.
            proposal.header_digest = vec![DigestType::None];
            proposal.data_digest = vec![DigestType::None];
        }
        let params = OperationalParams {
            session_type,
            max_recv_data_segment_length: proposal.max_recv_data_segment_length,
            ..OperationalParams::default()
        };
        Ok(Negotiator {
            proposal,
            session_type,
            params,
            state: HashMap::new(),
            declared: HashSet::new(),
            target_addresses: Vec::new(),
        })
    }

    /// The operational keys to send in our first operational-stage Login
    /// Request, in a fixed order; from now on they count as outstanding
    /// offers. Keys irrelevant to the session type are left out, and so
    /// are keys already settled (the target offered them first). A second
    /// call returns only what was not offered yet (normally nothing).
    ///
    /// Normal session, default proposal:
    /// `HeaderDigest=None,CRC32C DataDigest=None,CRC32C MaxConnections=1
    /// InitialR2T=No ImmediateData=Yes MaxRecvDataSegmentLength=262144
    /// MaxBurstLength=16777215 FirstBurstLength=16777215 DefaultTime2Wait=2
    /// DefaultTime2Retain=0 MaxOutstandingR2T=1 DataPDUInOrder=Yes
    /// DataSequenceInOrder=Yes ErrorRecoveryLevel=0`. A discovery session
    /// sends only the digests, MaxRecvDataSegmentLength, the Time2Wait/Retain
    /// pair and ErrorRecoveryLevel.
    pub fn initial_keys(&mut self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let rdma = self.rdma();
        for spec in &KEYS {
            let key = spec.key;
            if self.state.contains_key(&key) || self.declared.contains(&key) {
                continue;
            }
            if self.session_type == SessionType::Discovery && spec.irrelevant_in_discovery {
                continue;
            }
            if rdma
                && matches!(
                    key,
                    Key::HeaderDigest | Key::DataDigest | Key::MaxRecvDataSegmentLength
                )
            {
                // Unused in iSER-assisted mode; the iSER keys take their place.
                continue;
            }
            if key == Key::MaxRecvDataSegmentLength {
                self.declared.insert(key);
                out.push((
                    spec.name.to_owned(),
                    self.proposal.max_recv_data_segment_length.to_string(),
                ));
                continue;
            }
            let offered = match key {
                Key::TaskReporting => self.proposal.task_reporting.is_some(),
                Key::IscsiProtocolLevel => self.proposal.protocol_level.is_some(),
                Key::IfMarker | Key::OfMarker => false,
                Key::RdmaExtensions => rdma,
                Key::MaxOutstandingUnexpectedPdus => {
                    rdma && self.proposal.max_outstanding_unexpected_pdus.is_some()
                }
                _ => !spec.needs_rdma || rdma,
            };
            if !offered {
                continue;
            }
            if let Some(ours) = self.proposal.ours(key) {
                let value = ours.wire();
                self.state.insert(key, KeyState::Offered(value.clone()));
                out.push((spec.name.to_owned(), value));
            }
        }
        out
    }

    /// Processes the keys of one Login Response (all of its PDUs joined):
    /// checks answers to our offers, records declarations, and returns our
    /// answers to keys the target offered, in the order they came. An empty
    /// result means nothing needs answering. Security keys are skipped.
    /// After an error the login must be abandoned.
    pub fn handle_target_keys(
        &mut self,
        keys: &[(String, String)],
    ) -> Result<Vec<(String, String)>, NegotiationError> {
        let mut seen = HashSet::new();
        let mut reply = Vec::new();
        for (name, value) in keys {
            if is_security_key(name) {
                continue;
            }
            let known = key_spec(name);
            let repeatable = known.is_some_and(|s| s.key == Key::TargetAddress);
            if !repeatable && !seen.insert(name.as_str()) {
                return Err(NegotiationError::DuplicateKey { key: name.clone() });
            }
            match known {
                Some(spec) => {
                    if let Some(answer) = self.handle_known(spec, value)? {
                        reply.push((name.clone(), answer));
                    }
                }
                None => {
                    if is_reserved_answer(value) {
                        return Err(NegotiationError::ReservedValueOffered {
                            key: name.clone(),
                            value: value.clone(),
                        });
                    }
                    reply.push((name.clone(), NOT_UNDERSTOOD.to_owned()));
                }
            }
        }
        Ok(reply)
    }

    /// We ask for iSER-assisted mode (only normal sessions use it).
    fn rdma(&self) -> bool {
        self.proposal.rdma_extensions && self.session_type == SessionType::Normal
    }

    /// True while an offer of ours waits for an answer the target must send.
    pub fn pending(&self) -> bool {
        !self.unanswered().is_empty()
    }

    /// The target's `TargetAlias`, once it declared one.
    pub fn target_alias(&self) -> Option<&str> {
        self.params.target_alias.as_deref()
    }

    /// The target's `TargetPortalGroupTag`, once it declared one.
    pub fn target_portal_group_tag(&self) -> Option<u16> {
        self.params.target_portal_group_tag
    }

    /// `TargetAddress` values the target declared during login, in order.
    pub fn target_addresses(&self) -> &[String] {
        &self.target_addresses
    }

    /// Ends negotiation (the target moved to full feature phase) and returns
    /// the result. Fails if a required answer never came or the result is
    /// inconsistent (FirstBurstLength > MaxBurstLength, RFC 7143 §13.14).
    pub fn finish(mut self) -> Result<OperationalParams, NegotiationError> {
        let unanswered = self.unanswered();
        if !unanswered.is_empty() {
            return Err(NegotiationError::Unanswered {
                keys: unanswered.iter().map(|k| k.name().to_owned()).collect(),
            });
        }
        // Offers whose outcome needs no answer (§6.2.2).
        let implicit: Vec<(Key, bool)> = self
            .state
            .iter()
            .filter_map(|(key, st)| match st {
                KeyState::Offered(v) => parse_bool(v).ok().map(|b| (*key, b)),
                KeyState::Done(_) => None,
            })
            .collect();
        for (key, b) in implicit {
            self.params.apply(key, Typed::Bool(b));
        }
        let p = &self.params;
        if self.proposal.rdma_extensions
            && p.session_type == SessionType::Normal
            && !p.rdma_extensions
        {
            return Err(NegotiationError::RdmaRefused);
        }
        if p.session_type == SessionType::Normal && p.first_burst_length > p.max_burst_length {
            return Err(NegotiationError::Inconsistent(format!(
                "FirstBurstLength {} exceeds MaxBurstLength {}",
                p.first_burst_length, p.max_burst_length
            )));
        }
        Ok(self.params)
    }

    fn unanswered(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .state
            .iter()
            .filter(|(key, st)| match st {
                KeyState::Offered(v) => !answer_optional(key.spec().kind, v),
                KeyState::Done(_) => false,
            })
            .map(|(key, _)| *key)
            .collect();
        keys.sort_by_key(|k| *k as usize);
        keys
    }

    /// Returns our answer, if the key needs one.
    fn handle_known(
        &mut self,
        spec: &'static KeySpec,
        value: &str,
    ) -> Result<Option<String>, NegotiationError> {
        let key = spec.key;
        if spec.sender == KeySender::Initiator {
            // A target may answer our declarations with Irrelevant/NotUnderstood.
            if matches!(value, IRRELEVANT | NOT_UNDERSTOOD) {
                return Ok(None);
            }
            return Err(unexpected(spec, "only an initiator may send"));
        }
        if spec.usage == KeyUse::FullFeatureOnly {
            return Err(unexpected(spec, "is only allowed in full feature phase"));
        }
        match self.state.get(&key).cloned() {
            Some(KeyState::Offered(offered)) => {
                self.handle_answer(spec, &offered, value)?;
                Ok(None)
            }
            Some(KeyState::Done(previous)) => {
                let same = spec.kind == KeyKind::Declarative && previous.as_deref() == Some(value);
                if same {
                    Ok(None)
                } else {
                    Err(NegotiationError::Renegotiation {
                        key: spec.name.to_owned(),
                    })
                }
            }
            None => self.handle_offer(spec, value),
        }
    }

    fn handle_answer(
        &mut self,
        spec: &'static KeySpec,
        offered: &str,
        answer: &str,
    ) -> Result<(), NegotiationError> {
        let key = spec.key;
        self.state.insert(key, KeyState::Done(None));
        let breaks = |rule| NegotiationError::AnswerBreaksRule {
            key: spec.name.to_owned(),
            offered: offered.to_owned(),
            answer: text::excerpt(answer),
            rule,
        };
        match answer {
            NOT_UNDERSTOOD if spec.required => {
                return Err(NegotiationError::NotUnderstood {
                    key: spec.name.to_owned(),
                })
            }
            NOT_UNDERSTOOD | IRRELEVANT => return Ok(()),
            REJECT => {
                if let (KeyKind::List, KeyDefault::Text(default)) = (spec.kind, spec.default) {
                    if !offered.split(',').any(|v| v == default) {
                        return Err(NegotiationError::Rejected {
                            key: spec.name.to_owned(),
                            offered: offered.to_owned(),
                        });
                    }
                }
                return Ok(());
            }
            _ => {}
        }
        match spec.kind {
            KeyKind::List => {
                if !offered.split(',').any(|v| v == answer) {
                    return Err(breaks("the answer must be one of the offered values"));
                }
                self.params.apply(key, Typed::Text(answer));
            }
            KeyKind::NumericMin | KeyKind::NumericMax => {
                let n = parse_in_range(spec, answer)?;
                let ours = parse_number(offered).unwrap_or(n);
                if spec.kind == KeyKind::NumericMin && n > ours {
                    return Err(breaks("a minimum-rule answer may not exceed the offer"));
                }
                if spec.kind == KeyKind::NumericMax && n < ours {
                    return Err(breaks("a maximum-rule answer may not be below the offer"));
                }
                self.params.apply(key, Typed::Num(n));
            }
            KeyKind::NumericMinZeroUnlimited => {
                let n = parse_zero_unlimited(spec, answer)?;
                let ours = parse_number(offered).unwrap_or(0);
                if ours != 0 && (n == 0 || n > ours) {
                    return Err(breaks(
                        "a minimum-rule answer may not exceed the offer (0 means no limit)",
                    ));
                }
                self.params.apply(key, Typed::Num(n));
            }
            KeyKind::BoolAnd | KeyKind::BoolOr => {
                let b = parse_bool(answer).map_err(|e| bad_value(spec, e))?;
                let ours = offered == "Yes";
                if spec.kind == KeyKind::BoolAnd && !ours && b {
                    return Err(breaks("an AND-rule answer to No must be No"));
                }
                if spec.kind == KeyKind::BoolOr && ours && !b {
                    return Err(breaks("an OR-rule answer to Yes must be Yes"));
                }
                self.params.apply(key, Typed::Bool(b));
            }
            // We never offer these, so no answer can arrive.
            KeyKind::Declarative | KeyKind::ObsoleteIrrelevant => {}
        }
        Ok(())
    }

    /// The target offered (or declared) a key we did not offer.
    fn handle_offer(
        &mut self,
        spec: &'static KeySpec,
        value: &str,
    ) -> Result<Option<String>, NegotiationError> {
        let key = spec.key;
        if is_reserved_answer(value) {
            // An answer to one of our declarations (MaxRecvDataSegmentLength).
            if self.declared.contains(&key) {
                if value == NOT_UNDERSTOOD && spec.required {
                    return Err(NegotiationError::NotUnderstood {
                        key: spec.name.to_owned(),
                    });
                }
                return Ok(None);
            }
            return Err(NegotiationError::ReservedValueOffered {
                key: spec.name.to_owned(),
                value: value.to_owned(),
            });
        }
        if self.session_type == SessionType::Discovery && spec.irrelevant_in_discovery
            || spec.needs_rdma && !self.rdma()
        {
            self.state.insert(key, KeyState::Done(None));
            return Ok(Some(IRRELEVANT.to_owned()));
        }
        if spec.kind == KeyKind::Declarative {
            self.record_declaration(spec, value)?;
            return Ok(None);
        }
        self.state.insert(key, KeyState::Done(None));
        let answer = match (spec.kind, self.proposal.ours(key)) {
            (KeyKind::ObsoleteIrrelevant, _) => IRRELEVANT.to_owned(),
            (KeyKind::List, Some(Ours::List(ours))) => {
                let theirs = parse_list(value).map_err(|e| bad_value(spec, e))?;
                match theirs.iter().find(|v| ours.contains(v)) {
                    Some(choice) => {
                        self.params.apply(key, Typed::Text(choice));
                        (*choice).to_owned()
                    }
                    None => REJECT.to_owned(),
                }
            }
            (KeyKind::NumericMin | KeyKind::NumericMax, Some(Ours::Num(ours))) => {
                let n = parse_number(value).map_err(|e| bad_value(spec, e))?;
                match spec.range {
                    Some((min, max)) if !(min..=max).contains(&n) => REJECT.to_owned(),
                    _ => {
                        let result = if spec.kind == KeyKind::NumericMin {
                            n.min(ours)
                        } else {
                            n.max(ours)
                        };
                        self.params.apply(key, Typed::Num(result));
                        result.to_string()
                    }
                }
            }
            (KeyKind::NumericMinZeroUnlimited, Some(Ours::Num(ours))) => {
                match parse_zero_unlimited(spec, value) {
                    Err(NegotiationError::OutOfRange { .. }) => REJECT.to_owned(),
                    Err(e) => return Err(e),
                    Ok(n) => {
                        let result = match (n, ours) {
                            (0, o) => o,
                            (t, 0) => t,
                            (t, o) => t.min(o),
                        };
                        self.params.apply(key, Typed::Num(result));
                        result.to_string()
                    }
                }
            }
            (KeyKind::BoolAnd | KeyKind::BoolOr, Some(Ours::Bool(ours))) => {
                let theirs = parse_bool(value).map_err(|e| bad_value(spec, e))?;
                let result = if spec.kind == KeyKind::BoolAnd {
                    theirs && ours
                } else {
                    theirs || ours
                };
                self.params.apply(key, Typed::Bool(result));
                bool_value(result).to_owned()
            }
            // Every negotiated key has our side in `InitiatorProposal::ours`.
            _ => NOT_UNDERSTOOD.to_owned(),
        };
        Ok(Some(answer))
    }

    fn record_declaration(
        &mut self,
        spec: &'static KeySpec,
        value: &str,
    ) -> Result<(), NegotiationError> {
        if value.len() > MAX_VALUE_LEN {
            return Err(bad_value(
                spec,
                TextError::ValueTooLong {
                    key: spec.name.to_owned(),
                    len: value.len(),
                    max: MAX_VALUE_LEN,
                },
            ));
        }
        match spec.key {
            Key::TargetAddress => {
                TargetAddress::parse(value)?;
                self.target_addresses.push(value.to_owned());
                return Ok(());
            }
            Key::MaxRecvDataSegmentLength | Key::TargetPortalGroupTag => {
                let n = parse_in_range(spec, value)?;
                self.params.apply(spec.key, Typed::Num(n));
            }
            _ => self.params.apply(spec.key, Typed::Text(value)),
        }
        self.state
            .insert(spec.key, KeyState::Done(Some(value.to_owned())));
        Ok(())
    }
}

/// True when RFC 7143 §6.2.2 lets the acceptor skip the answer: AND offered
/// `No`, OR offered `Yes`.
fn answer_optional(kind: KeyKind, offered: &str) -> bool {
    matches!(
        (kind, offered),
        (KeyKind::BoolAnd, "No") | (KeyKind::BoolOr, "Yes")
    )
}

fn unexpected(spec: &KeySpec, reason: &'static str) -> NegotiationError {
    NegotiationError::UnexpectedKey {
        key: spec.name.to_owned(),
        reason,
    }
}

fn bad_value(spec: &KeySpec, source: TextError) -> NegotiationError {
    NegotiationError::BadValue {
        key: spec.name.to_owned(),
        source,
    }
}

/// A MaxOutstandingUnexpectedPDUs value: 0 (no limit) or 2..=2^32-1.
fn parse_zero_unlimited(spec: &KeySpec, value: &str) -> Result<u64, NegotiationError> {
    let n = parse_in_range(spec, value)?;
    if n == 1 {
        return Err(NegotiationError::OutOfRange {
            key: spec.name.to_owned(),
            value: n,
            min: 2,
            max: u32::MAX as u64,
        });
    }
    Ok(n)
}

fn parse_in_range(spec: &KeySpec, value: &str) -> Result<u64, NegotiationError> {
    let n = parse_number(value).map_err(|e| bad_value(spec, e))?;
    if let Some((min, max)) = spec.range {
        if !(min..=max).contains(&n) {
            return Err(NegotiationError::OutOfRange {
                key: spec.name.to_owned(),
                value: n,
                min,
                max,
            });
        }
    }
    Ok(n)
}

/// The declarative keys of a connection's first Login Request
/// (RFC 7143 §6.3, §13.4–§13.7, §13.21): `InitiatorName`, optional
/// `InitiatorAlias`, `TargetName` (required for a normal session, omitted
/// for discovery when `None`) and `SessionType`.
pub fn login_identity_keys(
    initiator_name: &str,
    initiator_alias: Option<&str>,
    target_name: Option<&str>,
    session_type: SessionType,
) -> Vec<(String, String)> {
    let mut keys = vec![(
        Key::InitiatorName.name().to_owned(),
        initiator_name.to_owned(),
    )];
    if let Some(alias) = initiator_alias {
        keys.push((Key::InitiatorAlias.name().to_owned(), alias.to_owned()));
    }
    if let Some(target) = target_name {
        keys.push((Key::TargetName.name().to_owned(), target.to_owned()));
    }
    keys.push((
        Key::SessionType.name().to_owned(),
        session_type.key_value().to_owned(),
    ));
    keys
}

/// iSCSI's well-known TCP port (RFC 7143 §13.8 default).
pub const DEFAULT_PORT: u16 = 3260;

/// A parsed `TargetAddress` value: `host[:port][,portal-group-tag]`, the host
/// a DNS name, an IPv4 address or a bracketed IPv6 address (RFC 7143 §13.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetAddress {
    /// Host without brackets (`::1` for `[::1]`).
    pub host: String,
    /// The port, if given; see [`TargetAddress::port_or_default`].
    pub port: Option<u16>,
    pub portal_group_tag: Option<u16>,
}

/// Back to the wire form: `host[:port][,tag]`, IPv6 hosts in brackets.
impl std::fmt::Display for TargetAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        if let Some(t) = self.portal_group_tag {
            write!(f, ",{t}")?;
        }
        Ok(())
    }
}

impl TargetAddress {
    pub fn parse(value: &str) -> Result<Self, NegotiationError> {
        let bad = |reason| NegotiationError::BadTargetAddress {
            value: text::excerpt(value),
            reason,
        };
        let (hostport, tag) = match value.rsplit_once(',') {
            Some((hp, tag)) => {
                let tag = parse_number(tag)
                    .ok()
                    .and_then(|t| u16::try_from(t).ok())
                    .ok_or_else(|| bad("portal group tag is not a 16-bit number"))?;
                (hp, Some(tag))
            }
            None => (value, None),
        };
        let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            match after {
                "" => (host, None),
                _ => (
                    host,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad("junk after ']'"))?,
                    ),
                ),
            }
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() || host.contains([',', ' ', '[', ']']) {
            return Err(bad("empty or malformed host"));
        }
        let port = match port {
            Some(p) => Some(
                Some(p)
                    .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|p| p.parse::<u16>().ok())
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("port is not a number from 1 to 65535"))?,
            ),
            None => None,
        };
        Ok(TargetAddress {
            host: host.to_owned(),
            port,
            portal_group_tag: tag,
        })
    }

    /// The port, or 3260 when the address gave none.
    pub fn port_or_default(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
}

/// One target of a SendTargets answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredTarget {
    pub name: String,
    /// May be empty: then the target is reached through the portal that
    /// answered (RFC 7143 Appendix C).
    pub addresses: Vec<TargetAddress>,
}

/// Reads the keys of a SendTargets Text Response (RFC 7143 §13.3,
/// Appendix C): each `TargetName` starts a target, the `TargetAddress` keys
/// after it belong to it. Other keys are ignored.
pub fn parse_send_targets(
    keys: &[(String, String)],
) -> Result<Vec<DiscoveredTarget>, NegotiationError> {
    let mut targets: Vec<DiscoveredTarget> = Vec::new();
    for (key, value) in keys {
        match Key::from_name(key) {
            Some(Key::TargetName) => targets.push(DiscoveredTarget {
                name: value.clone(),
                addresses: Vec::new(),
            }),
            Some(Key::TargetAddress) => {
                let target = targets
                    .last_mut()
                    .ok_or(NegotiationError::AddressWithoutTarget)?;
                target.addresses.push(TargetAddress::parse(value)?);
            }
            _ => {}
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_address_displays_in_its_wire_form() {
        for v in [
            "10.0.0.5:3261,1",
            "[fe80::1]:3262,2",
            "[::1]",
            "host.example",
        ] {
            assert_eq!(TargetAddress::parse(v).unwrap().to_string(), v);
        }
    }

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn started(proposal: InitiatorProposal, st: SessionType) -> Negotiator {
        let mut neg = Negotiator::new(proposal, st).unwrap();
        neg.initial_keys();
        neg
    }

    /// What tgtd 1.0.x answers to our default offers: it answers every
    /// negotiated key we sent, in our order, after TargetPortalGroupTag=1,
    /// and declares nothing (its MaxRecvDataSegmentLength is the default
    /// 8192). tgtd's defaults: InitialR2T=Yes, MaxBurstLength=262144,
    /// FirstBurstLength=65536, digests None.
    fn tgtd_reply() -> Vec<(String, String)> {
        kv(&[
            ("TargetPortalGroupTag", "1"),
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("MaxConnections", "1"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "Yes"),
            ("MaxBurstLength", "262144"),
            ("FirstBurstLength", "65536"),
            ("DefaultTime2Wait", "2"),
            ("DefaultTime2Retain", "0"),
            ("MaxOutstandingR2T", "1"),
            ("DataPDUInOrder", "Yes"),
            ("DataSequenceInOrder", "Yes"),
            ("ErrorRecoveryLevel", "0"),
        ])
    }

    #[test]
    fn table_is_indexed_by_key_and_names_are_unique() {
        for (i, spec) in KEYS.iter().enumerate() {
            assert_eq!(spec.key as usize, i, "{} is out of place", spec.name);
            assert_eq!(Key::from_name(spec.name), Some(spec.key));
            if let (Some((min, max)), KeyDefault::Number(d)) = (spec.range, spec.default) {
                assert!(
                    (min..=max).contains(&d),
                    "{} default outside range",
                    spec.name
                );
            }
        }
        let names: HashSet<_> = KEYS.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), KEYS.len());
        assert_eq!(key_spec("maxburstlength"), None, "names are case-sensitive");
    }

    #[test]
    fn table_rows_match_rfc7143_section_13() {
        let mbl = key_spec("MaxBurstLength").unwrap();
        assert_eq!(mbl.kind, KeyKind::NumericMin);
        assert_eq!(mbl.range, Some((512, 16_777_215)));
        assert!(mbl.leading_only() && mbl.session_wide() && mbl.irrelevant_in_discovery);
        let hd = key_spec("HeaderDigest").unwrap();
        assert_eq!((hd.kind, hd.scope), (KeyKind::List, KeyScope::Connection));
        assert!(!hd.irrelevant_in_discovery);
        assert_eq!(
            key_spec("DefaultTime2Wait").unwrap().kind,
            KeyKind::NumericMax
        );
        assert_eq!(key_spec("InitialR2T").unwrap().kind, KeyKind::BoolOr);
        assert_eq!(key_spec("ImmediateData").unwrap().kind, KeyKind::BoolAnd);
        let mrdsl = key_spec("MaxRecvDataSegmentLength").unwrap();
        assert_eq!(
            (mrdsl.kind, mrdsl.usage),
            (KeyKind::Declarative, KeyUse::All)
        );
        assert_eq!(
            key_spec("SendTargets").unwrap().usage,
            KeyUse::FullFeatureOnly
        );
        assert_eq!(key_spec("TargetAlias").unwrap().sender, KeySender::Target);
        assert!(is_extension_key("X-com.example.Foo") && is_extension_key("X#Bar"));
        assert!(!is_extension_key("MaxBurstLength"));
    }

    #[test]
    fn default_params_are_the_rfc_defaults() {
        let p = OperationalParams::default();
        assert_eq!(p.max_burst_length, 262_144);
        assert_eq!(p.first_burst_length, 65_536);
        assert!(p.initial_r2t && p.immediate_data);
        assert_eq!(p.max_outstanding_r2t, 1);
        assert!(p.data_pdu_in_order && p.data_sequence_in_order);
        assert_eq!(p.error_recovery_level, 0);
        assert_eq!((p.default_time2wait, p.default_time2retain), (2, 20));
        assert_eq!(p.max_connections, 1);
        assert_eq!(
            (p.header_digest, p.data_digest),
            (DigestType::None, DigestType::None)
        );
        assert_eq!(p.max_recv_data_segment_length, 8192);
        assert_eq!(p.max_xmit_data_segment_length, 8192);
        assert_eq!(p.task_reporting, TaskReporting::Rfc3720);
        assert_eq!(p.protocol_level, 1);
        assert_eq!(p.session_type, SessionType::Normal);
        assert_eq!(
            (p.target_alias.clone(), p.target_portal_group_tag),
            (None, None)
        );
    }

    #[test]
    fn initial_keys_for_a_normal_session_offer_every_relevant_key() {
        let mut neg = Negotiator::new(InitiatorProposal::default(), SessionType::Normal).unwrap();

        let keys = neg.initial_keys();

        assert_eq!(
            keys,
            kv(&[
                ("HeaderDigest", "None,CRC32C"),
                ("DataDigest", "None,CRC32C"),
                ("MaxConnections", "1"),
                ("InitialR2T", "No"),
                ("ImmediateData", "Yes"),
                ("MaxRecvDataSegmentLength", "262144"),
                ("MaxBurstLength", "16777215"),
                ("FirstBurstLength", "16777215"),
                ("DefaultTime2Wait", "2"),
                ("DefaultTime2Retain", "0"),
                ("MaxOutstandingR2T", "1"),
                ("DataPDUInOrder", "Yes"),
                ("DataSequenceInOrder", "Yes"),
                ("ErrorRecoveryLevel", "0"),
            ])
        );
        assert!(neg.pending());
        assert!(
            neg.initial_keys().is_empty(),
            "a second call offers nothing new"
        );
    }

    #[test]
    fn initial_keys_for_discovery_leave_out_irrelevant_keys() {
        let mut neg =
            Negotiator::new(InitiatorProposal::default(), SessionType::Discovery).unwrap();

        let keys = neg.initial_keys();

        assert_eq!(
            keys,
            kv(&[
                ("HeaderDigest", "None,CRC32C"),
                ("DataDigest", "None,CRC32C"),
                ("MaxRecvDataSegmentLength", "262144"),
                ("DefaultTime2Wait", "2"),
                ("DefaultTime2Retain", "0"),
                ("ErrorRecoveryLevel", "0"),
            ])
        );
    }

    fn iser() -> InitiatorProposal {
        InitiatorProposal {
            rdma_extensions: true,
            ..InitiatorProposal::default()
        }
    }

    /// What LIO answers on an iSER portal (iscsi_target_parameters.c
    /// defaults: InitiatorRecvDataSegmentLength 262144,
    /// TargetRecvDataSegmentLength 8192), to our iSER offer.
    fn lio_iser_reply() -> Vec<(String, String)> {
        kv(&[
            ("TargetPortalGroupTag", "1"),
            ("MaxConnections", "1"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "Yes"),
            ("MaxBurstLength", "262144"),
            ("FirstBurstLength", "65536"),
            ("DefaultTime2Wait", "2"),
            ("DefaultTime2Retain", "0"),
            ("MaxOutstandingR2T", "1"),
            ("DataPDUInOrder", "Yes"),
            ("DataSequenceInOrder", "Yes"),
            ("ErrorRecoveryLevel", "0"),
            ("RDMAExtensions", "Yes"),
            ("TargetRecvDataSegmentLength", "8192"),
            ("InitiatorRecvDataSegmentLength", "262144"),
        ])
    }

    #[test]
    fn iser_keys_are_not_offered_over_tcp() {
        let mut neg = Negotiator::new(InitiatorProposal::default(), SessionType::Normal).unwrap();
        let keys = neg.initial_keys();
        for (k, _) in &keys {
            assert!(
                !key_spec(k).unwrap().needs_rdma && k != "RDMAExtensions",
                "{k}"
            );
        }
    }

    #[test]
    fn iser_offer_replaces_digests_and_max_recv_segment_with_the_iser_keys() {
        let mut neg = Negotiator::new(iser(), SessionType::Normal).unwrap();

        let keys = neg.initial_keys();

        let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        for absent in [
            "HeaderDigest",
            "DataDigest",
            "MaxRecvDataSegmentLength",
            "MaxOutstandingUnexpectedPDUs",
        ] {
            assert!(!names.contains(&absent), "{absent} offered: {names:?}");
        }
        assert!(keys.contains(&("RDMAExtensions".into(), "Yes".into())));
        assert!(keys.contains(&("TargetRecvDataSegmentLength".into(), "8192".into())));
        assert!(keys.contains(&("InitiatorRecvDataSegmentLength".into(), "262144".into())));
    }

    #[test]
    fn iser_exchange_with_lio_settles_the_iser_segment_limits() {
        let proposal = InitiatorProposal {
            target_recv_data_segment_length: 65536,
            ..iser()
        };
        let mut neg = started(proposal, SessionType::Normal);

        let reply = neg.handle_target_keys(&lio_iser_reply()).unwrap();

        assert!(reply.is_empty());
        assert!(!neg.pending());
        let p = neg.finish().unwrap();
        assert!(p.rdma_extensions);
        assert_eq!(p.target_recv_data_segment_length, 8192);
        assert_eq!(p.initiator_recv_data_segment_length, 262_144);
        assert_eq!(p.xmit_data_segment_limit(), 8192);
        assert_eq!(p.recv_data_segment_limit(), 262_144);
        assert_eq!(p.max_outstanding_unexpected_pdus, 0, "default: no limit");
        assert_eq!(p.header_digest, DigestType::None);
    }

    #[test]
    fn iser_segment_answer_above_our_offer_breaks_the_minimum_rule() {
        let mut neg = started(iser(), SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("TargetRecvDataSegmentLength", "65536")]))
            .unwrap_err();
        assert!(
            matches!(err, NegotiationError::AnswerBreaksRule { .. }),
            "{err}"
        );
    }

    #[test]
    fn target_refusing_rdma_extensions_fails_an_iser_login() {
        let mut neg = started(iser(), SessionType::Normal);
        let mut reply = lio_iser_reply();
        reply.retain(|(k, _)| !k.ends_with("RecvDataSegmentLength"));
        for (k, v) in &mut reply {
            if k == "RDMAExtensions" {
                *v = "No".into();
            }
        }
        reply.push(("TargetRecvDataSegmentLength".into(), "Irrelevant".into()));
        reply.push(("InitiatorRecvDataSegmentLength".into(), "Irrelevant".into()));
        neg.handle_target_keys(&reply).unwrap();

        let err = neg.finish().unwrap_err();

        assert!(matches!(err, NegotiationError::RdmaRefused), "{err:?}");
        assert!(err.to_string().contains("RDMAExtensions"), "{err}");
    }

    #[test]
    fn iser_keys_are_not_offered_in_a_discovery_session() {
        let mut neg = Negotiator::new(iser(), SessionType::Discovery).unwrap();
        let keys = neg.initial_keys();
        assert!(
            keys.iter()
                .all(|(k, _)| k != "RDMAExtensions" && !key_spec(k).unwrap().needs_rdma),
            "{keys:?}"
        );
        assert!(
            keys.contains(&("HeaderDigest".into(), "None".into())),
            "{keys:?}"
        );
    }

    #[test]
    fn iser_keys_offered_over_tcp_are_irrelevant_and_rdma_extensions_is_no() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);

        let reply = neg
            .handle_target_keys(&kv(&[
                ("RDMAExtensions", "Yes"),
                ("TargetRecvDataSegmentLength", "8192"),
                ("MaxOutstandingUnexpectedPDUs", "8"),
            ]))
            .unwrap();

        assert_eq!(
            reply,
            kv(&[
                ("RDMAExtensions", "No"),
                ("TargetRecvDataSegmentLength", "Irrelevant"),
                ("MaxOutstandingUnexpectedPDUs", "Irrelevant"),
            ])
        );
    }

    #[test]
    fn max_outstanding_unexpected_pdus_treats_zero_as_no_limit() {
        // Our offer of 16 answered: 8 is fine, 0 (no limit) exceeds it.
        let offer16 = InitiatorProposal {
            max_outstanding_unexpected_pdus: Some(16),
            ..iser()
        };
        let mut neg = started(offer16.clone(), SessionType::Normal);
        assert!(neg
            .handle_target_keys(&kv(&[("MaxOutstandingUnexpectedPDUs", "0")]))
            .is_err());
        let mut neg = started(offer16.clone(), SessionType::Normal);
        neg.handle_target_keys(&kv(&[("MaxOutstandingUnexpectedPDUs", "8")]))
            .unwrap();
        let mut reply = lio_iser_reply();
        reply.retain(|(k, _)| k != "TargetPortalGroupTag");
        neg.handle_target_keys(&reply).unwrap();
        assert_eq!(neg.finish().unwrap().max_outstanding_unexpected_pdus, 8);

        // The target offers first: the smaller non-zero value wins, 1 is
        // not a valid value.
        for (ours, theirs, answer) in [
            (Some(16), "32", "16"),
            (Some(16), "0", "16"),
            (None, "32", "32"),
            (None, "0", "0"),
            (None, "1", "Reject"),
        ] {
            let proposal = InitiatorProposal {
                max_outstanding_unexpected_pdus: ours,
                ..iser()
            };
            let mut neg = Negotiator::new(proposal, SessionType::Normal).unwrap();
            let reply = neg
                .handle_target_keys(&kv(&[("MaxOutstandingUnexpectedPDUs", theirs)]))
                .unwrap();
            assert_eq!(
                reply,
                kv(&[("MaxOutstandingUnexpectedPDUs", answer)]),
                "ours {ours:?}, theirs {theirs}"
            );
        }
    }

    #[test]
    fn proposal_with_one_outstanding_unexpected_pdu_is_invalid() {
        let proposal = InitiatorProposal {
            max_outstanding_unexpected_pdus: Some(1),
            ..iser()
        };
        assert!(matches!(
            Negotiator::new(proposal, SessionType::Normal),
            Err(NegotiationError::InvalidProposal(_))
        ));
    }

    #[test]
    fn iser_rows_follow_rfc7145_section_6() {
        let rdma = key_spec("RDMAExtensions").unwrap();
        assert_eq!(
            (rdma.kind, rdma.default),
            (KeyKind::BoolAnd, KeyDefault::Bool(false))
        );
        assert!(rdma.leading_only() && rdma.session_wide() && !rdma.needs_rdma);
        for name in [
            "TargetRecvDataSegmentLength",
            "InitiatorRecvDataSegmentLength",
        ] {
            let k = key_spec(name).unwrap();
            assert_eq!(k.kind, KeyKind::NumericMin, "{name}");
            assert_eq!(k.range, Some((512, 16_777_215)), "{name}");
            assert_eq!(k.default, KeyDefault::Number(8192), "{name}");
            assert_eq!(k.scope, KeyScope::Connection, "{name}");
            assert!(k.needs_rdma && k.irrelevant_in_discovery, "{name}");
        }
        let mou = key_spec("MaxOutstandingUnexpectedPDUs").unwrap();
        assert_eq!(mou.kind, KeyKind::NumericMinZeroUnlimited);
        assert_eq!(mou.default, KeyDefault::Number(0));
        assert!(mou.leading_only() && mou.needs_rdma);
    }

    #[test]
    fn optional_rfc7144_keys_are_offered_only_when_asked_for() {
        let proposal = InitiatorProposal {
            task_reporting: Some(vec![TaskReporting::FastAbort, TaskReporting::Rfc3720]),
            protocol_level: Some(2),
            ..InitiatorProposal::default()
        };
        let mut neg = Negotiator::new(proposal, SessionType::Normal).unwrap();

        let keys = neg.initial_keys();

        assert!(keys.contains(&("TaskReporting".into(), "FastAbort,RFC3720".into())));
        assert!(keys.contains(&("iSCSIProtocolLevel".into(), "2".into())));
    }

    #[test]
    fn tgtd_exchange_settles_on_tgtd_limits() {
        // Arrange
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        // Act
        let reply = neg.handle_target_keys(&tgtd_reply()).unwrap();
        // Assert
        assert!(reply.is_empty());
        assert!(!neg.pending());
        assert_eq!(neg.target_portal_group_tag(), Some(1));
        let p = neg.finish().unwrap();
        assert_eq!(p.max_burst_length, 262_144);
        assert_eq!(p.first_burst_length, 65_536);
        assert!(p.initial_r2t, "tgtd forces InitialR2T=Yes (OR rule)");
        assert!(p.immediate_data);
        assert_eq!(p.max_recv_data_segment_length, 262_144);
        assert_eq!(p.max_xmit_data_segment_length, 8192);
        assert_eq!(p.default_time2retain, 0);
        assert_eq!(p.target_portal_group_tag, Some(1));
        assert_eq!(p.max_immediate_data(), 8192);
        assert_eq!(p.max_unsolicited_data(), 65_536);
    }

    #[test]
    fn lio_style_exchange_records_declarations() {
        // LIO answers and declares its own MaxRecvDataSegmentLength and alias.
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let mut keys = tgtd_reply();
        keys.retain(|(k, _)| k != "DataPDUInOrder" && k != "DataSequenceInOrder");
        keys.insert(0, ("TargetAlias".into(), "LIO Target".into()));
        keys.push(("MaxRecvDataSegmentLength".into(), "0x10000".into()));

        let reply = neg.handle_target_keys(&keys).unwrap();

        assert!(reply.is_empty());
        assert_eq!(neg.target_alias(), Some("LIO Target"));
        let p = neg.finish().unwrap();
        assert_eq!(p.max_xmit_data_segment_length, 65_536);
        assert!(
            p.data_pdu_in_order && p.data_sequence_in_order,
            "OR offered Yes needs no answer"
        );
        assert_eq!(p.target_alias.as_deref(), Some("LIO Target"));
    }

    #[test]
    fn answers_may_arrive_over_several_responses() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let all = tgtd_reply();
        let (first, second) = all.split_at(5);

        assert!(neg.handle_target_keys(first).unwrap().is_empty());
        assert!(neg.pending());
        assert!(neg.handle_target_keys(second).unwrap().is_empty());
        assert!(!neg.pending());
    }

    #[test]
    fn target_offering_keys_first_gets_answers_by_rule() {
        // Arrange: the target offers keys we did not (or not yet) offer.
        let mut neg = Negotiator::new(InitiatorProposal::default(), SessionType::Normal).unwrap();
        let offers = kv(&[
            ("MaxBurstLength", "65536"),
            ("DefaultTime2Wait", "5"),
            ("InitialR2T", "No"),
            ("ImmediateData", "No"),
            ("HeaderDigest", "CRC32C,None"),
            ("TaskReporting", "FastAbort,RFC3720"),
            ("iSCSIProtocolLevel", "2"),
            ("OFMarker", "Yes"),
            ("OFMarkInt", "2048~2048"),
            ("X-com.example.Turbo", "Yes"),
            ("SomeFutureKey", "1"),
        ]);

        // Act
        let reply = neg.handle_target_keys(&offers).unwrap();

        // Assert: min/max/AND/OR/list rules with our proposal as our side.
        assert_eq!(
            reply,
            kv(&[
                ("MaxBurstLength", "65536"),
                ("DefaultTime2Wait", "5"),
                ("InitialR2T", "No"),
                ("ImmediateData", "No"),
                ("HeaderDigest", "CRC32C"),
                ("TaskReporting", "RFC3720"),
                ("iSCSIProtocolLevel", "1"),
                ("OFMarker", "No"),
                ("OFMarkInt", "Irrelevant"),
                ("X-com.example.Turbo", "NotUnderstood"),
                ("SomeFutureKey", "NotUnderstood"),
            ])
        );
        // Settled keys are not offered again.
        let offered: Vec<String> = neg.initial_keys().into_iter().map(|(k, _)| k).collect();
        assert!(!offered.contains(&"MaxBurstLength".to_string()));
        assert!(!offered.contains(&"HeaderDigest".to_string()));
        assert!(offered.contains(&"FirstBurstLength".to_string()));
        // Answer the rest like a target that accepts our offers.
        let answers: Vec<(String, String)> = vec![
            ("DataDigest", "None"),
            ("MaxConnections", "1"),
            ("FirstBurstLength", "65536"),
            ("DefaultTime2Retain", "0"),
            ("MaxOutstandingR2T", "1"),
            ("ErrorRecoveryLevel", "0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert!(neg.handle_target_keys(&answers).unwrap().is_empty());
        let p = neg.finish().unwrap();
        assert_eq!(p.max_burst_length, 65_536);
        assert_eq!(p.default_time2wait, 5);
        assert!(!p.initial_r2t && !p.immediate_data);
        assert_eq!(p.header_digest, DigestType::Crc32c);
        assert_eq!(p.protocol_level, 1);
        assert_eq!(p.max_unsolicited_data(), 65_536);
        assert_eq!(p.max_immediate_data(), 0);
    }

    #[test]
    fn out_of_range_offer_is_answered_reject() {
        let mut neg = Negotiator::new(InitiatorProposal::default(), SessionType::Normal).unwrap();
        let reply = neg
            .handle_target_keys(&kv(&[("MaxOutstandingR2T", "0"), ("HeaderDigest", "MD5")]))
            .unwrap();
        assert_eq!(
            reply,
            kv(&[("MaxOutstandingR2T", "Reject"), ("HeaderDigest", "Reject")])
        );
    }

    #[test]
    fn discovery_session_answers_irrelevant_keys_with_irrelevant() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Discovery);
        let reply = neg
            .handle_target_keys(&kv(&[("MaxBurstLength", "65536"), ("ImmediateData", "No")]))
            .unwrap();
        assert_eq!(
            reply,
            kv(&[
                ("MaxBurstLength", "Irrelevant"),
                ("ImmediateData", "Irrelevant")
            ])
        );
        assert_eq!(neg.params.max_burst_length, 262_144);
    }

    // ---- answers that break a rule ----

    #[test]
    fn min_rule_answer_above_offer_fails() {
        let proposal = InitiatorProposal {
            max_burst_length: 65_536,
            first_burst_length: 65_536,
            ..InitiatorProposal::default()
        };
        let mut neg = started(proposal, SessionType::Normal);

        let err = neg
            .handle_target_keys(&kv(&[("MaxBurstLength", "262144")]))
            .unwrap_err();

        assert_eq!(
            err,
            NegotiationError::AnswerBreaksRule {
                key: "MaxBurstLength".into(),
                offered: "65536".into(),
                answer: "262144".into(),
                rule: "a minimum-rule answer may not exceed the offer",
            }
        );
        assert!(err.to_string().contains("MaxBurstLength=262144"));
    }

    #[test]
    fn max_rule_answer_below_offer_fails() {
        let proposal = InitiatorProposal {
            default_time2wait: 10,
            ..InitiatorProposal::default()
        };
        let mut neg = started(proposal, SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("DefaultTime2Wait", "2")]))
            .unwrap_err();
        assert!(
            matches!(err, NegotiationError::AnswerBreaksRule { ref key, .. } if key == "DefaultTime2Wait")
        );
    }

    #[test]
    fn and_rule_answer_yes_to_our_no_fails() {
        let proposal = InitiatorProposal {
            immediate_data: false,
            ..InitiatorProposal::default()
        };
        let mut neg = started(proposal, SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("ImmediateData", "Yes")]))
            .unwrap_err();
        assert!(
            matches!(err, NegotiationError::AnswerBreaksRule { ref answer, .. } if answer == "Yes")
        );
    }

    #[test]
    fn and_rule_offer_of_no_needs_no_answer() {
        let proposal = InitiatorProposal {
            immediate_data: false,
            ..InitiatorProposal::default()
        };
        let mut neg = started(proposal, SessionType::Normal);
        let mut reply = tgtd_reply();
        reply.retain(|(k, _)| k != "ImmediateData");

        neg.handle_target_keys(&reply).unwrap();

        assert!(!neg.pending());
        assert!(!neg.finish().unwrap().immediate_data);
    }

    #[test]
    fn or_rule_answer_no_to_our_yes_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("DataPDUInOrder", "No")]))
            .unwrap_err();
        assert!(
            matches!(err, NegotiationError::AnswerBreaksRule { ref key, .. } if key == "DataPDUInOrder")
        );
    }

    #[test]
    fn list_answer_not_among_offered_values_fails() {
        let proposal = InitiatorProposal {
            header_digest: vec![DigestType::None],
            ..InitiatorProposal::default()
        };
        let mut neg = started(proposal, SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("HeaderDigest", "CRC32C")]))
            .unwrap_err();
        assert_eq!(
            err,
            NegotiationError::AnswerBreaksRule {
                key: "HeaderDigest".into(),
                offered: "None".into(),
                answer: "CRC32C".into(),
                rule: "the answer must be one of the offered values",
            }
        );
        // A list echoed back is no single choice either.
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        assert!(neg
            .handle_target_keys(&kv(&[("DataDigest", "None,CRC32C")]))
            .is_err());
    }

    #[test]
    fn answer_outside_key_range_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("MaxBurstLength", "256")]))
            .unwrap_err();
        assert_eq!(
            err,
            NegotiationError::OutOfRange {
                key: "MaxBurstLength".into(),
                value: 256,
                min: 512,
                max: 16_777_215
            }
        );
    }

    #[test]
    fn malformed_answer_fails_with_the_text_error_as_source() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("ImmediateData", "yes")]))
            .unwrap_err();
        assert!(
            matches!(err, NegotiationError::BadValue { ref key, .. } if key == "ImmediateData")
        );
        assert!(std::error::Error::source(&err).is_some());
    }

    // ---- reserved answers (RFC 7143 §6.2) ----

    #[test]
    fn reject_leaves_the_default() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let mut reply = tgtd_reply();
        for (k, v) in reply.iter_mut() {
            if k == "MaxBurstLength" || k == "FirstBurstLength" {
                *v = "Reject".into();
            }
        }
        neg.handle_target_keys(&reply).unwrap();
        let p = neg.finish().unwrap();
        assert_eq!(
            (p.max_burst_length, p.first_burst_length),
            (262_144, 65_536)
        );
    }

    #[test]
    fn reject_of_required_digest_fails() {
        let proposal = InitiatorProposal {
            header_digest: vec![DigestType::Crc32c],
            ..InitiatorProposal::default()
        };
        let mut neg = started(proposal, SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("HeaderDigest", "Reject")]))
            .unwrap_err();
        assert_eq!(
            err,
            NegotiationError::Rejected {
                key: "HeaderDigest".into(),
                offered: "CRC32C".into()
            }
        );
    }

    #[test]
    fn irrelevant_answer_is_accepted() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let mut reply = tgtd_reply();
        for (k, v) in reply.iter_mut() {
            if k == "FirstBurstLength" {
                *v = "Irrelevant".into();
            }
        }
        neg.handle_target_keys(&reply).unwrap();
        assert_eq!(neg.finish().unwrap().first_burst_length, 65_536);
    }

    #[test]
    fn not_understood_for_a_required_key_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("MaxBurstLength", "NotUnderstood")]))
            .unwrap_err();
        assert_eq!(
            err,
            NegotiationError::NotUnderstood {
                key: "MaxBurstLength".into()
            }
        );
    }

    #[test]
    fn not_understood_for_optional_rfc7144_keys_keeps_defaults() {
        // tgtd does not know TaskReporting or iSCSIProtocolLevel.
        let proposal = InitiatorProposal {
            task_reporting: Some(vec![TaskReporting::Rfc3720, TaskReporting::FastAbort]),
            protocol_level: Some(2),
            ..InitiatorProposal::default()
        };
        let mut neg = started(proposal, SessionType::Normal);
        let mut reply = tgtd_reply();
        reply.push(("TaskReporting".into(), "NotUnderstood".into()));
        reply.push(("iSCSIProtocolLevel".into(), "NotUnderstood".into()));

        neg.handle_target_keys(&reply).unwrap();

        let p = neg.finish().unwrap();
        assert_eq!(
            (p.task_reporting, p.protocol_level),
            (TaskReporting::Rfc3720, 1)
        );
    }

    #[test]
    fn reserved_value_for_a_key_we_never_offered_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[("TaskReporting", "Reject")]))
            .unwrap_err();
        assert!(matches!(err, NegotiationError::ReservedValueOffered { .. }));
        let err = neg
            .handle_target_keys(&kv(&[("X-foo", "NotUnderstood")]))
            .unwrap_err();
        assert!(matches!(err, NegotiationError::ReservedValueOffered { .. }));
    }

    #[test]
    fn reserved_answer_to_our_declaration_is_tolerated() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let reply = neg
            .handle_target_keys(&kv(&[
                ("MaxRecvDataSegmentLength", "Irrelevant"),
                ("InitiatorAlias", "NotUnderstood"),
            ]))
            .unwrap();
        assert!(reply.is_empty());
    }

    // ---- protocol errors ----

    #[test]
    fn duplicate_key_in_one_response_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let err = neg
            .handle_target_keys(&kv(&[
                ("MaxBurstLength", "262144"),
                ("MaxBurstLength", "262144"),
            ]))
            .unwrap_err();
        assert_eq!(
            err,
            NegotiationError::DuplicateKey {
                key: "MaxBurstLength".into()
            }
        );
    }

    #[test]
    fn renegotiating_a_settled_key_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        neg.handle_target_keys(&kv(&[("MaxBurstLength", "262144")]))
            .unwrap();
        let err = neg
            .handle_target_keys(&kv(&[("MaxBurstLength", "65536")]))
            .unwrap_err();
        assert!(matches!(err, NegotiationError::Renegotiation { .. }));
    }

    #[test]
    fn repeated_identical_declaration_is_tolerated_but_a_changed_one_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        neg.handle_target_keys(&kv(&[("TargetPortalGroupTag", "1")]))
            .unwrap();
        neg.handle_target_keys(&kv(&[("TargetPortalGroupTag", "1")]))
            .unwrap();
        assert!(neg
            .handle_target_keys(&kv(&[("TargetPortalGroupTag", "2")]))
            .is_err());
    }

    #[test]
    fn initiator_only_and_full_feature_keys_from_the_target_fail() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        for key in ["InitiatorName", "SessionType", "SendTargets"] {
            let err = neg.handle_target_keys(&kv(&[(key, "All")])).unwrap_err();
            assert!(
                matches!(err, NegotiationError::UnexpectedKey { .. }),
                "{key}"
            );
        }
    }

    #[test]
    fn bad_declarations_fail() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        assert!(matches!(
            neg.handle_target_keys(&kv(&[("MaxRecvDataSegmentLength", "16777216")])),
            Err(NegotiationError::OutOfRange { .. })
        ));
        assert!(matches!(
            neg.handle_target_keys(&kv(&[("TargetPortalGroupTag", "70000")])),
            Err(NegotiationError::OutOfRange { .. })
        ));
        let long_alias = "a".repeat(256);
        assert!(matches!(
            neg.handle_target_keys(&kv(&[("TargetAlias", &long_alias)])),
            Err(NegotiationError::BadValue { .. })
        ));
    }

    #[test]
    fn finish_with_unanswered_offers_fails() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        neg.handle_target_keys(&tgtd_reply()[..3]).unwrap();

        let err = neg.finish().unwrap_err();

        assert_eq!(
            err,
            NegotiationError::Unanswered {
                keys: [
                    "MaxConnections",
                    "InitialR2T",
                    "ImmediateData",
                    "MaxBurstLength",
                    "FirstBurstLength",
                    "DefaultTime2Wait",
                    "DefaultTime2Retain",
                    "MaxOutstandingR2T",
                    "ErrorRecoveryLevel"
                ]
                .map(String::from)
                .to_vec()
            }
        );
    }

    #[test]
    fn first_burst_above_max_burst_is_inconsistent() {
        // The target rejects MaxBurstLength (default 262144 stays) but
        // accepts a larger FirstBurstLength.
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        let mut reply = tgtd_reply();
        for (k, v) in reply.iter_mut() {
            match k.as_str() {
                "MaxBurstLength" => *v = "Reject".into(),
                "FirstBurstLength" => *v = "1048576".into(),
                _ => {}
            }
        }
        neg.handle_target_keys(&reply).unwrap();

        let err = neg.finish().unwrap_err();

        assert!(matches!(err, NegotiationError::Inconsistent(_)));
    }

    #[test]
    fn invalid_proposals_are_refused() {
        let cases = [
            InitiatorProposal {
                header_digest: vec![],
                ..InitiatorProposal::default()
            },
            InitiatorProposal {
                max_recv_data_segment_length: 100,
                ..InitiatorProposal::default()
            },
            InitiatorProposal {
                first_burst_length: 1 << 20,
                max_burst_length: 1 << 16,
                ..InitiatorProposal::default()
            },
            InitiatorProposal {
                error_recovery_level: 3,
                ..InitiatorProposal::default()
            },
            InitiatorProposal {
                task_reporting: Some(vec![TaskReporting::FastAbort]),
                ..InitiatorProposal::default()
            },
            InitiatorProposal {
                protocol_level: Some(32),
                ..InitiatorProposal::default()
            },
        ];
        for proposal in cases {
            assert!(
                matches!(
                    Negotiator::new(proposal.clone(), SessionType::Normal),
                    Err(NegotiationError::InvalidProposal(_))
                ),
                "{proposal:?}"
            );
        }
    }

    #[test]
    fn identity_keys_for_normal_and_discovery_sessions() {
        assert_eq!(
            login_identity_keys(
                "iqn.a:init",
                Some("host1"),
                Some("iqn.b:disk"),
                SessionType::Normal
            ),
            kv(&[
                ("InitiatorName", "iqn.a:init"),
                ("InitiatorAlias", "host1"),
                ("TargetName", "iqn.b:disk"),
                ("SessionType", "Normal"),
            ])
        );
        assert_eq!(
            login_identity_keys("iqn.a:init", None, None, SessionType::Discovery),
            kv(&[
                ("InitiatorName", "iqn.a:init"),
                ("SessionType", "Discovery")
            ])
        );
    }

    #[test]
    fn target_addresses_parse_ipv4_ipv6_and_names() {
        assert_eq!(
            TargetAddress::parse("10.0.0.5:3260,1").unwrap(),
            TargetAddress {
                host: "10.0.0.5".into(),
                port: Some(3260),
                portal_group_tag: Some(1)
            }
        );
        assert_eq!(
            TargetAddress::parse("[fe80::1]:3261,2").unwrap(),
            TargetAddress {
                host: "fe80::1".into(),
                port: Some(3261),
                portal_group_tag: Some(2)
            }
        );
        let bare = TargetAddress::parse("storage.example.com").unwrap();
        assert_eq!((bare.port, bare.portal_group_tag), (None, None));
        assert_eq!(bare.port_or_default(), 3260);
        assert_eq!(TargetAddress::parse("[::1]").unwrap().host, "::1");
        for bad in [
            "",
            ":3260",
            "host:",
            "host:99999",
            "host:0",
            "[::1",
            "[::1]x",
            "h,x",
            "a b:1",
        ] {
            assert!(TargetAddress::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn send_targets_response_groups_addresses_by_target() {
        // Arrange: a tgtd SendTargets=All answer for two targets.
        let keys = kv(&[
            ("TargetName", "iqn.2026-11.org.example:disk1"),
            ("TargetAddress", "127.0.0.1:3260,1"),
            ("TargetAddress", "[::1]:3260,1"),
            ("TargetName", "iqn.2026-11.org.example:disk2"),
        ]);
        // Act
        let targets = parse_send_targets(&keys).unwrap();
        // Assert
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].name, "iqn.2026-11.org.example:disk1");
        assert_eq!(targets[0].addresses.len(), 2);
        assert_eq!(targets[0].addresses[1].host, "::1");
        assert!(targets[1].addresses.is_empty());
        assert_eq!(
            parse_send_targets(&kv(&[("TargetAddress", "1.2.3.4")])),
            Err(NegotiationError::AddressWithoutTarget)
        );
    }

    #[test]
    fn security_stage_response_only_yields_the_portal_group_tag() {
        // tgtd's first response when CHAP is on: security keys plus the TPGT.
        let mut neg = Negotiator::new(InitiatorProposal::default(), SessionType::Normal).unwrap();
        let keys = kv(&[
            ("AuthMethod", "CHAP"),
            ("TargetPortalGroupTag", "1"),
            ("CHAP_A", "5"),
            ("CHAP_I", "1"),
            ("CHAP_C", "0x00112233445566778899aabbccddeeff"),
        ]);

        let reply = neg.handle_target_keys(&keys).unwrap();

        assert!(reply.is_empty());
        assert_eq!(neg.target_portal_group_tag(), Some(1));
        assert_eq!(
            neg.initial_keys().len(),
            14,
            "operational offers are untouched"
        );
    }

    #[test]
    fn login_redirect_target_address_is_recorded() {
        let mut neg = started(InitiatorProposal::default(), SessionType::Normal);
        neg.handle_target_keys(&kv(&[("TargetAddress", "10.0.0.6:3260,1")]))
            .unwrap();
        assert_eq!(neg.target_addresses(), ["10.0.0.6:3260,1".to_string()]);
        assert!(neg
            .handle_target_keys(&kv(&[("TargetAddress", "[bad")]))
            .is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn key_name() -> impl Strategy<Value = String> {
            prop_oneof![
                proptest::sample::select(
                    KEYS.iter().map(|s| s.name.to_string()).collect::<Vec<_>>()
                ),
                "[A-Za-z][A-Za-z0-9-]{0,10}",
            ]
        }

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("Yes".to_string()),
                Just("No".to_string()),
                Just("Reject".to_string()),
                Just("Irrelevant".to_string()),
                Just("NotUnderstood".to_string()),
                Just("None,CRC32C".to_string()),
                (0u64..20_000_000).prop_map(|n| n.to_string()),
                "[ -~]{0,12}",
            ]
        }

        proptest! {
            #[test]
            fn arbitrary_target_keys_never_panic(
                rounds in proptest::collection::vec(
                    proptest::collection::vec((key_name(), value()), 0..8), 1..4),
                discovery in any::<bool>(),
            ) {
                let st = if discovery { SessionType::Discovery } else { SessionType::Normal };
                let mut neg = Negotiator::new(InitiatorProposal::default(), st).unwrap();
                neg.initial_keys();
                for keys in rounds {
                    if neg.handle_target_keys(&keys).is_err() {
                        return Ok(());
                    }
                }
                if let Ok(p) = neg.finish() {
                    prop_assert!(p.first_burst_length <= p.max_burst_length || discovery);
                }
            }
        }
    }
}
