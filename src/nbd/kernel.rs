//! The kernel's NBD client (`/dev/nbdN`), driven over generic netlink or,
//! where that is missing, over the older ioctl interface.
//!
//! `rlun attach` hands the kernel one end of one or more socketpairs whose
//! other ends the in-process NBD server serves in transmission phase (the
//! kernel expects sockets already past negotiation). This module speaks the
//! generic-netlink family `nbd` (resolved through `CTRL_CMD_GETFAMILY`):
//! [`connect`] (`NBD_CMD_CONNECT`, the kernel may pick the device),
//! [`disconnect`] (`NBD_CMD_DISCONNECT`) and, when the LUN's capacity
//! changed, [`resize`] (`NBD_CMD_RECONFIGURE` with the new size; on an
//! ioctl-connected device `NBD_SET_SIZE` instead, as the kernel refuses
//! each interface's requests on a device the other one connected).
//!
//! Kernels whose nbd module has no netlink family (before 4.12), or a run
//! with `RLUN_NBD_INTERFACE=ioctl` (how the lab tests this path), use the
//! ioctls on `/dev/nbdN` instead ([`connect_ioctl`], [`disconnect_ioctl`]):
//! `NBD_SET_BLKSIZE`, `NBD_SET_SIZE_BLOCKS`, `NBD_SET_TIMEOUT`,
//! `NBD_SET_FLAGS`, one `NBD_SET_SOCK` per connection, then `NBD_DO_IT`,
//! which blocks a thread for as long as the device is connected. That
//! interface has no dead-connection timeout: a dead socket fails I/O at
//! once, and a request without a reply fails after `NBD_SET_TIMEOUT`.
//!
//! Messages are built and parsed in safe code ([`encode_connect`],
//! [`parse_reply`]); the netlink socket is a `socket2` socket and the
//! ioctls are `rlun_sys::nbd`'s, so this module has no `unsafe` of its own.

use std::fs::File;
use std::io;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use rlun_sys::nbd::{ioctl as nbd_ioctl, Request};
use socket2::{Domain, Protocol, Socket, Type};
use std::path::Path;
use std::time::{Duration, Instant};

/// NBD transmission flags the kernel is told (`NBD_ATTR_SERVER_FLAGS`).
pub mod flags {
    pub const HAS_FLAGS: u64 = 1 << 0;
    pub const READ_ONLY: u64 = 1 << 1;
    pub const SEND_FLUSH: u64 = 1 << 2;
    pub const SEND_FUA: u64 = 1 << 3;
    pub const SEND_TRIM: u64 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u64 = 1 << 6;
    pub const CAN_MULTI_CONN: u64 = 1 << 8;
}

const NETLINK_GENERIC: i32 = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

const NBD_CMD_CONNECT: u8 = 1;
const NBD_CMD_DISCONNECT: u8 = 2;
const NBD_CMD_RECONFIGURE: u8 = 3;
const NBD_ATTR_INDEX: u16 = 1;
const NBD_ATTR_SIZE_BYTES: u16 = 2;
const NBD_ATTR_BLOCK_SIZE_BYTES: u16 = 3;
const NBD_ATTR_TIMEOUT: u16 = 4;
const NBD_ATTR_SERVER_FLAGS: u16 = 5;
const NBD_ATTR_CLIENT_FLAGS: u16 = 6;
const NBD_ATTR_SOCKETS: u16 = 7;
const NBD_ATTR_DEAD_CONN_TIMEOUT: u16 = 8;
const NBD_SOCK_ITEM: u16 = 1;
const NBD_SOCK_FD: u16 = 1;
/// No client flags: not `NBD_CFLAG_DISCONNECT_ON_CLOSE`, which would
/// disconnect the device whenever its last opener (mkfs, mount) closes it,
/// nor `NBD_CFLAG_DESTROY_ON_DISCONNECT`.
const NBD_CLIENT_FLAGS: u64 = 0;

