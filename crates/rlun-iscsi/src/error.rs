//! One classification of failures across the layers, and the way errors
//! are printed.
//!
//! Every error type of this crate and of the layers built on it has a
//! `kind()` that classifies it, written beside the type itself and looking
//! only one layer down (through the error it wraps). A command line maps
//! the kind to its exit codes, a front end to its own vocabulary (errno,
//! NBD errors), without matching variants three layers deep. The kinds
//! keep apart what an operator must tell apart: "network lost"
//! ([`ErrorKind::Unreachable`]), "target refused" ([`ErrorKind::Auth`],
//! [`ErrorKind::NotFound`], [`ErrorKind::Io`]) and "target misbehaved"
//! ([`ErrorKind::Protocol`]).

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

/// An error and its causes on one line, outermost first, the way a
/// command line prints them: "outer: inner: innermost".
///
/// ```
/// use rlun_iscsi::error::error_chain;
/// let e = std::io::Error::other("connection reset");
/// assert_eq!(error_chain(&e), "connection reset");
/// ```
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("login to p failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_chain_names_every_cause_outermost_first() {
        let e = Outer(std::io::Error::other("authentication failed"));
        assert_eq!(error_chain(&e), "login to p failed: authentication failed");
    }
}
