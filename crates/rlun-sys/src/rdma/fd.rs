//! File-descriptor flags: the one `fcntl` the RDMA wrappers need, to make
//! the descriptors of rdma-core's channels non-blocking before tokio
//! watches them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Set `O_NONBLOCK` on `fd`, keeping its other status flags.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fd` is open for the duration of the call (it is borrowed);
    // F_GETFL takes no argument and touches no memory of ours.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_NONBLOCK != 0 {
        return Ok(());
    }
    // SAFETY: as above; F_SETFL takes an integer argument.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `O_NONBLOCK` is set on `fd`.
#[cfg(test)]
pub(crate) fn is_nonblocking(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: as in `set_nonblocking`.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::O_NONBLOCK != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn set_nonblocking_sets_the_flag_and_is_idempotent() {
        let f = tempfile::tempfile().unwrap();
        assert!(!is_nonblocking(f.as_fd()).unwrap());
        set_nonblocking(f.as_fd()).unwrap();
        assert!(is_nonblocking(f.as_fd()).unwrap());
        set_nonblocking(f.as_fd()).unwrap();
        assert!(is_nonblocking(f.as_fd()).unwrap());
    }
}
