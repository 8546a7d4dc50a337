//! Login phase (RFC 7143 §6.3, §11.12, §11.13) as a state machine of owned
//! states: security negotiation → operational negotiation → full feature
//! phase. Each step consumes the old state and returns the next one with the
//! PDU to send, so a finished or failed login cannot be driven further.
//!
//! ```text
//!   Login::start ──► ExpectSecurityRsp ──(CHAP_A/I/C)──► ExpectChapResult
//!                        │ T=1 NSG=1                        │ T=1 NSG=1
//!                        ▼                                  ▼
//!                    ExpectOperationalRsp ──(T=1 NSG=3)──► Complete
//!   any response with Status-Class 1 ──► Redirect;  2 or 3 ──► LoginError
//! ```
//!
//! The text keys of the security stage (AuthMethod, CHAP_*) are handled here;
//! every operational key goes through [`Negotiator`], the one table-driven
//! place that knows the negotiation rule of each key.

use bytes::{Bytes, BytesMut};
use thiserror::Error;

use super::chap::{AuthMethod, ChapError, ChapInitiator, ChapNonce};
use super::connection::SequenceNumbers;
use super::negotiate::{
    InitiatorProposal, NegotiationError, Negotiator, OperationalParams, SessionType,
};
use super::pdu::{Bhs, LoginRequest, LoginResponse, Pdu, Stage};
use super::text::{encode_text, parse_text, TextError};
use crate::error::ErrorKind;
use crate::secret::Secret;

/// CHAP settings for a login (RFC 7143 §12.1.3).
#[derive(Debug, Clone)]
pub struct ChapSettings {
    pub user: String,
    pub secret: Secret,
    /// For mutual CHAP: the name and secret the target must prove it knows.
    pub mutual: Option<(String, Secret)>,
}

/// What to log in to and how.
#[derive(Debug, Clone)]
pub struct LoginConfig {
    pub initiator_name: String,
    pub initiator_alias: Option<String>,
    /// Required for a normal session; `None` for discovery.
    pub target_name: Option<String>,
    pub session_type: SessionType,
    pub isid: [u8; 6],
    /// 0 for a new session; the old TSIH to reinstate one (§6.3.5).
    pub tsih: u16,
    pub cid: u16,
    /// CmdSN of the login request (and of the first command after it).
    pub cmd_sn: u32,
    pub chap: Option<ChapSettings>,
    /// Fresh random identifier and challenge for mutual CHAP, drawn by the
    /// caller (rlun draws it from the OS): the core reads no randomness. Mutual
    /// CHAP fails without one.
    pub chap_nonce: Option<ChapNonce>,
    pub proposal: InitiatorProposal,
}

/// Result of a successful login.
#[derive(Debug, Clone)]
pub struct LoginResult {
    pub tsih: u16,
    pub isid: [u8; 6],
    pub params: OperationalParams,
    pub numbers: SequenceNumbers,
    pub target_alias: Option<String>,
    pub target_portal_group_tag: Option<u16>,
    /// How the security stage ended: `None` when no CHAP was exchanged
    /// (none configured, or a discovery target that chose `None` from our
    /// `CHAP,None` offer).
    pub auth_method: AuthMethod,
}

