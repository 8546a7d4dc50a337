//! The [`Negotiator`]: operational negotiation for one login (RFC 7143
//! §6.2–§6.6), driven by the rows of the key table. It sends our offers,
//! checks the target's answers against each key's rule, answers the
//! target's own offers by the same rule, records declarations and, at the
//! end, hands over the [`OperationalParams`] it settled.

use std::collections::{HashMap, HashSet};

use super::error::NegotiationError;
use super::keys::{
    key_spec, Key, KeyDefault, KeyKind, KeySender, KeySpec, KeyUse, SessionType, KEYS,
};
use super::params::{InitiatorProposal, OperationalParams, Ours, Typed};
use super::send_targets::TargetAddress;
use crate::proto::chap::is_security_key;
use crate::proto::digest::DigestType;
use crate::proto::text::{
    self, bool_value, parse_bool, parse_list, parse_number, TextError, MAX_VALUE_LEN,
};

const NOT_UNDERSTOOD: &str = "NotUnderstood";
const IRRELEVANT: &str = "Irrelevant";
const REJECT: &str = "Reject";

fn is_reserved_answer(v: &str) -> bool {
    matches!(v, NOT_UNDERSTOOD | IRRELEVANT | REJECT)
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::negotiate::*;

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
