//! The two ends of a negotiation: [`OperationalParams`], what a session and
//! connection run with (the RFC 7143 §13 defaults until keys change them),
//! and [`InitiatorProposal`], what we offer — with its checks against each
//! key's range and the cross-key rules (§13.14, RFC 7145 §6.6) — and our
//! side of each negotiated key.

use std::collections::HashSet;

use super::error::NegotiationError;
use super::keys::{
    Key, KeyDefault, SessionType, TaskReporting, KEYS, MAX_SEGMENT_LEN, RFC7143_PROTOCOL_LEVEL,
};
use crate::proto::digest::DigestType;
use crate::proto::text::{bool_value, join_list};

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
    pub(super) fn apply(&mut self, key: Key, value: Typed<'_>) {
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
pub(super) enum Typed<'a> {
    Num(u64),
    Bool(bool),
    Text(&'a str),
}

/// What the initiator wants; the input to
/// [`Negotiator::new`].
///
/// The defaults suit a fast initiator talking to tgtd or LIO: values under a
/// minimum rule are offered at their maximum so the target's own limit
/// decides (tgtd answers MaxBurstLength=262144, FirstBurstLength=65536),
/// and the boolean offers ask for the faster write path (immediate data,
/// no initial R2T), which the target may still refuse.
///
/// [`Negotiator::new`]: crate::proto::negotiate::Negotiator::new
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
pub(super) enum Ours {
    List(Vec<&'static str>),
    Num(u64),
    Bool(bool),
}

impl Ours {
    pub(super) fn wire(&self) -> String {
        match self {
            Ours::List(l) => join_list(l),
            Ours::Num(n) => n.to_string(),
            Ours::Bool(b) => bool_value(*b).to_owned(),
        }
    }
}

impl InitiatorProposal {
    /// Our side of a negotiated key; `None` for declarative and unknown keys.
    pub(super) fn ours(&self, key: Key) -> Option<Ours> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
