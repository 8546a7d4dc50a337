//! Connecting to a portal and logging in, following login redirections
//! ([`establish`]), and what a login established ([`Established`],
//! [`SessionInfo`]). The driver calls [`establish`] for the first
//! connection and for every reconnect; the login itself is the sans-IO
//! state machine [`rlun_iscsi::proto::login::Login`], driven here over the
//! transport's halves.

use tracing::info;

use rlun_iscsi::proto::login::{Login, LoginConfig, LoginResult, LoginStep};
use rlun_iscsi::proto::negotiate::{OperationalParams, SessionType, TargetAddress};
use rlun_iscsi::proto::pdu::FrameLimits;

use super::config::SessionConfig;
use super::error::SessionError;
use crate::transport::{
    DataMovement, FrameEncoder, FrameWriter, NoPlacement, PduReader, Transmit, Transport,
    TransportError,
};

/// Facts about a logged-in session, for `rlun info` and logs.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub portal: String,
    pub target_name: Option<String>,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub params: OperationalParams,
    pub target_alias: Option<String>,
    pub target_portal_group_tag: Option<u16>,
    /// The most data one SCSI command may move on this session's
    /// transport ([`Transport::MAX_TRANSFER`]).
    pub max_transfer: Option<u64>,
}

/// `host:port`, with an IPv6 address in brackets.
pub fn portal_string(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A connected transport that has completed login.
pub(super) struct Established<T: Transport> {
    pub(super) portal: String,
    pub(super) reader: T::Reader,
    pub(super) wr: T::Writer,
    pub(super) encoder: T::Encoder,
    pub(super) result: LoginResult,
}

/// Connect and log in with `isid`, following up to five redirections.
/// Reusing the ISID of a lost session (with TSIH 0) makes the target
/// reinstate it: the old session's tasks are cleaned up (RFC 7143 §6.3.5).
pub(super) async fn establish<T: Transport>(
    cfg: &SessionConfig,
    isid: [u8; 6],
) -> Result<Established<T>, SessionError> {
    let mut host = cfg.host.clone();
    let mut port = cfg.port;
    for _ in 0..5 {
        let portal = portal_string(&host, port);
        let transport = T::connect(&host, port, cfg.connect_timeout)
            .await
            .map_err(|source| SessionError::Connect {
                portal: portal.clone(),
                source,
            })?;
        let (mut reader, mut wr, mut encoder) = transport.split(FrameLimits::default());
        let outcome = tokio::time::timeout(
            cfg.login_timeout,
            run_login::<T>(cfg, isid, &mut reader, &mut wr, &mut encoder, &portal),
        )
        .await
        .map_err(|_| SessionError::LoginTimeout {
            portal: portal.clone(),
            timeout: cfg.login_timeout,
        })??;
        match outcome {
            LoginStep::Complete(result) => {
                return Ok(Established {
                    portal,
                    reader,
                    wr,
                    encoder,
                    result,
                });
            }
            LoginStep::Redirect { address, permanent } => {
                info!(%portal, %address, permanent, "login redirected");
                let target = TargetAddress::parse(&address).map_err(|e| {
                    SessionError::BadDiscovery(format!("bad redirect address {address}: {e}"))
                })?;
                port = target.port.unwrap_or(port);
                host = target.host;
            }
            LoginStep::Send { .. } => unreachable!("run_login loops until done"),
        }
    }
    Err(SessionError::TooManyRedirects(portal_string(&host, port)))
}

async fn run_login<T: Transport>(
    cfg: &SessionConfig,
    isid: [u8; 6],
    reader: &mut T::Reader,
    wr: &mut T::Writer,
    encoder: &mut T::Encoder,
    portal: &str,
) -> Result<LoginStep, SessionError> {
    let mut proposal = cfg.proposal.clone();
    T::adjust_proposal(&mut proposal);
    // A transport that moves the data itself logs in asking for
    // iSER-assisted mode (RDMAExtensions=Yes, RFC 7145).
    proposal.rdma_extensions = T::DATA_MOVEMENT == DataMovement::Direct;
    let login_cfg = LoginConfig {
        initiator_name: cfg.initiator_name.clone(),
        initiator_alias: cfg.initiator_alias.clone(),
        target_name: cfg.target_name.clone(),
        session_type: if cfg.target_name.is_some() {
            SessionType::Normal
        } else {
            SessionType::Discovery
        },
        isid,
        tsih: 0,
        cid: 0,
        cmd_sn: 1,
        chap: cfg.chap.clone(),
        chap_nonce: crate::entropy::chap_nonce(),
        proposal,
    };
    let transport_err = |source| SessionError::LoginTransport {
        portal: portal.to_string(),
        source,
        answer: Vec::new(),
    };
    let (mut login, mut pdu) = Login::start(login_cfg).map_err(|source| SessionError::Login {
        portal: portal.to_string(),
        source,
    })?;
    loop {
        let frame = encoder
            .encode(Transmit::from(pdu))
            .map_err(transport_err)?
            .frame;
        wr.write_frames(std::slice::from_ref(&frame))
            .await
            .map_err(|e| transport_err(TransportError::Io(e)))?;
        let rsp = match reader.read_pdu(&mut NoPlacement).await {
            Ok(r) => r.pdu,
            Err(source) => {
                return Err(SessionError::LoginTransport {
                    portal: portal.to_string(),
                    source,
                    answer: reader.received_head().to_vec(),
                })
            }
        };
        match login
            .handle_response(rsp)
            .map_err(|source| SessionError::Login {
                portal: portal.to_string(),
                source,
            })? {
            LoginStep::Send { next, pdu: p } => {
                login = *next;
                pdu = p;
            }
            done => return Ok(done),
        }
    }
}

impl<T: Transport> Established<T> {
    /// What handles see of the session while this connection lasts.
    pub(super) fn info(&self, cfg: &SessionConfig) -> SessionInfo {
        SessionInfo {
            portal: self.portal.clone(),
            target_name: cfg.target_name.clone(),
            isid: self.result.isid,
            tsih: self.result.tsih,
            params: self.result.params.clone(),
            target_alias: self.result.target_alias.clone(),
            target_portal_group_tag: self.result.target_portal_group_tag,
            max_transfer: T::MAX_TRANSFER,
        }
    }
}
