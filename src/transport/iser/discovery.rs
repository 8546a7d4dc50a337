//! A discovery session over iSER: login as Sends, `SendTargets=All`, logout.
//!
//! It drives the same sans-IO login state machine and full-feature core as
//! the TCP session driver, over an [`IserConnection`]. Only control PDUs
//! move (no SCSI data), so no memory is advertised to the target.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, info};

use super::conn::{IserConnection, MAX_RECV_DATA};
use super::header::IserHeader;
use super::{resolve, IserError};
use crate::proto::digest::DigestType;
use crate::proto::login::{Login, LoginConfig, LoginStep};
use crate::proto::negotiate::SessionType;
use crate::proto::negotiate::{parse_send_targets, DiscoveredTarget};
use crate::proto::pdu::Digests;
use crate::proto::session::{Event, FeatureParams, Session};
use crate::proto::text::{encode_text, parse_text};
use crate::session::SessionConfig;

/// How long the final disconnect may wait for the target's confirmation.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Log in to the iSER portal `cfg.host:cfg.port` with a discovery session
/// and return what `SendTargets=All` lists.
pub async fn discover(cfg: &SessionConfig) -> Result<Vec<DiscoveredTarget>, IserError> {
    let portal = if cfg.host.contains(':') {
        format!("[{}]:{}", cfg.host, cfg.port)
    } else {
        format!("{}:{}", cfg.host, cfg.port)
    };
    let addr = resolve(&cfg.host, cfg.port, cfg.connect_timeout).await?;
    let mut conn = IserConnection::connect(addr, cfg.connect_timeout).await?;
    let result = tokio::time::timeout(cfg.login_timeout, login(cfg, &mut conn, &portal))
        .await
        .map_err(|_| IserError::LoginTimeout {
            portal: portal.clone(),
            timeout: cfg.login_timeout,
        })??;
    info!(%portal, tsih = result.tsih, "logged in over iSER (discovery)");
    let feature = FeatureParams {
        immediate_data: result.params.immediate_data,
        initial_r2t: result.params.initial_r2t,
        first_burst_length: result.params.first_burst_length,
        max_burst_length: result.params.max_burst_length,
        max_xmit_data_segment_length: result.params.max_xmit_data_segment_length,
        max_recv_data_segment_length: MAX_RECV_DATA,
        queue_depth: 1,
        nop_interval: None,
        nop_timeout: cfg.nop_timeout,
    };
    let mut core = Session::new(feature, result.numbers);
    core.start(Instant::now());
    let text = encode_text(&[("SendTargets", "All")]);
    let text_id = core.submit_text(Bytes::from(text));
    let answer = loop {
        match run_until_event(&mut core, &mut conn, cfg.login_timeout).await? {
            Event::Text { id, result } if id == text_id => {
                break result.map_err(IserError::Task)?
            }
            other => debug!(?other, "event during discovery"),
        }
    };
    // Log out; a target that hangs up instead is not an error for discovery.
    let logout_id = core.logout();
    let logout = tokio::time::timeout(CLOSE_TIMEOUT, async {
        loop {
            match run_until_event(&mut core, &mut conn, CLOSE_TIMEOUT).await {
                Ok(Event::Logout { id, .. }) if id == logout_id => return,
                Ok(_) => {}
                Err(e) => {
                    debug!(error = %e, "logout over iSER did not complete");
                    return;
                }
            }
        }
    });
    let _ = logout.await;
    conn.close(CLOSE_TIMEOUT).await;
    let keys = parse_text(&answer).map_err(|e| IserError::BadDiscovery(e.to_string()))?;
    parse_send_targets(&keys).map_err(|e| IserError::BadDiscovery(e.to_string()))
}

async fn login(
    cfg: &SessionConfig,
    conn: &mut IserConnection,
    portal: &str,
) -> Result<crate::proto::login::LoginResult, IserError> {
    let mut proposal = cfg.proposal.clone();
    // No digests on iSER (RFC 7145 §7.2: the RDMA layer's CRC covers the data).
    proposal.header_digest = vec![DigestType::None];
    proposal.data_digest = vec![DigestType::None];
    // Every PDU the target sends must fit one of our receive buffers.
    proposal.max_recv_data_segment_length =
        proposal.max_recv_data_segment_length.min(MAX_RECV_DATA);
    let login_cfg = LoginConfig {
        initiator_name: cfg.initiator_name.clone(),
        initiator_alias: cfg.initiator_alias.clone(),
        target_name: None,
        session_type: SessionType::Discovery,
        isid: crate::proto::login::random_isid(),
        tsih: 0,
        cid: 0,
        cmd_sn: 1,
        chap: cfg.chap.clone(),
        proposal,
    };
    let login_err = |source| IserError::Login {
        portal: portal.to_string(),
        source,
    };
    let (mut login, mut pdu) = Login::start(login_cfg).map_err(login_err)?;
    loop {
        conn.send(IserHeader::CONTROL, &pdu.encode(Digests::default()))
            .await?;
        let rsp = conn.recv().await?;
        match login.handle_response(rsp.pdu).map_err(login_err)? {
            LoginStep::Send { next, pdu: p } => {
                login = *next;
                pdu = p;
            }
            LoginStep::Complete(result) => return Ok(result),
            LoginStep::Redirect { .. } => {
                return Err(IserError::Redirected {
                    portal: portal.to_string(),
                })
            }
        }
    }
}

/// Send what the core wants sent, feed it what arrives, until it reports an
/// event (or `timeout` passes without one).
async fn run_until_event(
    core: &mut Session,
    conn: &mut IserConnection,
    timeout: Duration,
) -> Result<Event, IserError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        while let Some(p) = core.poll_transmit() {
            conn.send(IserHeader::CONTROL, &p.encode(Digests::default()))
                .await?;
        }
        if let Some(ev) = core.poll_event() {
            return Ok(ev);
        }
        let rsp = tokio::time::timeout_at(deadline, conn.recv())
            .await
            .map_err(|_| IserError::LoginTimeout {
                portal: "the target".into(),
                timeout,
            })??;
        core.handle_pdu(rsp.pdu, Instant::now())?;
    }
}
