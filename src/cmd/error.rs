//! [`CliError`], any failure of a subcommand, and how it maps to the
//! documented exit codes ([`crate::exit`]); plus the two error helpers the
//! subcommands share (a failed write to standard output, a failed
//! discovery with a hint).
//!
//! A leaf of `cmd`: the subcommands and the dispatcher use it, it uses
//! none of them.

use std::path::PathBuf;

use thiserror::Error;

use crate::client::ClientError;
use crate::config::ConfigError;
use crate::daemon::{DaemonError, StopSignal};
use crate::exit;
use crate::service::ServiceError;
use crate::session::SessionError;
use crate::url::UrlError;
use rlun_iscsi::ErrorKind;

/// Any failure of a subcommand. [`CliError::exit_code`] maps it to the
/// documented exit codes.
#[derive(Debug, Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("bad URL")]
    Url(#[from] UrlError),
    #[error("configuration")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Iser(#[from] crate::transport::iser::IserError),
    /// The process machinery (`--daemon`, signal handlers) failed.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error("{what} {}", path.display())]
    LocalFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
    /// A process rlun waited for (the rlun serving a mount or a device,
    /// for `rlun umount` and `rlun detach`) failed with this message and
    /// exit code.
    #[error("{message}")]
    Child { message: String, code: i32 },
    /// A message composed here, with the kind (so the exit code) of what
    /// failed: `rlun ls PORTAL` naming the targets it could not list, a
    /// discovery error with a hint.
    #[error("{message}")]
    Described { message: String, kind: ErrorKind },
    /// Standard output was closed by its reader: stop quietly.
    #[error("standard output closed")]
    BrokenPipe,
    /// A source read as a stream (`rlun cp - LUN`) is larger than the LUN.
    #[error(
        "{source_name} holds more than the {capacity} bytes of LUN {lun}: the LUN was written full and the rest of the input was not copied"
    )]
    StreamTooLarge {
        source_name: String,
        lun: u64,
        capacity: u64,
    },
    /// SIGINT or SIGTERM stopped the command (exit code 128 + the signal).
    #[error("interrupted by {}", .0.name())]
    Interrupted(StopSignal),
    /// A copy that stopped part-way (`rlun cp`): why, then how far it got
    /// and how to resume. The exit code and kind are the cause's.
    #[error("{}; {progress}", rlun_iscsi::error_chain(.cause.as_ref()))]
    CopyStopped {
        cause: Box<CliError>,
        progress: String,
    },
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::BrokenPipe => exit::OK,
            CliError::Child { code, .. } => *code,
            CliError::Daemon(e) => exit::Code::exit_code(e),
            CliError::Interrupted(s) => 128 + s.number(),
            CliError::CopyStopped { cause, .. } => cause.exit_code(),
            other => exit::of_kind(other.kind()),
        }
    }

    /// How this failure is classified ([`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            CliError::Usage(_) | CliError::Url(_) | CliError::Config(_) => ErrorKind::Usage,
            CliError::LocalFile { .. } => ErrorKind::LocalFile,
            CliError::Other(_)
            | CliError::BrokenPipe
            | CliError::Child { .. }
            | CliError::Interrupted(_) => ErrorKind::Failure,
            CliError::StreamTooLarge { .. } => ErrorKind::Io,
            CliError::Described { kind, .. } => *kind,
            CliError::Session(e) => e.kind(),
            CliError::Iser(e) => e.kind(),
            CliError::Client(e) => e.kind(),
            CliError::Daemon(e) => e.kind(),
            CliError::CopyStopped { cause, .. } => cause.kind(),
        }
    }
}

impl exit::Code for CliError {
    fn exit_code(&self) -> i32 {
        CliError::exit_code(self)
    }
}

/// The serving lifecycle's failures, as the commands have always told
/// them: a failed login stays a [`CliError::Client`] (which
/// `explain_foreign_service` looks into), the rest keep their messages
/// and exit codes.
impl From<ServiceError> for CliError {
    fn from(e: ServiceError) -> CliError {
        match e {
            ServiceError::Client(e) => CliError::Client(e),
            ServiceError::Daemon(e) => CliError::Daemon(e),
            ServiceError::Exports(e) => CliError::Usage(rlun_iscsi::error_chain(&e)),
            ServiceError::Metrics(e) => CliError::Described {
                kind: e.kind(),
                message: rlun_iscsi::error_chain(&e),
            },
            e @ (ServiceError::NothingToServe { .. } | ServiceError::DataLost { .. }) => {
                CliError::Other(e.to_string())
            }
        }
    }
}