/// Why the kernel's NBD client could not be driven.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("the nbd kernel module is not loaded (run `modprobe nbd`)")]
    ModuleMissing,
    #[error("the kernel has no NBD netlink interface (Linux 4.12 or later needed)")]
    NoNetlink,
    #[error("{INTERFACE_ENV}={0}: expected `netlink` or `ioctl`")]
    BadInterface(String),
    #[error("no free /dev/nbd device (all are connected; load nbd with a larger nbds_max)")]
    NoFreeDevice,
    #[error("attaching NBD devices needs root (CAP_SYS_ADMIN)")]
    NotRoot,
    #[error("/dev/nbd{0} is in use")]
    Busy(u32),
    #[error("/dev/nbd{0} is not connected")]
    NotConnected(u32),
    #[error("cannot resize to {size} bytes in blocks of {block_size}: the size must be a positive multiple of a power-of-two block size of 512 to 65536 bytes")]
    BadGeometry { size: u64, block_size: u64 },
    /// The kernel took the request without an error but the device kept
    /// its size: an nbd driver that predates resizing a running device
    /// through that interface (for netlink: one that ignores
    /// `NBD_ATTR_SIZE_BYTES` in `NBD_CMD_RECONFIGURE`).
    #[error("the kernel accepted {how} for /dev/nbd{index} but the device is still {now} bytes, not {wanted}: this kernel's nbd driver cannot resize a running device through {how}")]
    ResizeIgnored {
        index: u32,
        how: &'static str,
        wanted: u64,
        now: u64,
    },
    /// The netlink request was refused with `EINVAL`: the device is not
    /// one the nbd netlink interface configured (connected through the
    /// ioctls), or the kernel refused the geometry.
    #[error("the kernel refused NBD_CMD_RECONFIGURE for /dev/nbd{0} (EINVAL): a device connected through the ioctl interface cannot be reconfigured over netlink (resize it with NBD_SET_SIZE)")]
    ReconfigureRefused(u32),
    /// The ioctl was refused with `EINVAL` on a connected device: a device
    /// connected over netlink takes no configuring ioctls ("Cannot use
    /// ioctl interface on a netlink controlled device").
    #[error("the kernel refused NBD_SET_SIZE for /dev/nbd{0} (EINVAL): a device connected over netlink cannot be configured through the ioctls (resize it with NBD_CMD_RECONFIGURE)")]
    IoctlRefused(u32),
    #[error("malformed netlink reply: {0}")]
    Malformed(&'static str),
    #[error("netlink: {0}")]
    Io(#[from] io::Error),
}

/// What `NBD_CMD_CONNECT` asks for.
#[derive(Debug, Clone)]
pub struct ConnectParams {
    /// `Some(n)` for `/dev/nbdN`, `None` to let the kernel pick a free one.
    pub index: Option<u32>,
    pub size: u64,
    pub block_size: u64,
    pub server_flags: u64,
    /// Seconds before a request with no reply fails (`NBD_ATTR_TIMEOUT`).
    pub timeout: u64,
    /// Seconds the kernel waits for a dead connection to be replaced.
    pub dead_conn_timeout: u64,
}

/// Append one netlink attribute (4-byte aligned).
fn put_attr(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// Start a nested attribute; returns the offset to close with [`end_nest`].
fn begin_nest(buf: &mut Vec<u8>, ty: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
    at
}

fn end_nest(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u16;
    buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
}

/// A whole generic-netlink request: nlmsghdr, genlmsghdr, then `attrs`.
fn message(family: u16, cmd: u8, seq: u32, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(20 + attrs.len());
    m.extend_from_slice(&((20 + attrs.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[cmd, 1, 0, 0]);
    m.extend_from_slice(attrs);
    m
}

/// `CTRL_CMD_GETFAMILY` for `name`.
pub fn encode_getfamily(name: &str, seq: u32) -> Vec<u8> {
    let mut a = Vec::new();
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    put_attr(&mut a, CTRL_ATTR_FAMILY_NAME, &n);
    message(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, seq, &a)
}

/// `NBD_CMD_CONNECT` with these sockets.
pub fn encode_connect(family: u16, p: &ConnectParams, fds: &[RawFd], seq: u32) -> Vec<u8> {
    let mut a = Vec::new();
    if let Some(i) = p.index {
        put_attr(&mut a, NBD_ATTR_INDEX, &i.to_ne_bytes());
    }
    put_attr(&mut a, NBD_ATTR_SIZE_BYTES, &p.size.to_ne_bytes());
    put_attr(
        &mut a,
        NBD_ATTR_BLOCK_SIZE_BYTES,
        &p.block_size.to_ne_bytes(),
    );
    put_attr(&mut a, NBD_ATTR_SERVER_FLAGS, &p.server_flags.to_ne_bytes());
    put_attr(
        &mut a,
        NBD_ATTR_CLIENT_FLAGS,
        &NBD_CLIENT_FLAGS.to_ne_bytes(),
    );
    put_attr(&mut a, NBD_ATTR_TIMEOUT, &p.timeout.to_ne_bytes());
    put_attr(
        &mut a,
        NBD_ATTR_DEAD_CONN_TIMEOUT,
        &p.dead_conn_timeout.to_ne_bytes(),
    );
    let socks = begin_nest(&mut a, NBD_ATTR_SOCKETS);
    for fd in fds {
        let item = begin_nest(&mut a, NBD_SOCK_ITEM);
        put_attr(&mut a, NBD_SOCK_FD, &(*fd as u32).to_ne_bytes());
        end_nest(&mut a, item);
    }
    end_nest(&mut a, socks);
    message(family, NBD_CMD_CONNECT, seq, &a)
}

/// `NBD_CMD_RECONFIGURE` of `/dev/nbd<index>` to `size` bytes in blocks of
/// `block_size`: the kernel's nbd driver applies both to the running
/// device (`nbd_genl_size_set`) when they differ from what it has.
pub fn encode_resize(family: u16, index: u32, size: u64, block_size: u64, seq: u32) -> Vec<u8> {
    let mut a = Vec::new();
    put_attr(&mut a, NBD_ATTR_INDEX, &index.to_ne_bytes());
    put_attr(&mut a, NBD_ATTR_SIZE_BYTES, &size.to_ne_bytes());
    put_attr(&mut a, NBD_ATTR_BLOCK_SIZE_BYTES, &block_size.to_ne_bytes());
    message(family, NBD_CMD_RECONFIGURE, seq, &a)
}

/// `NBD_CMD_DISCONNECT` of `/dev/nbd<index>`.
pub fn encode_disconnect(family: u16, index: u32, seq: u32) -> Vec<u8> {
    let mut a = Vec::new();
    put_attr(&mut a, NBD_ATTR_INDEX, &index.to_ne_bytes());
    message(family, NBD_CMD_DISCONNECT, seq, &a)
}

/// One reply: the kernel's errno (0 = success) or the attributes of a
/// data message (type, payload).
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Ack(i32),
    Data(Vec<(u16, Vec<u8>)>),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parse the messages of one datagram (every length checked).
pub fn parse_reply(b: &[u8]) -> Result<Vec<Reply>, KernelError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= b.len() {
        let len = u32_at(b, at).ok_or(KernelError::Malformed("header"))? as usize;
        let ty = u16_at(b, at + 4).ok_or(KernelError::Malformed("header"))?;
        if len < 16 || at + len > b.len() {
            return Err(KernelError::Malformed("message length"));
        }
        let body = &b[at + 16..at + len];
        match ty {
            NLMSG_ERROR => {
                let e = u32_at(body, 0).ok_or(KernelError::Malformed("error message"))? as i32;
                out.push(Reply::Ack(-e));
            }
            NLMSG_DONE => {}
            _ => {
                if body.len() < 4 {
                    return Err(KernelError::Malformed("generic netlink header"));
                }
                out.push(Reply::Data(parse_attrs(&body[4..])?));
            }
        }
        at += len.next_multiple_of(4);
    }
    Ok(out)
}

fn parse_attrs(mut b: &[u8]) -> Result<Vec<(u16, Vec<u8>)>, KernelError> {
    let mut v = Vec::new();
    while b.len() >= 4 {
        let len = u16_at(b, 0).unwrap_or(0) as usize;
        let ty = u16_at(b, 2).unwrap_or(0) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return Err(KernelError::Malformed("attribute length"));
        }
        v.push((ty, b[4..len].to_vec()));
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    Ok(v)
}

/// A generic-netlink socket.
struct Genl {
    sock: Socket,
    seq: u32,
}

impl Genl {
    /// A generic-netlink socket; the kernel binds it to a port of its own
    /// choosing at the first send (netlink's autobind).
    fn open() -> Result<Genl, KernelError> {
        let sock = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::from(libc::SOCK_RAW),
            Some(Protocol::from(NETLINK_GENERIC)),
        )?;
        Ok(Genl { sock, seq: 1 })
    }

    /// Send one request and collect the replies up to its ACK.
    fn request(&mut self, msg: &[u8]) -> Result<(i32, Vec<Reply>), KernelError> {
        self.sock.send(msg)?;
        self.seq += 1;
        let mut data = Vec::new();
        let mut buf = vec![0u8; 16384];
        loop {
            let n = (&self.sock).read(&mut buf)?;
            for r in parse_reply(&buf[..n])? {
                match r {
                    Reply::Ack(e) => return Ok((e, data)),
                    d => data.push(d),
                }
            }
        }
    }

    /// The id of the `nbd` family; [`KernelError::ModuleMissing`] when the
    /// module is not loaded.
    fn nbd_family(&mut self) -> Result<u16, KernelError> {
        let (e, replies) = self.request(&encode_getfamily("nbd", self.seq))?;
        if e == libc::ENOENT {
            return Err(KernelError::ModuleMissing);
        }
        if e != 0 {
            return Err(io::Error::from_raw_os_error(e).into());
        }
        family_id(&replies).ok_or(KernelError::Malformed("no CTRL_ATTR_FAMILY_ID"))
    }
}

fn family_id(replies: &[Reply]) -> Option<u16> {
    replies.iter().find_map(|r| match r {
        Reply::Data(attrs) => attrs
            .iter()
            .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
            .and_then(|(_, p)| u16_at(p, 0)),
        _ => None,
    })
}

fn errno_error(e: i32, index: Option<u32>) -> KernelError {
    match e {
        libc::EPERM | libc::EACCES => KernelError::NotRoot,
        libc::EBUSY => KernelError::Busy(index.unwrap_or(u32::MAX)),
        _ => io::Error::from_raw_os_error(e).into(),
    }
}

/// Whether the `nbd` family exists (the module is loaded).
pub fn probe() -> Result<(), KernelError> {
    Genl::open()?.nbd_family().map(|_| ())
}

/// Connect a device to `socks`; returns its index (`/dev/nbd<index>`).
/// The kernel holds its own references to the sockets once this returns.
pub fn connect(p: &ConnectParams, socks: &[OwnedFd]) -> Result<u32, KernelError> {
    let mut g = Genl::open()?;
    let family = g.nbd_family()?;
    let fds: Vec<RawFd> = socks.iter().map(|s| s.as_raw_fd()).collect();
    let (e, replies) = g.request(&encode_connect(family, p, &fds, g.seq))?;
    if e != 0 {
        return Err(errno_error(e, p.index));
    }
    let index = replies.iter().find_map(|r| match r {
        Reply::Data(a) => a
            .iter()
            .find(|(t, _)| *t == NBD_ATTR_INDEX)
            .and_then(|(_, v)| u32_at(v, 0)),
        _ => None,
    });
    index
        .or(p.index)
        .ok_or(KernelError::Malformed("no NBD_ATTR_INDEX in the reply"))
}

/// Disconnect `/dev/nbd<index>`.
pub fn disconnect(index: u32) -> Result<(), KernelError> {
    let mut g = Genl::open()?;
    let family = g.nbd_family()?;
    let (e, _) = g.request(&encode_disconnect(family, index, g.seq))?;
    if e != 0 {
        return Err(errno_error(e, Some(index)));
    }
    Ok(())
}

/// Make what the kernel buffered for the block device `dev` durable: open
/// it and `fsync` it, which writes the device's dirty page cache to the
/// NBD server and then sends `NBD_CMD_FLUSH`. Called before a disconnect:
/// the kernel drops dirty pages of a device that goes away, and writes
/// them back on its own only at the last close or after the writeback
/// delay, so data another process still holds dirty would be lost.
///
/// Nothing needs exclusive access: a device mounted or held open by others
/// is flushed the same way. The call runs on its own thread and is given up
/// after `timeout` (a device whose server no longer answers), so a stop is
/// never held up by it for longer; the thread then ends whenever the kernel
/// fails the I/O.
pub fn flush_device(dev: &Path, timeout: Duration) -> io::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = dev.to_path_buf();
    std::thread::Builder::new()
        .name("nbd-fsync".into())
        .spawn(move || {
            let r = File::open(&path).and_then(|f| f.sync_all());
            let _ = tx.send(r);
        })?;
    match rx.recv_timeout(timeout) {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("fsync of {} did not finish in {timeout:?}", dev.display()),
        )),
    }
}