/// Why a login failed. The variants for status class 2 and 3 carry the
/// RFC 7143 §11.13.5 meaning so the user learns what to fix.
#[derive(Debug, Error)]
pub enum LoginError {
    #[error("authentication failed: the target rejected our CHAP credentials (status 0x0201)")]
    AuthenticationFailed,
    #[error(
        "authorization failure: this initiator is not allowed to access the target (status 0x0202)"
    )]
    NotAuthorized,
    #[error("target not found: the portal does not offer that target name (status 0x0203)")]
    TargetNotFound,
    #[error("target removed: the target is no longer available at this portal (status 0x0204)")]
    TargetRemoved,
    #[error("unsupported iSCSI version (status 0x0205)")]
    UnsupportedVersion,
    #[error("too many connections on this session (status 0x0206)")]
    TooManyConnections,
    #[error("target says a login parameter is missing (status 0x0207)")]
    MissingParameter,
    #[error("target cannot include this connection in the session (status 0x0208)")]
    CannotIncludeInSession,
    #[error("target does not support this session type (status 0x0209)")]
    SessionTypeNotSupported,
    #[error("target says the session does not exist (status 0x020a)")]
    SessionDoesNotExist,
    #[error("target says the login request was invalid (status 0x020b)")]
    InvalidDuringLogin,
    #[error("initiator error reported by the target (status {class:#04x}{detail:02x})")]
    InitiatorError { class: u8, detail: u8 },
    #[error("target error (status 0x0300): the target failed to handle the login")]
    TargetError,
    #[error(
        "service unavailable (status 0x0301): the target is temporarily unable to accept logins"
    )]
    ServiceUnavailable,
    #[error("target out of resources (status 0x0302)")]
    OutOfResources,
    #[error("target error status {class:#04x}{detail:02x}")]
    OtherTargetError { class: u8, detail: u8 },
    #[error("CHAP authentication failed")]
    Chap(#[source] ChapError),
    #[error(
        "target requires authentication ({offered}) but no CHAP credentials were given; set RLUN_CHAP_USER and RLUN_CHAP_SECRET, or use --chap-file or the config file"
    )]
    AuthRequired { offered: String },
    #[error(
        "the target refused AuthMethod=CHAP before any credentials were exchanged \
         (status 0x0201): it does not use CHAP for this target and initiator name; \
         try without credentials"
    )]
    ChapNotAccepted,
    #[error("target chose AuthMethod={0}, which we did not offer")]
    BadAuthMethod(String),
    #[error("operational parameter negotiation failed")]
    Negotiation(#[source] NegotiationError),
    #[error("login text from the target is malformed")]
    Text(#[source] TextError),
    #[error("target broke the login protocol: {0}")]
    Protocol(String),
}

impl LoginError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LoginError::AuthenticationFailed
            | LoginError::NotAuthorized
            | LoginError::AuthRequired { .. }
            | LoginError::ChapNotAccepted
            | LoginError::Chap(_)
            // A target that answers RDMAExtensions=No refuses iSER logins.
            | LoginError::Negotiation(NegotiationError::RdmaRefused) => ErrorKind::Auth,
            LoginError::TargetNotFound | LoginError::TargetRemoved => ErrorKind::NotFound,
            LoginError::Protocol(_)
            | LoginError::Text(_)
            | LoginError::Negotiation(_)
            | LoginError::BadAuthMethod(_) => ErrorKind::Protocol,
            LoginError::UnsupportedVersion
            | LoginError::TooManyConnections
            | LoginError::MissingParameter
            | LoginError::CannotIncludeInSession
            | LoginError::SessionTypeNotSupported
            | LoginError::SessionDoesNotExist
            | LoginError::InvalidDuringLogin
            | LoginError::InitiatorError { .. }
            | LoginError::TargetError
            | LoginError::ServiceUnavailable
            | LoginError::OutOfResources
            | LoginError::OtherTargetError { .. } => ErrorKind::Failure,
        }
    }
}

impl LoginError {
    fn from_status(class: u8, detail: u8) -> LoginError {
        match (class, detail) {
            (2, 0x01) => LoginError::AuthenticationFailed,
            (2, 0x02) => LoginError::NotAuthorized,
            (2, 0x03) => LoginError::TargetNotFound,
            (2, 0x04) => LoginError::TargetRemoved,
            (2, 0x05) => LoginError::UnsupportedVersion,
            (2, 0x06) => LoginError::TooManyConnections,
            (2, 0x07) => LoginError::MissingParameter,
            (2, 0x08) => LoginError::CannotIncludeInSession,
            (2, 0x09) => LoginError::SessionTypeNotSupported,
            (2, 0x0a) => LoginError::SessionDoesNotExist,
            (2, 0x0b) => LoginError::InvalidDuringLogin,
            (2, d) => LoginError::InitiatorError {
                class: 2,
                detail: d,
            },
            (3, 0x00) => LoginError::TargetError,
            (3, 0x01) => LoginError::ServiceUnavailable,
            (3, 0x02) => LoginError::OutOfResources,
            (c, d) => LoginError::OtherTargetError {
                class: c,
                detail: d,
            },
        }
    }

    /// True for failures that may go away by themselves (retry later).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LoginError::ServiceUnavailable | LoginError::OutOfResources | LoginError::TargetError
        )
    }
}

/// What the caller does next.
#[derive(Debug)]
pub enum LoginStep {
    /// Send `pdu`, then feed the response to `next`.
    Send { next: Box<Login>, pdu: Pdu },
    /// Login succeeded: the connection is in the full feature phase.
    Complete(LoginResult),
    /// Status class 1 (§11.13.5): log in at `address` instead
    /// (`host:port[,tpgt]` or `[v6]:port[,tpgt]`).
    Redirect { address: String, permanent: bool },
}

/// States are named for what they wait for (quinn-proto style).
#[allow(clippy::enum_variant_names)]
#[derive(Debug)]
enum State {
    /// First request sent (security stage); waiting for AuthMethod.
    ExpectSecurityRsp,
    /// CHAP_A sent; waiting for CHAP_A/CHAP_I/CHAP_C.
    ExpectChapChallenge(ChapInitiator),
    /// CHAP_N/CHAP_R sent with T=1; waiting for transit (and, for mutual
    /// CHAP, the target's CHAP_N/CHAP_R).
    ExpectChapResult(ChapInitiator),
    /// Operational keys sent; waiting for the target's answers.
    ExpectOperationalRsp,
}