/// A failed SendTargets discovery, with a hint when the portal closed (or
/// reset) the connection during or right after the discovery login: tgtd
/// does that on a portal with no targets bound to it, other targets when
/// no ACL lets this initiator see any.
pub(crate) fn discovery_failed(e: SessionError) -> CliError {
    use crate::transport::TransportError;
    // tgtd closes with a reset when our request is still unread.
    let closed = |t: &TransportError| match t {
        TransportError::Closed | TransportError::Truncated { .. } => true,
        TransportError::Io(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        _ => false,
    };
    let hint = match &e {
        SessionError::LoginTransport { source, .. } => closed(source),
        SessionError::ConnectionLost(source) => closed(source),
        _ => false,
    };
    if !hint {
        return e.into();
    }
    CliError::Described {
        message: format!(
            "{}: the portal may have no targets bound to it, or no ACL that lets this \
             initiator see one (check the target's configuration and --initiator-name)",
            rlun_iscsi::error_chain(&e)
        ),
        kind: e.kind(),
    }
}

/// Map a failed write to standard output.
pub(crate) fn stdout_error(source: std::io::Error) -> CliError {
    if source.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::BrokenPipe
    } else {
        CliError::LocalFile {
            what: "cannot write to",
            path: PathBuf::from("standard output"),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::OpenError;
    use rlun_iscsi::proto::login::LoginError;

    #[test]
    fn login_failures_map_to_documented_exit_codes() {
        let e = CliError::Session(SessionError::Login {
            portal: "p".into(),
            source: LoginError::AuthenticationFailed,
        });
        assert_eq!(e.exit_code(), exit::AUTH);
        let e = CliError::Session(SessionError::Login {
            portal: "p".into(),
            source: LoginError::TargetNotFound,
        });
        assert_eq!(e.exit_code(), exit::NOT_FOUND);
        assert_eq!(
            CliError::Client(ClientError::ReadOnly(1)).exit_code(),
            exit::IO
        );
        assert_eq!(
            CliError::Client(ClientError::LunNotFound(9)).exit_code(),
            exit::NOT_FOUND
        );
    }

    #[test]
    fn lifecycle_failures_read_as_they_always_did() {
        let no_luns = CliError::from(ServiceError::NothingToServe {
            error: OpenError::NoDiskLuns {
                target: "iqn.t".into(),
            },
            purpose: " to attach",
        });
        let login = CliError::from(ServiceError::Client(ClientError::LunNotFound(2)));
        let child = CliError::from(ServiceError::Daemon(DaemonError::Child {
            message: "the background rlun exited".into(),
            code: 4,
        }));

        assert!(
            matches!(&no_luns, CliError::Other(m) if m == "target iqn.t has no disk LUNs to attach")
        );
        assert_eq!(no_luns.exit_code(), exit::FAILURE);
        assert!(matches!(
            login,
            CliError::Client(ClientError::LunNotFound(2))
        ));
        assert_eq!(child.exit_code(), 4);
        assert_eq!(child.to_string(), "the background rlun exited");
    }

    #[test]
    fn a_closed_standard_output_is_a_quiet_stop() {
        let closed = stdout_error(std::io::ErrorKind::BrokenPipe.into());
        let full = stdout_error(std::io::Error::other("disk full"));

        assert!(matches!(closed, CliError::BrokenPipe));
        assert_eq!(closed.exit_code(), exit::OK);
        assert_eq!(full.exit_code(), exit::LOCAL_FILE);
    }

    #[test]
    fn a_stopped_copy_says_why_first_and_keeps_the_exit_code_of_the_cause() {
        let stopped = CliError::CopyStopped {
            cause: Box::new(CliError::Interrupted(StopSignal::Interrupt)),
            progress: "rerun with --offset 512 to resume".into(),
        };

        assert_eq!(
            stopped.to_string(),
            "interrupted by SIGINT; rerun with --offset 512 to resume"
        );
        assert_eq!(stopped.exit_code(), 130);
        assert_eq!(stopped.kind(), ErrorKind::Failure);
    }
}