/// How the kernel's NBD client is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    Netlink,
    Ioctl,
}

/// Environment variable that forces an interface: `netlink` or `ioctl`.
pub const INTERFACE_ENV: &str = "RLUN_NBD_INTERFACE";

/// Which interface to use: the one `RLUN_NBD_INTERFACE` names, else
/// netlink when the `nbd` family exists, else the ioctls when the module is
/// loaded without it. [`KernelError::ModuleMissing`] when it is not loaded.
pub fn interface() -> Result<Interface, KernelError> {
    choose_interface(
        std::env::var(INTERFACE_ENV).ok().as_deref(),
        Path::new("/sys/module/nbd").exists(),
        probe,
    )
}

/// [`interface`]'s decision: `forced` from the environment, whether the
/// module is loaded, and the netlink family lookup.
fn choose_interface(
    forced: Option<&str>,
    module: bool,
    probe: impl FnOnce() -> Result<(), KernelError>,
) -> Result<Interface, KernelError> {
    match forced {
        Some("ioctl") if module => Ok(Interface::Ioctl),
        Some("ioctl") => Err(KernelError::ModuleMissing),
        Some("netlink") => probe().map(|()| Interface::Netlink),
        Some(other) => Err(KernelError::BadInterface(other.to_string())),
        None => match probe() {
            Ok(()) => Ok(Interface::Netlink),
            Err(KernelError::ModuleMissing) if module => Ok(Interface::Ioctl),
            Err(e) => Err(e),
        },
    }
}

