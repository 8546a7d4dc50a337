//! One classification of failures across the layers.
//!
//! Each layer's error enum gets a `kind()` here, in one place, that looks
//! only one layer down (through the error it wraps); the CLI maps the kind
//! to its documented exit code (`cli::exit`) and front ends can map it to
//! their own vocabulary (errno, NBD errors) without matching variants three
//! layers deep. A new variant anywhere fails to compile until it is
//! classified here. The kinds follow the distinction DESIGN.md asks for:
//! "network lost" ([`ErrorKind::Unreachable`]) versus "target refused"
//! ([`ErrorKind::Auth`], [`ErrorKind::NotFound`], [`ErrorKind::Io`]) versus
//! "target misbehaved" ([`ErrorKind::Protocol`]).

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Bad command line, URL or configuration.
    Usage,
    /// The portal could not be reached, or the connection was lost for good.
    Unreachable,
    /// The target refused the login: authentication or authorization, or
    /// (iSER) RDMAExtensions.
    Auth,
    /// No such target at the portal, or no such LUN.
    NotFound,
    /// The LUN refused an I/O: write protected, out of range, medium error…
    Io,
    /// The target broke the iSCSI protocol.
    Protocol,
    /// A local file or device could not be read or written.
    LocalFile,
    /// Anything else.
    Failure,
}

use crate::client::ClientError;
use crate::proto::login::LoginError;
use crate::proto::negotiate::NegotiationError;
use crate::proto::session::TaskError;
use crate::session::SessionError;
use crate::transport::TransportError;

impl TransportError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TransportError::Pdu(_) | TransportError::Truncated { .. } => ErrorKind::Protocol,
            TransportError::Resolve { .. }
            | TransportError::NoAddress { .. }
            | TransportError::Connect { .. }
            | TransportError::ConnectTimeout { .. }
            | TransportError::Closed
            | TransportError::Unavailable(_)
            | TransportError::Io(_) => ErrorKind::Unreachable,
            TransportError::Iser(e) => e.kind(),
        }
    }
}

impl LoginError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LoginError::AuthenticationFailed
            | LoginError::NotAuthorized
            | LoginError::AuthRequired { .. }
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

impl TaskError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TaskError::ConnectionLost(_) => ErrorKind::Unreachable,
            TaskError::TargetFailure(_)
            | TaskError::Rejected(_)
            | TaskError::Aborted
            | TaskError::Invalid(_)
            | TaskError::WindowClosed { .. } => ErrorKind::Io,
        }
    }
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
            | SessionError::NotResponding(_) => ErrorKind::Unreachable,
            SessionError::LoginTransport { source, .. } => source.kind(),
            SessionError::Login { source, .. } => source.kind(),
            SessionError::Protocol(_) | SessionError::BadDiscovery(_) => ErrorKind::Protocol,
            SessionError::Task(t) => t.kind(),
        }
    }
}

impl ClientError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Session(s) => s.kind(),
            ClientError::LunNotFound(_) | ClientError::NotADisk { .. } => ErrorKind::NotFound,
            ClientError::ReadOnly(_)
            | ClientError::OutOfRange { .. }
            | ClientError::TooLarge { .. }
            | ClientError::Scsi { .. } => ErrorKind::Io,
            ClientError::Parse { .. } | ClientError::ShortTransfer { .. } => ErrorKind::Protocol,
            ClientError::Cdb(_) => ErrorKind::Usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        assert_eq!(e.kind(), ErrorKind::Protocol);
        let e = SessionError::LoginTransport {
            portal: "p".into(),
            source: TransportError::Closed,
        };
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        let e = SessionError::Task(TaskError::ConnectionLost("x".into()));
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        assert_eq!(SessionError::Task(TaskError::Aborted).kind(), ErrorKind::Io);
    }

    #[test]
    fn client_errors_classify_their_own_and_defer_to_the_session() {
        assert_eq!(ClientError::LunNotFound(3).kind(), ErrorKind::NotFound);
        assert_eq!(ClientError::ReadOnly(1).kind(), ErrorKind::Io);
        let e = ClientError::Session(SessionError::Closed);
        assert_eq!(e.kind(), ErrorKind::Unreachable);
    }
}
