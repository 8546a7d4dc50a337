//! The harness's one error type: each variant names the step that failed.

use std::io;
use std::time::Duration;

/// Result of a harness step.
pub type Result<T> = std::result::Result<T, HarnessError>;

/// What went wrong while setting up or driving a test peer.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A program could not be started at all (not installed, not executable).
    #[error("could not start `{program}` (run scripts/install-test-deps.sh?)")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    /// A command ran but exited unsuccessfully.
    #[error("`{command}` failed with {status}: {output}")]
    CommandFailed {
        command: String,
        status: String,
        output: String,
    },
    /// A command did not finish in time and was killed.
    #[error(
        "`{command}` did not finish within {timeout:?} and was killed; output so far: {output}"
    )]
    TimedOut {
        command: String,
        timeout: Duration,
        output: String,
    },
    /// tgtd exited or never became ready.
    #[error("tgtd on control port {control_port} did not come up: {reason}; its log:\n{log}")]
    TgtdNotReady {
        control_port: u16,
        reason: String,
        log: String,
    },
    /// Another process holds this control port's lock or this portal port.
    #[error("tgtd control port or portal 127.0.0.1:{port} is taken by another process")]
    SlotTaken { port: u16 },
    /// No free (control port, portal port) slot could be reserved.
    #[error("no free port slot for tgtd after {tries} tries")]
    NoFreeSlot { tries: usize },
    /// The caller asked for something the harness or tgtd cannot do.
    #[error("invalid harness request: {0}")]
    Invalid(String),
    /// Any other I/O step.
    #[error("{step}")]
    Io {
        step: String,
        #[source]
        source: io::Error,
    },
}

impl HarnessError {
    pub(crate) fn io(step: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            step: step.into(),
            source,
        }
    }
}
