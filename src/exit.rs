//! rlun's documented exit codes, and which failure gets which.
//!
//! A leaf: every layer that decides how a process ends — the binary, the
//! subcommands, the pid files that hand a background process's exit status
//! to `rlun umount` or `rlun detach` — reads the codes from here. A failure
//! is classified by its [`ErrorKind`] ([`of_kind`]); an error type that
//! knows its exit code says so through [`Code`]. The command line's
//! `cli::exit` re-exports this module under its older name.

use rlun_iscsi::ErrorKind;

/// Success.
pub const OK: i32 = 0;
/// Any failure not covered below.
pub const FAILURE: i32 = 1;
/// Bad command line: unknown option, malformed URL, bad size.
pub const USAGE: i32 = 2;
/// The portal could not be reached (resolve, connect, timeout, connection lost).
pub const UNREACHABLE: i32 = 3;
/// The target refused the login: authentication or authorization failed.
pub const AUTH: i32 = 4;
/// No such target at the portal, or no such LUN on the target.
pub const NOT_FOUND: i32 = 5;
/// The LUN refused an I/O: write protected, out of range, medium error…
pub const IO: i32 = 6;
/// The target broke the iSCSI protocol (malformed or unexpected PDUs).
pub const PROTOCOL: i32 = 7;
/// A local file could not be read or written.
pub const LOCAL_FILE: i32 = 8;

/// The documented exit code of each kind of failure.
pub fn of_kind(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::Usage => USAGE,
        ErrorKind::Unreachable => UNREACHABLE,
        ErrorKind::Auth => AUTH,
        ErrorKind::NotFound => NOT_FOUND,
        ErrorKind::Io => IO,
        ErrorKind::Protocol => PROTOCOL,
        ErrorKind::LocalFile => LOCAL_FILE,
        ErrorKind::Failure => FAILURE,
    }
}

/// An error that knows the exit code of a process it ends.
pub trait Code {
    /// The exit code (never [`OK`] for a real failure).
    fn exit_code(&self) -> i32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_nonzero_code() {
        let kinds = [
            ErrorKind::Usage,
            ErrorKind::Unreachable,
            ErrorKind::Auth,
            ErrorKind::NotFound,
            ErrorKind::Io,
            ErrorKind::Protocol,
            ErrorKind::LocalFile,
            ErrorKind::Failure,
        ];

        let mut codes: Vec<i32> = kinds.iter().map(|k| of_kind(*k)).collect();
        codes.sort_unstable();
        codes.dedup();

        assert_eq!(codes, (1..=8).collect::<Vec<_>>());
        assert_eq!(of_kind(ErrorKind::Auth), AUTH);
        assert_eq!(of_kind(ErrorKind::LocalFile), LOCAL_FILE);
    }
}
