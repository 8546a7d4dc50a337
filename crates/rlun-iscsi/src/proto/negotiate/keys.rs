//! The table of login and text keys (RFC 7143 §13, RFC 7144; the iSER keys
//! of RFC 7145 §6): one [`KeySpec`] row per [`Key`] in [`KEYS`] with its
//! negotiation rule, range, default, who may send it and when,
//! whether it is leading-only or session-wide, irrelevant in a discovery
//! session or needs iSER, and the section that defines it; the values of
//! `SessionType` (§13.21) and `TaskReporting` (§13.23), and the declarative
//! identity keys every connection's first Login Request carries (§6.3).

use crate::proto::pdu::MAX_DATA_SEGMENT;

/// The iSCSIProtocolLevel this crate implements: RFC 7143 is level 1
/// (RFC 7143 §13.24, RFC 7144).
pub const RFC7143_PROTOCOL_LEVEL: u32 = 1;

/// Largest data segment length / burst length a key may carry: 2^24 - 1,
/// the largest value of the 24-bit DataSegmentLength field
/// ([`MAX_DATA_SEGMENT`]).
pub const MAX_SEGMENT_LEN: u32 = MAX_DATA_SEGMENT;

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
///
/// [`InitiatorProposal`]: crate::proto::negotiate::InitiatorProposal
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use std::collections::HashSet;

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
}
