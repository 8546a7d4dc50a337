//! [`SessionError`], the errors of the session layer, and how each is
//! classified ([`SessionError::kind`]). A leaf of the session module: every
//! other file of it uses this one, and it uses none of them.

use std::sync::Arc;
use std::time::Duration;

use rlun_iscsi::proto::connection::{ProtocolError, TaskError};
use rlun_iscsi::proto::login::LoginError;
use rlun_iscsi::ErrorKind;
use thiserror::Error;

use crate::transport::TransportError;

/// Errors of the session layer. Each says which step failed; the cause is
/// in `source()`.
#[derive(Debug, Error)]
pub enum SessionError {
    #[error("cannot reach portal {portal}")]
    Connect {
        portal: String,
        #[source]
        source: TransportError,
    },
    #[error("login to {portal} failed")]
    Login {
        portal: String,
        #[source]
        source: LoginError,
    },
    #[error("login to {portal} timed out after {timeout:?}")]
    LoginTimeout { portal: String, timeout: Duration },
    #[error("login to {portal}: connection failed during login")]
    LoginTransport {
        portal: String,
        #[source]
        source: TransportError,
        /// The first bytes of the answer that could not be read as a PDU
        /// (empty if none came): another service's greeting names it.
        answer: Vec<u8>,
    },
    #[error("too many login redirections (last: {0})")]
    TooManyRedirects(String),
    #[error("connection to the target lost")]
    ConnectionLost(#[source] Arc<TransportError>),
    #[error("target violated the iSCSI protocol")]
    Protocol(#[source] ProtocolError),
    #[error("task failed")]
    Task(#[source] TaskError),
    #[error("session is closed")]
    Closed,
    #[error("discovery answer is malformed: {0}")]
    BadDiscovery(String),
    #[error("target unreachable for more than the replacement timeout ({timeout:?})")]
    ReplacementTimeout {
        timeout: Duration,
        #[source]
        last: Arc<SessionError>,
    },
    #[error("task management did not answer within {0:?}")]
    TaskManagementTimeout(Duration),
    #[error("target asked us to log out")]
    LogoutRequested,
    #[error("target stopped answering (no answer to a NOP-Out ping within {0:?})")]
    NotResponding(Duration),
    /// A login asked for at once ([`super::SessionHandle::reconnect`])
    /// failed; the cause is that attempt's own error.
    #[error("target still unreachable")]
    StillUnreachable(#[source] Arc<SessionError>),
    /// The connection was given up on purpose ([`super::SessionHandle::abandon`]).
    #[error("connection given up: {0}")]
    Abandoned(String),
    /// Several portals given, and one of them refused the login.
    #[error("the path through {portal} cannot log in")]
    PathRefused {
        portal: String,
        #[source]
        source: Arc<SessionError>,
    },
    /// Given back by a path whose connection is down, to be sent through
    /// another ([`super::SessionHandle::release`]); `last` is why the
    /// connection went.
    #[error("handed to another path")]
    Released(#[source] Arc<SessionError>),
    /// Several paths, none usable for this long (the replacement timeout).
    #[error("no usable path to the target for {0:?}")]
    NoPath(Duration),
    /// Several portals given, and none of them answered the first login;
    /// `first` is the first portal's error.
    #[error("none of the {} portals answered ({})", portals.len(), portals.join(", "))]
    NoPortalAnswered {
        portals: Vec<String>,
        #[source]
        first: Arc<SessionError>,
    },
}

impl SessionError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionError::Connect { .. }
            | SessionError::LoginTimeout { .. }
            | SessionError::ConnectionLost(_)
            | SessionError::Closed
            | SessionError::TooManyRedirects(_)
            | SessionError::ReplacementTimeout { .. }
            | SessionError::TaskManagementTimeout(_)
            | SessionError::LogoutRequested
            | SessionError::NotResponding(_)
            | SessionError::NoPath(_)
            | SessionError::Abandoned(_)
            | SessionError::Released(_) => ErrorKind::Unreachable,
            SessionError::StillUnreachable(last) => last.kind(),
            SessionError::PathRefused { source, .. } => source.kind(),
            SessionError::NoPortalAnswered { first, .. } => first.kind(),
            SessionError::LoginTransport { source, .. } => source.kind(),
            SessionError::Login { source, .. } => source.kind(),
            SessionError::Protocol(_) | SessionError::BadDiscovery(_) => ErrorKind::Protocol,
            SessionError::Task(t) => t.kind(),
        }
    }
}

impl SessionError {
    /// True when the network or target went away (as opposed to the target refusing).
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            SessionError::ConnectionLost(_)
                | SessionError::Closed
                | SessionError::ReplacementTimeout { .. }
                | SessionError::NotResponding(_)
                | SessionError::StillUnreachable(_)
                | SessionError::NoPath(_)
                | SessionError::Abandoned(_)
                | SessionError::Released(_)
                | SessionError::Task(TaskError::ConnectionLost(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_errors_look_through_to_the_login_and_the_transport() {
        let e = SessionError::Login {
            portal: "p".into(),
            source: LoginError::NotAuthorized,
        };
        assert_eq!(e.kind(), ErrorKind::Auth);
        let e = SessionError::LoginTransport {
            portal: "p".into(),
            source: TransportError::Truncated { have: 1, need: 48 },
            answer: b"H".to_vec(),
        };
        assert_eq!(e.kind(), ErrorKind::Protocol);
        let e = SessionError::LoginTransport {
            portal: "p".into(),
            source: TransportError::Closed,
            answer: Vec::new(),
        };
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        let e = SessionError::Task(TaskError::ConnectionLost("x".into()));
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        assert_eq!(SessionError::Task(TaskError::Aborted).kind(), ErrorKind::Io);
    }
}
