//! The Linux nbd driver's ioctls on `/dev/nbdN` (`<linux/nbd.h>`), the
//! interface of kernels whose nbd module has no netlink family and of
//! `RLUN_NBD_INTERFACE=ioctl`.
//!
//! Every request here takes its argument by value (an integer or a
//! descriptor number), never a pointer, so the kernel reads and writes no
//! memory of ours: the wrapper is safe for any descriptor. (On a descriptor
//! that is not an nbd device the kernel answers `ENOTTY`: the `0xab` ioctl
//! type is the nbd driver's alone, `Documentation/userspace-api/ioctl`.)

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The nbd ioctls rlun uses, each `_IO(0xab, n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Request {
    /// Add a connected socket (argument: its descriptor number).
    SetSock = 0xab00,
    /// Block size in bytes.
    SetBlksize = 0xab01,
    /// Size in bytes; on a running device the new capacity takes effect at
    /// once (how a device connected through these ioctls is resized).
    SetSize = 0xab02,
    /// Run the device; returns when it is disconnected (blocks the thread).
    DoIt = 0xab03,
    /// Drop the sockets.
    ClearSock = 0xab04,
    /// Fail the queued requests.
    ClearQue = 0xab05,
    /// Size in blocks of `SetBlksize`.
    SetSizeBlocks = 0xab07,
    /// Send NBD_CMD_DISC and shut the sockets down.
    Disconnect = 0xab08,
    /// Request timeout in seconds.
    SetTimeout = 0xab09,
    /// Transmission flags.
    SetFlags = 0xab0a,
}

/// One nbd ioctl with an integer argument on `dev`.
pub fn ioctl(dev: BorrowedFd<'_>, request: Request, arg: u64) -> io::Result<()> {
    // SAFETY: `dev` is a live descriptor for the duration of the call, and
    // every `Request` takes its argument by value (see the module docs), so
    // the kernel dereferences no pointer of ours.
    let r = unsafe { libc::ioctl(dev.as_raw_fd(), request as u64 as _, arg as libc::c_ulong) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_nbd_request_on_a_file_that_is_not_a_device_fails_with_enotty() {
        let f = tempfile::tempfile().unwrap();
        let err = ioctl(f.as_fd(), Request::SetTimeout, 30).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
    }

    #[test]
    fn ioctl_numbers_are_those_of_linux_nbd_h() {
        // _IO(0xab, nr): type in bits 8..16, no size, no direction.
        let io = |nr: u64| (0xab << 8) | nr;
        assert_eq!(Request::SetSock as u64, io(0));
        assert_eq!(Request::SetBlksize as u64, io(1));
        assert_eq!(Request::SetSize as u64, io(2));
        assert_eq!(Request::DoIt as u64, io(3));
        assert_eq!(Request::ClearSock as u64, io(4));
        assert_eq!(Request::ClearQue as u64, io(5));
        assert_eq!(Request::SetSizeBlocks as u64, io(7));
        assert_eq!(Request::Disconnect as u64, io(8));
        assert_eq!(Request::SetTimeout as u64, io(9));
        assert_eq!(Request::SetFlags as u64, io(10));
    }
}