fn open_device(index: u32) -> Result<File, KernelError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/dev/nbd{index}"))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => KernelError::NotRoot,
            _ => KernelError::Io(e),
        })
}

/// Whether `/dev/nbd<index>` is connected (the kernel shows its owner).
pub fn connected(index: u32) -> bool {
    Path::new(&format!("/sys/block/nbd{index}/pid")).exists()
}

/// The first `/dev/nbdN` that is not connected.
fn free_device() -> Result<u32, KernelError> {
    let mut found: Vec<u32> = std::fs::read_dir("/sys/block")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("nbd")?.parse().ok())
        .collect();
    found.sort_unstable();
    found
        .into_iter()
        .find(|i| !connected(*i))
        .ok_or(KernelError::NoFreeDevice)
}

/// A device connected through the ioctls: a thread sits in `NBD_DO_IT`
/// until the device is disconnected.
pub struct IoctlSession {
    index: u32,
    thread: std::thread::JoinHandle<io::Result<()>>,
}

impl IoctlSession {
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Wait for `NBD_DO_IT` to return (after a disconnect, or when the
    /// kernel gave up on the sockets); the device is cleared by then.
    pub fn wait(self) -> Result<(), KernelError> {
        self.thread
            .join()
            .map_err(|_| KernelError::Io(io::Error::other("NBD_DO_IT thread panicked")))?
            .map_err(KernelError::Io)
    }
}

/// Configure `/dev/nbdN` (the named one, or the first free one) over the
/// ioctls and start it on `socks`; returns once the kernel shows the device
/// connected at its size. The kernel holds its own references to the
/// sockets.
///
/// The `pid` file is not enough: `nbd_start_device` creates it before it
/// gives the disk its capacity (`nbd_set_size` at its end), so a device
/// seen connected can still be 0 bytes for a moment, and a reader opening
/// it then finds an empty disk.
pub fn connect_ioctl(p: &ConnectParams, socks: &[OwnedFd]) -> Result<IoctlSession, KernelError> {
    let index = match p.index {
        Some(i) => i,
        None => free_device()?,
    };
    let dev = open_device(index)?;
    let setup = || -> io::Result<()> {
        nbd_ioctl(dev.as_fd(), Request::SetBlksize, p.block_size)?;
        nbd_ioctl(
            dev.as_fd(),
            Request::SetSizeBlocks,
            p.size / p.block_size.max(1),
        )?;
        nbd_ioctl(dev.as_fd(), Request::SetTimeout, p.timeout)?;
        nbd_ioctl(dev.as_fd(), Request::SetFlags, p.server_flags)?;
        for s in socks {
            nbd_ioctl(dev.as_fd(), Request::SetSock, s.as_raw_fd() as u64)?;
        }
        Ok(())
    };
    if let Err(e) = setup() {
        let _ = nbd_ioctl(dev.as_fd(), Request::ClearSock, 0);
        return Err(match e.raw_os_error() {
            Some(libc::EBUSY) => KernelError::Busy(index),
            Some(libc::EPERM) | Some(libc::EACCES) => KernelError::NotRoot,
            _ => KernelError::Io(e),
        });
    }
    let thread = std::thread::Builder::new()
        .name(format!("nbd{index}-do-it"))
        .spawn(move || {
            let r = nbd_ioctl(dev.as_fd(), Request::DoIt, 0);
            // Whatever ended it: fail what is queued, drop the sockets.
            let _ = nbd_ioctl(dev.as_fd(), Request::ClearQue, 0);
            let _ = nbd_ioctl(dev.as_fd(), Request::ClearSock, 0);
            r
        })?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let size = p.size / p.block_size.max(1) * p.block_size.max(1);
    let started = || connected(index) && device_size(index).ok() == Some(size);
    while !started() {
        if thread.is_finished() {
            let r = thread.join();
            return Err(match r {
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EBUSY) => KernelError::Busy(index),
                Ok(Err(e)) => KernelError::Io(e),
                _ => KernelError::Malformed("NBD_DO_IT returned before the device started"),
            });
        }
        if Instant::now() >= deadline {
            return Err(KernelError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("/dev/nbd{index} did not start within 10s of NBD_DO_IT"),
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(IoctlSession { index, thread })
}

/// `NBD_DISCONNECT` on `/dev/nbd<index>`: the kernel sends NBD_CMD_DISC
/// and shuts the sockets down; the `NBD_DO_IT` thread then returns.
pub fn disconnect_ioctl(index: u32) -> Result<(), KernelError> {
    let dev = open_device(index)?;
    nbd_ioctl(dev.as_fd(), Request::Disconnect, 0)
        .map_err(|e| errno_error(e.raw_os_error().unwrap_or(0), Some(index)))
}

/// The size in bytes of `/dev/nbd<index>` as the block layer has it
/// (`/sys/block/nbdN/size`, in 512-byte sectors whatever the block size).
pub fn device_size(index: u32) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/sys/block/nbd{index}/size"))?;
    sectors_to_bytes(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/sys/block/nbd{index}/size: not a number: {text:?}"),
        )
    })
}

