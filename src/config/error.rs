//! [`ConfigError`]: what can go wrong loading the config file, a
//! credentials file, or resolving credentials.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::url::UrlError;

/// Errors from loading the config, a credentials file or resolving
/// credentials. Messages name the file and the key, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}", path.display())]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("config file {}: {detail}", path.display())]
    ParseConfig { path: PathBuf, detail: String },

    #[error(
        "config file {}: {}key `{key}`: {reason}",
        path.display(),
        line.map(|l| format!("line {l}, ")).unwrap_or_default()
    )]
    InvalidConfig {
        path: PathBuf,
        /// The line of the key, when it could be found.
        line: Option<usize>,
        key: String,
        reason: String,
    },

    #[error("no target named '{name}' {}", where_looked(path, *file_read, known))]
    UnknownTarget {
        name: String,
        path: PathBuf,
        /// False when no config file was read at all (missing, unreadable).
        file_read: bool,
        known: Vec<String>,
    },

    #[error(
        "{what} {} holds secrets but is readable by {by} (mode {mode:04o}); rlun refuses it: run chmod 600 {}",
        path.display(),
        path.display()
    )]
    SecretsReadable {
        what: &'static str,
        path: PathBuf,
        by: &'static str,
        mode: u32,
    },

    #[error("cannot read credentials file {}", path.display())]
    ReadCredentials {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("credentials file {}: {detail}", path.display())]
    ParseCredentials { path: PathBuf, detail: String },

    #[error("cannot read secret file {} (named by {key})", path.display())]
    ReadSecretFile {
        path: PathBuf,
        key: String,
        #[source]
        source: io::Error,
    },

    #[error("secret file {} (named by {key}) is empty", path.display())]
    EmptySecretFile { path: PathBuf, key: String },

    #[error("{role} CHAP user '{user}' (from {from}) has no secret; {hint}")]
    UserWithoutSecret {
        role: ChapRole,
        user: String,
        from: String,
        hint: &'static str,
    },

    #[error("{role} CHAP secret (from {from}) has no user name; {hint}")]
    SecretWithoutUser {
        role: ChapRole,
        from: String,
        hint: &'static str,
    },

    #[error("mutual CHAP is configured but one-way CHAP is not; the target can only authenticate itself after the initiator did (RFC 7143 §12.1.3)")]
    MutualWithoutOneWay,

    #[error("the mutual CHAP secret equals the one-way CHAP secret; RFC 7143 §12.1.3 forbids one secret in both directions")]
    SameSecretBothWays,

    #[error("bad initiator name from {from}")]
    BadInitiatorName {
        from: String,
        #[source]
        source: UrlError,
    },
}

fn where_looked(path: &Path, file_read: bool, known: &[String]) -> String {
    if file_read || !known.is_empty() {
        format!("in config file {}{}", path.display(), known_list(known))
    } else {
        format!(
            "(no config file was read: {} is missing or unreadable; --config PATH names another)",
            path.display()
        )
    }
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        " (it defines no targets)".to_string()
    } else {
        format!("; known: {}", known.join(", "))
    }
}

/// Which direction a CHAP pair authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChapRole {
    /// The initiator proves itself to the target.
    OneWay,
    /// The target proves itself to the initiator.
    Mutual,
}

impl fmt::Display for ChapRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChapRole::OneWay => "one-way",
            ChapRole::Mutual => "mutual",
        })
    }
}