/// A login in progress. See the module docs.
#[derive(Debug)]
pub struct Login {
    cfg: LoginConfig,
    state: State,
    negotiator: Negotiator,
    itt: u32,
    exp_stat_sn: u32,
    /// Text of a response split over several PDUs (C bit), being gathered.
    partial: BytesMut,
    /// Stage of the request we sent last.
    csg: Stage,
    /// Continued responses received since the last complete one.
    continuations: u32,
    /// The method the target chose (None until CHAP is agreed on).
    auth_method: AuthMethod,
}

/// Most login text one Login Response sequence may carry (RFC 7143 §6.1
/// asks for at least 8192 bytes, 64 KiB with long authentication items).
const MAX_LOGIN_TEXT: usize = 64 * 1024;
/// Most continued (C=1) Login Responses in a row: with 8 KiB segments
/// 64 KiB of text takes 8. A target that keeps continuing, with or without
/// text, is cut off here instead of looping until the login timeout.
const MAX_LOGIN_CONTINUATIONS: u32 = 64;

impl Login {
    /// Begin a login: returns the state and the first Login Request to send.
    pub fn start(cfg: LoginConfig) -> Result<(Login, Pdu), LoginError> {
        let negotiator = Negotiator::new(cfg.proposal.clone(), cfg.session_type)
            .map_err(LoginError::Negotiation)?;
        let mut keys: Vec<(String, String)> =
            vec![("InitiatorName".into(), cfg.initiator_name.clone())];
        if let Some(alias) = &cfg.initiator_alias {
            keys.push(("InitiatorAlias".into(), alias.clone()));
        }
        keys.push((
            "SessionType".into(),
            match cfg.session_type {
                SessionType::Discovery => "Discovery".into(),
                SessionType::Normal => "Normal".into(),
            },
        ));
        if let Some(t) = &cfg.target_name {
            keys.push(("TargetName".into(), t.clone()));
        }
        // A normal session with credentials offers only CHAP: offering None
        // too would let a rogue target skip authentication (and mutual CHAP).
        // Discovery offers `CHAP,None`, as iscsiadm does by default: the same
        // credentials serve the portal's targets, and a portal whose
        // discovery needs no CHAP (tgtd's never does) must still answer.
        let transit = cfg.chap.is_none();
        keys.push((
            "AuthMethod".into(),
            match (&cfg.chap, cfg.session_type) {
                (None, _) => "None",
                (Some(_), SessionType::Discovery) => "CHAP,None",
                (Some(_), SessionType::Normal) => "CHAP",
            }
            .into(),
        ));
        let mut login = Login {
            cfg,
            state: State::ExpectSecurityRsp,
            negotiator,
            itt: 0,
            exp_stat_sn: 0,
            partial: BytesMut::new(),
            csg: Stage::Security,
            continuations: 0,
            auth_method: AuthMethod::None,
        };
        let pdu = login.request(Stage::Security, transit, Stage::Operational, &keys);
        Ok((login, pdu))
    }

