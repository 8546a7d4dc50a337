//! What the negotiation tests share: key lists, a started negotiator and
//! the answers real targets (tgtd, LIO on an iSER portal) give to our
//! default offers.

use super::keys::SessionType;
use super::negotiator::Negotiator;
use super::params::InitiatorProposal;

pub(super) fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn started(proposal: InitiatorProposal, st: SessionType) -> Negotiator {
    let mut neg = Negotiator::new(proposal, st).unwrap();
    neg.initial_keys();
    neg
}

/// What tgtd 1.0.x answers to our default offers: it answers every
/// negotiated key we sent, in our order, after TargetPortalGroupTag=1,
/// and declares nothing (its MaxRecvDataSegmentLength is the default
/// 8192). tgtd's defaults: InitialR2T=Yes, MaxBurstLength=262144,
/// FirstBurstLength=65536, digests None.
pub(super) fn tgtd_reply() -> Vec<(String, String)> {
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

pub(super) fn iser() -> InitiatorProposal {
    InitiatorProposal {
        rdma_extensions: true,
        ..InitiatorProposal::default()
    }
}

/// What LIO answers on an iSER portal (iscsi_target_parameters.c
/// defaults: InitiatorRecvDataSegmentLength 262144,
/// TargetRecvDataSegmentLength 8192), to our iSER offer.
pub(super) fn lio_iser_reply() -> Vec<(String, String)> {
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