fn sectors_to_bytes(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()?.checked_mul(512)
}

/// What the kernel accepts (`blk_validate_block_size`: a power of two from
/// 512 bytes up to the page size; 64 KiB is the largest page size rlun
/// lets through, the kernel refuses what its own page size does not allow)
/// and what the block layer can show: a whole number of blocks.
fn check_geometry(size: u64, block_size: u64) -> Result<(), KernelError> {
    let ok = block_size.is_power_of_two()
        && (512..=65536).contains(&block_size)
        && size > 0
        && size.is_multiple_of(block_size);
    if ok {
        Ok(())
    } else {
        Err(KernelError::BadGeometry { size, block_size })
    }
}

/// Whether the device shows the size asked for; the kernel answers a
/// request it does not understand the size part of without an error, so
/// only the block layer's own figure tells.
fn check_resized(index: u32, how: &'static str, wanted: u64, now: u64) -> Result<(), KernelError> {
    if now == wanted {
        Ok(())
    } else {
        Err(KernelError::ResizeIgnored {
            index,
            how,
            wanted,
            now,
        })
    }
}

/// Change the size (and block size) of the connected `/dev/nbd<index>`
/// while it runs, through the interface it was connected with (`how`):
///
/// - [`Interface::Netlink`]: `NBD_CMD_RECONFIGURE` with `NBD_ATTR_SIZE_BYTES`
///   and `NBD_ATTR_BLOCK_SIZE_BYTES` (the kernel refuses the ioctls on a
///   netlink-connected device);
/// - [`Interface::Ioctl`]: `NBD_SET_BLKSIZE` when the block size differs
///   from the device's, then `NBD_SET_SIZE`, on a descriptor of the device
///   of our own (the `NBD_DO_IT` thread keeps running).
///
/// Either way the kernel sets the new capacity and tells the block layer
/// (a change uevent; an open file system is not touched: growing it is
/// `resize2fs`'s job, and shrinking under one makes its later I/O past the
/// new end fail). Afterwards the size is read back from sysfs and
/// [`KernelError::ResizeIgnored`] returned when it is not `size`, because an
/// nbd driver without resize support takes the request and ignores the
/// size. `size` must be a positive multiple of `block_size`
/// ([`KernelError::BadGeometry`]); a device that is not connected is
/// [`KernelError::NotConnected`].
pub fn resize(index: u32, size: u64, block_size: u64, how: Interface) -> Result<(), KernelError> {
    check_geometry(size, block_size)?;
    if !connected(index) {
        return Err(KernelError::NotConnected(index));
    }
    let what = match how {
        Interface::Netlink => {
            let mut g = Genl::open()?;
            let family = g.nbd_family()?;
            let (e, _) = g.request(&encode_resize(family, index, size, block_size, g.seq))?;
            match e {
                0 => {}
                libc::EINVAL => return Err(KernelError::ReconfigureRefused(index)),
                e => return Err(errno_error(e, Some(index))),
            }
            "NBD_CMD_RECONFIGURE"
        }
        Interface::Ioctl => {
            let dev = open_device(index)?;
            let current =
                std::fs::read_to_string(format!("/sys/block/nbd{index}/queue/logical_block_size"))?;
            let set = |request, arg| {
                nbd_ioctl(dev.as_fd(), request, arg).map_err(|e| match e.raw_os_error() {
                    Some(libc::EINVAL) => KernelError::IoctlRefused(index),
                    Some(e) => errno_error(e, Some(index)),
                    None => KernelError::Io(e),
                })
            };
            if current.trim().parse::<u64>().ok() != Some(block_size) {
                set(Request::SetBlksize, block_size)?;
            }
            set(Request::SetSize, size)?;
            "NBD_SET_SIZE"
        }
    };
    check_resized(index, what, size, device_size(index)?)
}