    fn request(&mut self, csg: Stage, transit: bool, nsg: Stage, keys: &[(String, String)]) -> Pdu {
        self.csg = csg;
        Pdu::with_data(
            Bhs::LoginRequest(LoginRequest {
                transit,
                continue_: false,
                csg,
                nsg: if transit { nsg } else { Stage::Security },
                version_max: 0,
                version_min: 0,
                isid: self.cfg.isid,
                tsih: self.cfg.tsih,
                itt: self.itt,
                cid: self.cfg.cid,
                cmd_sn: self.cfg.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            Bytes::from(encode_text(keys)),
        )
    }

    fn operational_request(&mut self, extra: Vec<(String, String)>) -> Pdu {
        let mut keys = self.negotiator.initial_keys();
        keys.extend(extra);
        self.request(Stage::Operational, true, Stage::FullFeature, &keys)
    }

    /// Feed the target's Login Response.
    pub fn handle_response(mut self, pdu: Pdu) -> Result<LoginStep, LoginError> {
        let h = match pdu.bhs {
            Bhs::LoginResponse(h) => h,
            Bhs::Reject(r) => {
                return Err(LoginError::Protocol(format!(
                    "target rejected the login request: {}",
                    r.reason_text()
                )))
            }
            other => {
                return Err(LoginError::Protocol(format!(
                    "expected a Login Response, got {}",
                    other.opcode()
                )))
            }
        };
        self.check_header(&h)?;
        self.exp_stat_sn = h.stat_sn.wrapping_add(1);
        if h.status_class == 1 {
            let keys = parse_text(&pdu.data).map_err(LoginError::Text)?;
            let address = keys
                .iter()
                .find(|(k, _)| k == "TargetAddress")
                .map(|(_, v)| v.clone())
                .ok_or_else(|| {
                    LoginError::Protocol("redirection without a TargetAddress".into())
                })?;
            return Ok(LoginStep::Redirect {
                address,
                permanent: h.status_detail == 2,
            });
        }
        if h.status_class != 0 {
            let err = LoginError::from_status(h.status_class, h.status_detail);
            if matches!(err, LoginError::AuthenticationFailed) && self.cfg.chap.is_none() {
                // We offered AuthMethod=None and the target refused it.
                return Err(LoginError::AuthRequired {
                    offered: "it refused AuthMethod=None".into(),
                });
            }
            if matches!(err, LoginError::AuthenticationFailed)
                && matches!(self.state, State::ExpectSecurityRsp)
                && self.cfg.session_type == SessionType::Normal
            {
                // Refused at our first request, before CHAP_A: the offer
                // itself (AuthMethod=CHAP) was refused, not our secret.
                return Err(LoginError::ChapNotAccepted);
            }
            return Err(err);
        }
        if self.partial.len() + pdu.data.len() > MAX_LOGIN_TEXT {
            return Err(LoginError::Protocol("login text over 64 KiB".into()));
        }
        self.partial.extend_from_slice(&pdu.data);
        if h.continue_ {
            self.continuations += 1;
            if self.continuations > MAX_LOGIN_CONTINUATIONS {
                return Err(LoginError::Protocol(format!(
                    "login text continued over more than {MAX_LOGIN_CONTINUATIONS} responses"
                )));
            }
            // The target has more text: ask for it with an empty request (§6.3).
            let csg = self.csg;
            let pdu = self.request(csg, false, csg, &[]);
            return Ok(LoginStep::Send {
                next: Box::new(self),
                pdu,
            });
        }
        self.continuations = 0;
        let text = std::mem::take(&mut self.partial);
        let keys = parse_text(&text).map_err(LoginError::Text)?;
        let state = std::mem::replace(&mut self.state, State::ExpectSecurityRsp);
        match state {
            State::ExpectSecurityRsp => self.on_security_rsp(&h, keys),
            State::ExpectChapChallenge(chap) => self.on_chap_challenge(&h, keys, chap),
            State::ExpectChapResult(chap) => self.on_chap_result(&h, keys, chap),
            State::ExpectOperationalRsp => self.on_operational_rsp(&h, keys),
        }
    }

    fn check_header(&mut self, h: &LoginResponse) -> Result<(), LoginError> {
        if h.itt != self.itt {
            return Err(LoginError::Protocol(format!(
                "login response for task tag {:#x}, expected {:#x}",
                h.itt, self.itt
            )));
        }
        if h.status_class == 0 && h.isid != self.cfg.isid {
            return Err(LoginError::Protocol(
                "login response ISID differs from ours".into(),
            ));
        }
        if h.status_class == 0 && h.version_active != 0 {
            return Err(LoginError::UnsupportedVersion);
        }
        Ok(())
    }

    /// Split security keys from operational ones; feed the latter to the negotiator.
    fn absorb_operational(
        &mut self,
        keys: &[(String, String)],
    ) -> Result<Vec<(String, String)>, LoginError> {
        let ops: Vec<(String, String)> = keys
            .iter()
            .filter(|(k, _)| k != "AuthMethod" && !k.starts_with("CHAP_"))
            .cloned()
            .collect();
        self.negotiator
            .handle_target_keys(&ops)
            .map_err(LoginError::Negotiation)
    }

    fn on_security_rsp(
        mut self,
        h: &LoginResponse,
        keys: Vec<(String, String)>,
    ) -> Result<LoginStep, LoginError> {
        let answers = self.absorb_operational(&keys)?;
        let method = keys
            .iter()
            .find(|(k, _)| k == "AuthMethod")
            .map(|(_, v)| v.as_str());
        match (&self.cfg.chap, method) {
            (Some(chap), Some("CHAP")) => {
                let mut initiator =
                    ChapInitiator::new(chap.user.clone(), chap.secret.clone(), chap.mutual.clone())
                        .map_err(LoginError::Chap)?;
                if let Some(nonce) = self.cfg.chap_nonce {
                    initiator = initiator.with_nonce(nonce);
                }
                self.auth_method = AuthMethod::Chap;
                self.state = State::ExpectChapChallenge(initiator);
                let pdu = self.request(
                    Stage::Security,
                    false,
                    Stage::Operational,
                    &[("CHAP_A".to_string(), "5".to_string())],
                );
                Ok(LoginStep::Send {
                    next: Box::new(self),
                    pdu,
                })
            }
            // Discovery offered `CHAP,None` and the target needs no CHAP: it
            // answered None, or (tgtd) left the security stage without
            // answering AuthMethod at all.
            (Some(_), Some("None")) if self.cfg.session_type == SessionType::Discovery => {
                self.after_security(h, answers)
            }
            (Some(_), None) if h.transit && self.cfg.session_type == SessionType::Discovery => {
                self.after_security(h, answers)
            }
            (Some(_), Some(other)) => Err(LoginError::BadAuthMethod(other.to_string())),
            (None, Some(m)) if m != "None" => {
                if m == "Reject" || m == "NotUnderstood" || m == "Irrelevant" {
                    return Err(LoginError::Protocol(format!(
                        "target answered AuthMethod={m}"
                    )));
                }
                Err(LoginError::AuthRequired {
                    offered: format!("AuthMethod={m}"),
                })
            }
            (Some(_), None) if !h.transit => Err(LoginError::Protocol(
                "target did not answer AuthMethod".into(),
            )),
            (Some(_), None) => Err(LoginError::BadAuthMethod("(none given)".into())),
            (None, _) => self.after_security(h, answers),
        }
    }

    fn on_chap_challenge(
        mut self,
        h: &LoginResponse,
        keys: Vec<(String, String)>,
        mut chap: ChapInitiator,
    ) -> Result<LoginStep, LoginError> {
        if h.transit {
            return Err(LoginError::Protocol(
                "target left the security stage before CHAP completed".into(),
            ));
        }
        let answer = chap.handle_challenge(&keys).map_err(LoginError::Chap)?;
        self.state = State::ExpectChapResult(chap);
        let pdu = self.request(Stage::Security, true, Stage::Operational, &answer);
        Ok(LoginStep::Send {
            next: Box::new(self),
            pdu,
        })
    }

    fn on_chap_result(
        mut self,
        h: &LoginResponse,
        keys: Vec<(String, String)>,
        mut chap: ChapInitiator,
    ) -> Result<LoginStep, LoginError> {
        if !h.transit {
            return Err(LoginError::Protocol(
                "target did not finish the security stage after our CHAP response".into(),
            ));
        }
        if self.cfg.chap.as_ref().is_some_and(|c| c.mutual.is_some()) {
            chap.verify_target(&keys).map_err(LoginError::Chap)?;
        }
        let ops: Vec<(String, String)> = keys
            .into_iter()
            .filter(|(k, _)| !k.starts_with("CHAP_"))
            .collect();
        let answers = self.absorb_operational(&ops)?;
        self.after_security(h, answers)
    }

    /// Security stage done (target set T=1): go to operational or straight
    /// to full feature phase if the target chose so.
    fn after_security(
        mut self,
        h: &LoginResponse,
        answers: Vec<(String, String)>,
    ) -> Result<LoginStep, LoginError> {
        if !h.transit {
            // The target wants another round in the security stage (it may
            // have more keys to exchange): keep the stage, answer what it asked.
            let transit = self.cfg.chap.is_none() || self.auth_method == AuthMethod::None;
            let pdu = self.request(Stage::Security, transit, Stage::Operational, &answers);
            return Ok(LoginStep::Send {
                next: Box::new(self),
                pdu,
            });
        }
        if h.nsg == Stage::FullFeature {
            // Allowed only if we asked for it; we never do from security.
            return Err(LoginError::Protocol(
                "target jumped to the full feature phase without operational negotiation".into(),
            ));
        }
        self.state = State::ExpectOperationalRsp;
        let pdu = self.operational_request(answers);
        Ok(LoginStep::Send {
            next: Box::new(self),
            pdu,
        })
    }

    fn on_operational_rsp(
        mut self,
        h: &LoginResponse,
        keys: Vec<(String, String)>,
    ) -> Result<LoginStep, LoginError> {
        let answers = self.absorb_operational(&keys)?;
        if h.transit && h.nsg == Stage::FullFeature && answers.is_empty() {
            let target_alias = self.negotiator.target_alias().map(str::to_string);
            let tpgt = self.negotiator.target_portal_group_tag();
            let params = self.negotiator.finish().map_err(LoginError::Negotiation)?;
            return Ok(LoginStep::Complete(LoginResult {
                tsih: h.tsih,
                isid: self.cfg.isid,
                auth_method: self.auth_method,
                params,
                numbers: SequenceNumbers {
                    cmd_sn: self.cfg.cmd_sn,
                    exp_cmd_sn: h.exp_cmd_sn,
                    max_cmd_sn: h.max_cmd_sn,
                    exp_stat_sn: h.stat_sn.wrapping_add(1),
                },
                target_alias,
                target_portal_group_tag: tpgt,
            }));
        }
        self.state = State::ExpectOperationalRsp;
        let pdu = self.request(Stage::Operational, true, Stage::FullFeature, &answers);
        Ok(LoginStep::Send {
            next: Box::new(self),
            pdu,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::negotiate::NegotiationError;
    use crate::proto::pdu::Bhs;
    use crate::ErrorKind;

    #[test]
    fn login_refusals_are_auth_or_not_found_and_broken_logins_are_protocol() {
        assert_eq!(LoginError::AuthenticationFailed.kind(), ErrorKind::Auth);
        assert_eq!(LoginError::TargetNotFound.kind(), ErrorKind::NotFound);
        assert_eq!(LoginError::Protocol("x".into()).kind(), ErrorKind::Protocol);
        assert_eq!(LoginError::ServiceUnavailable.kind(), ErrorKind::Failure);
        assert_eq!(
            LoginError::Negotiation(NegotiationError::RdmaRefused).kind(),
            ErrorKind::Auth,
            "a target refusing iSER refuses the login"
        );
        assert_eq!(
            LoginError::Negotiation(NegotiationError::Inconsistent("x".into())).kind(),
            ErrorKind::Protocol
        );
    }

    fn cfg(chap: Option<ChapSettings>) -> LoginConfig {
        LoginConfig {
            initiator_name: "iqn.2026-11.org.rlun:test".into(),
            initiator_alias: None,
            target_name: Some("iqn.2026-11.org.example:disk1".into()),
            session_type: SessionType::Normal,
            isid: [0x80, 1, 2, 3, 0, 0],
            tsih: 0,
            cid: 0,
            cmd_sn: 1,
            chap,
            chap_nonce: Some(ChapNonce {
                id: 3,
                challenge: [0x11; 16],
            }),
            proposal: InitiatorProposal::default(),
        }
    }

    fn rsp(transit: bool, csg: Stage, nsg: Stage, stat_sn: u32, keys: &[(&str, &str)]) -> Pdu {
        rsp_status(transit, csg, nsg, stat_sn, keys, 0, 0)
    }

    fn rsp_status(
        transit: bool,
        csg: Stage,
        nsg: Stage,
        stat_sn: u32,
        keys: &[(&str, &str)],
        class: u8,
        detail: u8,
    ) -> Pdu {
        let keys: Vec<(String, String)> = keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Pdu::with_data(
            Bhs::LoginResponse(LoginResponse {
                transit,
                continue_: false,
                csg,
                nsg,
                version_max: 0,
                version_active: 0,
                isid: [0x80, 1, 2, 3, 0, 0],
                tsih: if nsg == Stage::FullFeature { 7 } else { 0 },
                itt: 0,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 32,
                status_class: class,
                status_detail: detail,
            }),
            Bytes::from(encode_text(&keys)),
        )
    }

    fn keys_of(pdu: &Pdu) -> Vec<(String, String)> {
        parse_text(&pdu.data).unwrap()
    }

    fn req(pdu: &Pdu) -> &LoginRequest {
        match &pdu.bhs {
            Bhs::LoginRequest(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn expect_send(step: LoginStep) -> (Login, Pdu) {
        match step {
            LoginStep::Send { next, pdu } => (*next, pdu),
            other => panic!("expected Send, got {other:?}"),
        }
    }

    #[test]
    fn login_without_auth_reaches_full_feature_phase() {
        let (login, first) = Login::start(cfg(None)).unwrap();
        let r = req(&first);
        assert!(r.transit && r.csg == Stage::Security && r.nsg == Stage::Operational);
        let keys = keys_of(&first);
        assert!(keys.contains(&("AuthMethod".into(), "None".into())));
        assert!(keys.contains(&("SessionType".into(), "Normal".into())));

        let step = login
            .handle_response(rsp(
                true,
                Stage::Security,
                Stage::Operational,
                0,
                &[("AuthMethod", "None"), ("TargetPortalGroupTag", "1")],
            ))
            .unwrap();
        let (login, op) = expect_send(step);
        let r = req(&op);
        assert!(r.transit && r.csg == Stage::Operational && r.nsg == Stage::FullFeature);
        assert_eq!(r.exp_stat_sn, 1);

        // A target answer that echoes the RFC defaults for everything we offered.
        let answers: Vec<(String, String)> = keys_of(&op)
            .into_iter()
            .map(|(k, v)| {
                let v = match k.as_str() {
                    "HeaderDigest" | "DataDigest" => "None".to_string(),
                    _ => v.split(',').next().unwrap().to_string(),
                };
                (k, v)
            })
            .collect();
        let refs: Vec<(&str, &str)> = answers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let step = login
            .handle_response(rsp(true, Stage::Operational, Stage::FullFeature, 1, &refs))
            .unwrap();
        match step {
            LoginStep::Complete(res) => {
                assert_eq!(res.tsih, 7);
                assert_eq!(res.numbers.exp_stat_sn, 2);
                assert_eq!(res.numbers.cmd_sn, 1);
                assert_eq!(res.numbers.max_cmd_sn, 32);
                assert_eq!(res.target_portal_group_tag, Some(1));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn target_not_found_status_becomes_a_clear_error() {
        let (login, _) = Login::start(cfg(None)).unwrap();
        let err = login
            .handle_response(rsp_status(
                false,
                Stage::Security,
                Stage::Security,
                0,
                &[],
                2,
                3,
            ))
            .unwrap_err();
        assert!(matches!(err, LoginError::TargetNotFound));
        assert!(err.to_string().contains("target not found"));
    }

    #[test]
    fn each_status_class_maps_to_its_meaning() {
        assert!(matches!(
            LoginError::from_status(2, 1),
            LoginError::AuthenticationFailed
        ));
        assert!(matches!(
            LoginError::from_status(2, 2),
            LoginError::NotAuthorized
        ));
        assert!(matches!(
            LoginError::from_status(3, 2),
            LoginError::OutOfResources
        ));
        assert!(LoginError::from_status(3, 1).is_transient());
        assert!(!LoginError::from_status(2, 1).is_transient());
    }

    #[test]
    fn redirection_yields_the_new_address() {
        let (login, _) = Login::start(cfg(None)).unwrap();
        let step = login
            .handle_response(rsp_status(
                false,
                Stage::Security,
                Stage::Security,
                0,
                &[("TargetAddress", "127.0.0.2:3261,1")],
                1,
                1,
            ))
            .unwrap();
        match step {
            LoginStep::Redirect { address, permanent } => {
                assert_eq!(address, "127.0.0.2:3261,1");
                assert!(!permanent);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn target_demanding_chap_without_credentials_is_auth_required() {
        let (login, _) = Login::start(cfg(None)).unwrap();
        let err = login
            .handle_response(rsp(
                false,
                Stage::Security,
                Stage::Security,
                0,
                &[("AuthMethod", "CHAP")],
            ))
            .unwrap_err();
        assert!(matches!(err, LoginError::AuthRequired { .. }), "{err}");
    }

    #[test]
    fn chap_login_sends_algorithm_then_response_with_transit() {
        let chap = ChapSettings {
            user: "alice".into(),
            secret: Secret::new("alice-secret-123"),
            mutual: None,
        };
        let (login, first) = Login::start(cfg(Some(chap))).unwrap();
        assert!(!req(&first).transit, "CHAP needs more than one round");
        assert!(keys_of(&first).contains(&("AuthMethod".into(), "CHAP".into())));
        let (login, a) = expect_send(
            login
                .handle_response(rsp(
                    false,
                    Stage::Security,
                    Stage::Security,
                    0,
                    &[("AuthMethod", "CHAP")],
                ))
                .unwrap(),
        );
        assert_eq!(keys_of(&a), vec![("CHAP_A".to_string(), "5".to_string())]);
        let (login, n_r) = expect_send(
            login
                .handle_response(rsp(
                    false,
                    Stage::Security,
                    Stage::Security,
                    1,
                    &[
                        ("CHAP_A", "5"),
                        ("CHAP_I", "7"),
                        ("CHAP_C", "0x0102030405060708090a0b0c0d0e0f10"),
                    ],
                ))
                .unwrap(),
        );
        let r = req(&n_r);
        assert!(r.transit && r.nsg == Stage::Operational);
        let keys = keys_of(&n_r);
        assert!(keys.contains(&("CHAP_N".into(), "alice".into())));
        let resp = &keys.iter().find(|(k, _)| k == "CHAP_R").unwrap().1;
        let expected = crate::proto::chap::chap_response(
            7,
            b"alice-secret-123",
            &(1..=16).collect::<Vec<u8>>(),
        );
        let hex: String = expected.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(resp.to_lowercase(), format!("0x{hex}"));
        // Target accepts: on to operational negotiation.
        let (_, op) = expect_send(
            login
                .handle_response(rsp(true, Stage::Security, Stage::Operational, 2, &[]))
                .unwrap(),
        );
        assert_eq!(req(&op).csg, Stage::Operational);
    }

    fn alice() -> Option<ChapSettings> {
        Some(ChapSettings {
            user: "alice".into(),
            secret: Secret::new("alice-secret-123"),
            mutual: None,
        })
    }

    fn discovery(chap: Option<ChapSettings>) -> LoginConfig {
        LoginConfig {
            target_name: None,
            session_type: SessionType::Discovery,
            ..cfg(chap)
        }
    }

    #[test]
    fn discovery_with_credentials_offers_chap_or_none_and_takes_none() {
        let (login, first) = Login::start(discovery(alice())).unwrap();
        assert!(keys_of(&first).contains(&("AuthMethod".into(), "CHAP,None".into())));
        // tgtd: straight to operational, AuthMethod not even answered.
        let (login, op) = expect_send(
            login
                .handle_response(rsp(true, Stage::Security, Stage::Operational, 0, &[]))
                .unwrap(),
        );
        assert_eq!(req(&op).csg, Stage::Operational);
        assert_eq!(login.auth_method, AuthMethod::None);
        // A target that answers None but wants another security round is
        // answered with transit (no CHAP follows).
        let (login, _) = Login::start(discovery(alice())).unwrap();
        let (_, again) = expect_send(
            login
                .handle_response(rsp(
                    false,
                    Stage::Security,
                    Stage::Security,
                    0,
                    &[("AuthMethod", "None")],
                ))
                .unwrap(),
        );
        assert!(req(&again).transit);
        // And one that picks CHAP gets the CHAP exchange.
        let (login, _) = Login::start(discovery(alice())).unwrap();
        let (login, a) = expect_send(
            login
                .handle_response(rsp(
                    false,
                    Stage::Security,
                    Stage::Security,
                    0,
                    &[("AuthMethod", "CHAP")],
                ))
                .unwrap(),
        );
        assert_eq!(keys_of(&a), vec![("CHAP_A".to_string(), "5".to_string())]);
        assert_eq!(login.auth_method, AuthMethod::Chap);
    }

    #[test]
    fn normal_session_with_credentials_offers_chap_alone_and_never_takes_none() {
        let (login, first) = Login::start(cfg(alice())).unwrap();
        assert!(keys_of(&first).contains(&("AuthMethod".into(), "CHAP".into())));
        let err = login
            .handle_response(rsp(
                false,
                Stage::Security,
                Stage::Security,
                0,
                &[("AuthMethod", "None")],
            ))
            .unwrap_err();
        assert!(matches!(err, LoginError::BadAuthMethod(_)), "{err}");
    }

    #[test]
    fn a_refused_chap_offer_is_told_apart_from_a_wrong_secret() {
        let (login, _) = Login::start(cfg(alice())).unwrap();
        let offer_refused = login
            .handle_response(rsp_status(
                false,
                Stage::Security,
                Stage::Security,
                0,
                &[],
                2,
                1,
            ))
            .unwrap_err();
        let (login, _) = Login::start(cfg(alice())).unwrap();
        let (login, _) = expect_send(
            login
                .handle_response(rsp(
                    false,
                    Stage::Security,
                    Stage::Security,
                    0,
                    &[("AuthMethod", "CHAP")],
                ))
                .unwrap(),
        );
        let (login, _) = expect_send(
            login
                .handle_response(rsp(
                    false,
                    Stage::Security,
                    Stage::Security,
                    1,
                    &[
                        ("CHAP_A", "5"),
                        ("CHAP_I", "7"),
                        ("CHAP_C", "0x0102030405060708090a0b0c0d0e0f10"),
                    ],
                ))
                .unwrap(),
        );
        let secret_refused = login
            .handle_response(rsp_status(
                false,
                Stage::Security,
                Stage::Security,
                2,
                &[],
                2,
                1,
            ))
            .unwrap_err();
        assert!(
            matches!(offer_refused, LoginError::ChapNotAccepted),
            "{offer_refused}"
        );
        assert_eq!(offer_refused.kind(), ErrorKind::Auth);
        assert!(
            matches!(secret_refused, LoginError::AuthenticationFailed),
            "{secret_refused}"
        );
    }

    #[test]
    fn login_response_with_wrong_itt_is_a_protocol_error() {
        let (login, _) = Login::start(cfg(None)).unwrap();
        let mut pdu = rsp(
            true,
            Stage::Security,
            Stage::Operational,
            0,
            &[("AuthMethod", "None")],
        );
        if let Bhs::LoginResponse(h) = &mut pdu.bhs {
            h.itt = 99;
        }
        assert!(matches!(
            login.handle_response(pdu),
            Err(LoginError::Protocol(_))
        ));
    }

    #[test]
    fn endless_login_continuation_is_a_protocol_error() {
        let (mut login, _) = Login::start(cfg(None)).unwrap();
        let mut more = rsp(false, Stage::Security, Stage::Security, 0, &[]);
        if let Bhs::LoginResponse(h) = &mut more.bhs {
            h.continue_ = true;
        }
        for _ in 0..MAX_LOGIN_CONTINUATIONS {
            login = expect_send(login.handle_response(more.clone()).unwrap()).0;
        }
        match login.handle_response(more) {
            Err(LoginError::Protocol(msg)) => assert!(msg.contains("continued"), "{msg}"),
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn login_text_over_64_kib_is_a_protocol_error() {
        let (mut login, _) = Login::start(cfg(None)).unwrap();
        let mut more = rsp(false, Stage::Security, Stage::Security, 0, &[]);
        if let Bhs::LoginResponse(h) = &mut more.bhs {
            h.continue_ = true;
        }
        more.data = Bytes::from(vec![b'a'; 8192]);
        for _ in 0..MAX_LOGIN_TEXT / 8192 {
            login = expect_send(login.handle_response(more.clone()).unwrap()).0;
        }
        match login.handle_response(more) {
            Err(LoginError::Protocol(msg)) => assert!(msg.contains("64 KiB"), "{msg}"),
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn continued_login_text_is_gathered_before_parsing() {
        let (login, _) = Login::start(cfg(None)).unwrap();
        let mut part1 = rsp(false, Stage::Security, Stage::Security, 0, &[]);
        if let Bhs::LoginResponse(h) = &mut part1.bhs {
            h.continue_ = true;
        }
        part1.data = Bytes::from_static(b"AuthMeth");
        let (login, empty) = expect_send(login.handle_response(part1).unwrap());
        assert!(empty.data.is_empty());
        assert!(!req(&empty).transit);
        let mut part2 = rsp(true, Stage::Security, Stage::Operational, 1, &[]);
        part2.data = Bytes::from_static(b"od=None\0");
        let (_, op) = expect_send(login.handle_response(part2).unwrap());
        assert_eq!(req(&op).csg, Stage::Operational);
    }
}
