//! [`SessionConfig`]: how to reach and log in to a target, and the
//! driver's timeouts and queue depth. A leaf of the session module.

use std::time::Duration;

use rlun_iscsi::proto::login::ChapSettings;
use rlun_iscsi::proto::negotiate::InitiatorProposal;

use crate::config::settings::{Failback, MultipathPolicy, PathFence};
use crate::transport::TransportKind;

/// The other paths to the same target and how to use them (`--portal`
/// and the multipath options). The session layer only carries it: each
/// path is a session of its own, and the layer above (`crate::multipath`)
/// combines them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipathConfig {
    /// The other portals (transport, host, port), after the URL's own.
    pub portals: Vec<(TransportKind, String, u16)>,
    /// Also the portals SendTargets discovery reports for the target.
    pub discover: bool,
    pub policy: MultipathPolicy,
    pub failback: Failback,
    pub check_interval: Duration,
    /// Each path's own replacement timeout: how long a lost path keeps
    /// its commands before they move to another path.
    pub path_timeout: Duration,
    /// How writes caught on a failed path are fenced before they move.
    pub fence: PathFence,
}

/// How to reach and log in to a target (or a portal, for discovery).
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Which transport carries the session: TCP for `iscsi://`, iSER over
    /// RDMA for `iser://` (a build without the `rdma` feature refuses it
    /// with [`TransportError::Unavailable`](crate::transport::TransportError::Unavailable)).
    pub transport: TransportKind,
    pub host: String,
    pub port: u16,
    pub initiator_name: String,
    pub initiator_alias: Option<String>,
    /// `None` opens a discovery session.
    pub target_name: Option<String>,
    pub chap: Option<ChapSettings>,
    pub proposal: InitiatorProposal,
    pub connect_timeout: Duration,
    pub login_timeout: Duration,
    /// Commands kept in flight at most (the target's window may allow fewer).
    pub queue_depth: u32,
    /// Ping the target after this much silence (`None`: never).
    pub nop_interval: Option<Duration>,
    pub nop_timeout: Duration,
    /// A command without an answer for this long is aborted (ABORT TASK,
    /// then LOGICAL UNIT RESET, then a new connection) and retried.
    pub command_timeout: Duration,
    /// How long to keep reconnecting before pending and new I/O fail.
    /// Zero turns reconnection off (discovery sessions never reconnect).
    pub replacement_timeout: Duration,
    /// More portals of the same target, used as paths (`None`: one path).
    pub multipath: Option<MultipathConfig>,
    /// This session is one path of several: giving its commands up past
    /// the replacement timeout (the path timeout) moves them to another
    /// path rather than failing them, and is logged so.
    pub one_of_several_paths: bool,
}

impl SessionConfig {
    pub fn new(host: impl Into<String>, port: u16, initiator_name: impl Into<String>) -> Self {
        SessionConfig {
            transport: TransportKind::default(),
            host: host.into(),
            port,
            initiator_name: initiator_name.into(),
            initiator_alias: None,
            target_name: None,
            chap: None,
            proposal: InitiatorProposal::default(),
            connect_timeout: Duration::from_secs(10),
            login_timeout: Duration::from_secs(15),
            queue_depth: 128,
            nop_interval: Some(Duration::from_secs(5)),
            nop_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(30),
            replacement_timeout: Duration::from_secs(120),
            multipath: None,
            one_of_several_paths: false,
        }
    }
}