/// Disconnect over whichever interface works: netlink, else the ioctl.
pub fn disconnect_any(index: u32) -> Result<(), KernelError> {
    match interface()? {
        Interface::Netlink => disconnect(index),
        Interface::Ioctl => disconnect_ioctl(index),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs_of(msg: &[u8]) -> Vec<(u16, Vec<u8>)> {
        assert_eq!(u32_at(msg, 0).unwrap() as usize, msg.len());
        parse_attrs(&msg[20..]).unwrap()
    }

    #[test]
    fn connect_message_layout() {
        let p = ConnectParams {
            index: None,
            size: 1 << 30,
            block_size: 4096,
            server_flags: flags::HAS_FLAGS | flags::SEND_FLUSH,
            timeout: 30,
            dead_conn_timeout: 120,
        };
        let m = encode_connect(0x22, &p, &[5, 6], 7);
        assert_eq!(u16_at(&m, 4), Some(0x22));
        assert_eq!(u32_at(&m, 8), Some(7));
        assert_eq!(m[16], NBD_CMD_CONNECT);
        let a = attrs_of(&m);
        assert!(!a.iter().any(|(t, _)| *t == NBD_ATTR_INDEX), "kernel picks");
        let get = |t| a.iter().find(|(x, _)| *x == t).unwrap().1.clone();
        assert_eq!(get(NBD_ATTR_SIZE_BYTES), (1u64 << 30).to_ne_bytes());
        assert_eq!(get(NBD_ATTR_BLOCK_SIZE_BYTES), 4096u64.to_ne_bytes());
        assert_eq!(get(NBD_ATTR_SERVER_FLAGS), 5u64.to_ne_bytes());
        assert_eq!(get(NBD_ATTR_DEAD_CONN_TIMEOUT), 120u64.to_ne_bytes());
        let items = parse_attrs(&get(NBD_ATTR_SOCKETS)).unwrap();
        let fds: Vec<u32> = items
            .iter()
            .map(|(t, p)| {
                assert_eq!(*t, NBD_SOCK_ITEM);
                let inner = parse_attrs(p).unwrap();
                assert_eq!(inner[0].0, NBD_SOCK_FD);
                u32_at(&inner[0].1, 0).unwrap()
            })
            .collect();
        assert_eq!(fds, [5, 6]);
    }

    #[test]
    fn index_is_sent_when_named() {
        let p = ConnectParams {
            index: Some(3),
            size: 512,
            block_size: 512,
            server_flags: flags::HAS_FLAGS,
            timeout: 30,
            dead_conn_timeout: 30,
        };
        let a = attrs_of(&encode_connect(1, &p, &[9], 1));
        assert_eq!(a[0], (NBD_ATTR_INDEX, 3u32.to_ne_bytes().to_vec()));
        let d = attrs_of(&encode_disconnect(1, 3, 2));
        assert_eq!(d, [(NBD_ATTR_INDEX, 3u32.to_ne_bytes().to_vec())]);
    }

    #[test]
    fn resize_message_layout() {
        let m = encode_resize(0x22, 3, 64 << 20, 4096, 9);
        assert_eq!(u16_at(&m, 4), Some(0x22));
        assert_eq!(u16_at(&m, 6), Some(NLM_F_REQUEST | NLM_F_ACK));
        assert_eq!(u32_at(&m, 8), Some(9));
        assert_eq!(m[16], NBD_CMD_RECONFIGURE);
        // <linux/nbd-netlink.h>: UNSPEC, CONNECT, DISCONNECT, RECONFIGURE,
        // LINK_DEAD, STATUS. (5 is NBD_CMD_STATUS, which the kernel answers
        // with success and no change.)
        assert_eq!(NBD_CMD_RECONFIGURE, 3);
        assert_eq!(m[17], 1, "genl version");
        // Exactly the index (u32), the size and the block size (u64 each),
        // nothing that would also reconfigure timeouts, flags or sockets.
        assert_eq!(
            attrs_of(&m),
            [
                (NBD_ATTR_INDEX, 3u32.to_ne_bytes().to_vec()),
                (NBD_ATTR_SIZE_BYTES, (64u64 << 20).to_ne_bytes().to_vec()),
                (NBD_ATTR_BLOCK_SIZE_BYTES, 4096u64.to_ne_bytes().to_vec()),
            ]
        );
        assert_eq!(m.len(), 20 + 8 + 12 + 12);
    }

    #[test]
    fn resize_geometry_is_checked_before_the_kernel_is_asked() {
        assert!(check_geometry(64 << 20, 4096).is_ok());
        assert!(check_geometry(512, 512).is_ok());
        assert!(check_geometry(1 << 40, 65536).is_ok());
        for (size, bs) in [
            (0, 512),
            (4096 + 512, 4096),
            (8192, 3000),
            (8192, 256),
            (1 << 20, 1 << 17),
        ] {
            let e = check_geometry(size, bs).unwrap_err();
            assert!(
                matches!(e, KernelError::BadGeometry { size: s, block_size: b } if s == size && b == bs),
                "{size}/{bs}: {e}"
            );
        }
        // Before any netlink or device access: no nbd device 15 here.
        assert!(matches!(
            resize(15, 0, 512, Interface::Netlink),
            Err(KernelError::BadGeometry { .. })
        ));
    }

    #[test]
    fn resize_is_confirmed_by_the_block_layer_size() {
        assert_eq!(sectors_to_bytes("131072\n"), Some(64 << 20));
        assert_eq!(sectors_to_bytes("0"), Some(0));
        assert_eq!(sectors_to_bytes("x"), None);
        assert_eq!(sectors_to_bytes(&u64::MAX.to_string()), None);
        assert!(check_resized(2, "NBD_CMD_RECONFIGURE", 64 << 20, 64 << 20).is_ok());
        // An nbd driver that takes the request but ignores the size.
        let e = check_resized(2, "NBD_CMD_RECONFIGURE", 64 << 20, 32 << 20).unwrap_err();
        assert!(matches!(
            e,
            KernelError::ResizeIgnored { index: 2, wanted, now, .. } if wanted == 64 << 20 && now == 32 << 20
        ));
        let text = e.to_string();
        assert!(
            text.contains("/dev/nbd2") && text.contains("33554432"),
            "{text}"
        );
        assert!(
            text.contains("cannot resize a running device through NBD_CMD_RECONFIGURE"),
            "{text}"
        );
    }

    /// A device that is not connected is refused before the kernel is
    /// asked (on a host without the nbd module no device is connected).
    #[test]
    fn resize_of_a_device_that_is_not_connected() {
        if connected(15) {
            eprintln!("SKIP: /dev/nbd15 is connected on this host");
            return;
        }
        for how in [Interface::Netlink, Interface::Ioctl] {
            let e = resize(15, 1 << 20, 4096, how).unwrap_err();
            assert!(matches!(e, KernelError::NotConnected(15)), "{e}");
        }
    }

    #[test]
    fn replies_parse_and_reject_bad_lengths() {
        // A GETFAMILY answer carrying a family id, then an ACK.
        let mut attrs = Vec::new();
        put_attr(&mut attrs, CTRL_ATTR_FAMILY_ID, &0x1234u16.to_ne_bytes());
        let mut dg = message(GENL_ID_CTRL, 1, 1, &attrs);
        let mut ack = Vec::new();
        ack.extend_from_slice(&36u32.to_ne_bytes());
        ack.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack.extend_from_slice(&[0; 10]);
        ack.extend_from_slice(&(-libc::ENOENT).to_ne_bytes());
        ack.extend_from_slice(&[0; 16]);
        dg.extend_from_slice(&ack);
        let r = parse_reply(&dg).unwrap();
        assert_eq!(family_id(&r), Some(0x1234));
        assert_eq!(r[1], Reply::Ack(libc::ENOENT));
        // Truncated: the header claims more than the datagram holds.
        let mut bad = dg.clone();
        bad[0] = 0xff;
        assert!(matches!(parse_reply(&bad), Err(KernelError::Malformed(_))));
        let mut bad_attr = message(GENL_ID_CTRL, 1, 1, &[200, 0, 1, 0]);
        bad_attr.truncate(24);
        assert!(matches!(
            parse_reply(&bad_attr),
            Err(KernelError::Malformed(_))
        ));
    }

    #[test]
    fn interface_choice() {
        use Interface::*;
        let missing = || Err(KernelError::ModuleMissing);
        let found = || Ok(());
        // Netlink when the family exists; the ioctls when the module is
        // loaded without it (kernels before 4.12); else `modprobe nbd`.
        assert_eq!(choose_interface(None, true, found).unwrap(), Netlink);
        assert_eq!(choose_interface(None, true, missing).unwrap(), Ioctl);
        assert!(matches!(
            choose_interface(None, false, missing),
            Err(KernelError::ModuleMissing)
        ));
        // Forced.
        assert_eq!(choose_interface(Some("ioctl"), true, found).unwrap(), Ioctl);
        assert!(matches!(
            choose_interface(Some("ioctl"), false, missing),
            Err(KernelError::ModuleMissing)
        ));
        assert_eq!(
            choose_interface(Some("netlink"), true, found).unwrap(),
            Netlink
        );
        assert!(matches!(
            choose_interface(Some("netlink"), true, missing),
            Err(KernelError::ModuleMissing)
        ));
        let e = choose_interface(Some("ioctls"), true, found).unwrap_err();
        assert!(matches!(e, KernelError::BadInterface(_)));
        assert!(e.to_string().contains("RLUN_NBD_INTERFACE=ioctls"), "{e}");
    }

    /// Without the module, forcing the ioctls still says `modprobe nbd`.
    #[test]
    fn interface_reports_the_module_state() {
        let loaded = std::path::Path::new("/sys/module/nbd").exists();
        match interface() {
            Ok(_) => assert!(loaded),
            Err(KernelError::ModuleMissing) => assert!(!loaded),
            Err(e) => panic!("unexpected: {e}"),
        }
    }

    #[test]
    fn errno_mapping() {
        assert!(matches!(
            errno_error(libc::EPERM, None),
            KernelError::NotRoot
        ));
        assert!(matches!(
            errno_error(libc::EBUSY, Some(2)),
            KernelError::Busy(2)
        ));
    }

    /// On a host without the nbd module the family lookup says so (in the
    /// lab VM, where the module is loaded, it finds the family instead).
    #[test]
    fn probe_reports_the_module_state() {
        let loaded = std::path::Path::new("/sys/module/nbd").exists();
        match probe() {
            Ok(()) => assert!(loaded, "nbd family found but /sys/module/nbd missing"),
            Err(KernelError::ModuleMissing) => assert!(!loaded),
            Err(e) => panic!("unexpected: {e}"),
        }
    }

    #[test]
    fn flush_device_syncs_what_it_can_open_and_reports_what_it_cannot() {
        let dir = std::env::temp_dir().join(format!("rlun-flushdev-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("dev");
        std::fs::write(&f, b"buffered").unwrap();
        flush_device(&f, Duration::from_secs(30)).unwrap();
        let e = flush_device(&dir.join("missing"), Duration::from_secs(30)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        // A device whose open never returns (here a FIFO without a writer)
        // is given up after the timeout.
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = flush_device(&fifo, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // Let the blocked thread go (its open returns once a writer comes).
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
