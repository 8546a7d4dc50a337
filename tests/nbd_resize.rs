//! `rlun::nbd::kernel::resize` against the kernel's nbd driver: a device
//! connected over netlink and one connected through the ioctls are grown
//! while they run (the block layer's size changes, a read past the old end
//! reaches the server, a write there lands in the server's data), shrunk,
//! and refused a resize through the other interface.
//!
//! The server is a few lines of NBD transmission phase over a socketpair,
//! serving a `Vec` that the test grows before it resizes the device (as a
//! LUN grows before rlun learns of it). Needs root and the nbd module, so
//! the tests are `#[ignore]`d on the host; the VM lab runs them
//! (`27-rlun-nbd-resize`: `nbd_resize-* --ignored --test-threads 1`).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rlun::nbd::kernel::{self, flags, ConnectParams, Interface, KernelError};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;

/// One device at a time: the ioctl path picks the first free device, which
/// a netlink connect running alongside could take first.
static DEVICES: Mutex<()> = Mutex::new(());

const REQUEST_MAGIC: u32 = 0x2560_9513;
const REPLY_MAGIC: u32 = 0x6744_6698;

/// Bytes that differ from block to block and from run to run of `seed`.
fn pattern(len: u64, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Serve `data` on `sock` until the kernel disconnects: read, write, flush
/// and disconnect; a request past the end of `data` fails with EINVAL.
fn serve(mut sock: UnixStream, data: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut head = [0u8; 28];
        while sock.read_exact(&mut head).is_ok() {
            let be32 = |at: usize| u32::from_be_bytes(head[at..at + 4].try_into().unwrap());
            let be64 = |at: usize| u64::from_be_bytes(head[at..at + 8].try_into().unwrap());
            assert_eq!(be32(0), REQUEST_MAGIC, "request magic");
            let (ty, handle, off, len) = (be32(4) & 0xffff, &head[8..16], be64(16), be32(24));
            let mut reply = REPLY_MAGIC.to_be_bytes().to_vec();
            let end = off + u64::from(len);
            let mut payload = Vec::new();
            let mut error = 0u32;
            match ty {
                0 | 1 => {
                    let mut d = data.lock().unwrap();
                    let mut body = vec![0u8; len as usize];
                    if ty == 1 {
                        sock.read_exact(&mut body).unwrap();
                    }
                    if end > d.len() as u64 {
                        error = libc::EINVAL as u32;
                    } else if ty == 0 {
                        payload = d[off as usize..end as usize].to_vec();
                    } else {
                        d[off as usize..end as usize].copy_from_slice(&body);
                    }
                }
                2 => return,
                _ => {}
            }
            reply.extend_from_slice(&error.to_be_bytes());
            reply.extend_from_slice(handle);
            reply.extend_from_slice(&payload);
            if sock.write_all(&reply).is_err() {
                return;
            }
        }
    })
}

/// A device connected to a served `data` through `how`.
struct Device {
    index: u32,
    how: Interface,
    data: Arc<Mutex<Vec<u8>>>,
    server: Option<JoinHandle<()>>,
    ioctl: Option<kernel::IoctlSession>,
}

impl Device {
    fn connect(how: Interface, size: u64) -> Device {
        let data = Arc::new(Mutex::new(pattern(size, 1)));
        let (kernel_end, ours) = UnixStream::pair().unwrap();
        let server = serve(ours, data.clone());
        let params = ConnectParams {
            index: None,
            size,
            block_size: BLOCK,
            server_flags: flags::HAS_FLAGS | flags::SEND_FLUSH,
            timeout: 30,
            dead_conn_timeout: 30,
        };
        let socks = [OwnedFd::from(kernel_end)];
        let (index, ioctl) = match how {
            Interface::Netlink => (kernel::connect(&params, &socks).unwrap(), None),
            Interface::Ioctl => {
                let s = kernel::connect_ioctl(&params, &socks).unwrap();
                (s.index(), Some(s))
            }
        };
        eprintln!("/dev/nbd{index} connected through {how:?}, {size} bytes");
        Device {
            index,
            how,
            data,
            server: Some(server),
            ioctl,
        }
    }

    fn path(&self) -> String {
        format!("/dev/nbd{}", self.index)
    }

    fn open(&self) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path())
            .unwrap()
    }

    /// The server's LUN grows (or shrinks) to `size`, new bytes from `seed`.
    fn set_data_len(&self, size: u64, seed: u64) {
        let mut d = self.data.lock().unwrap();
        let old = d.len() as u64;
        if size > old {
            d.extend_from_slice(&pattern(size - old, seed));
        } else {
            d.truncate(size as usize);
        }
    }

    fn read_at(&self, off: u64, len: u64) -> Vec<u8> {
        let mut buf = vec![0u8; len as usize];
        let n = self.open().read_at(&mut buf, off).unwrap();
        buf.truncate(n);
        buf
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let r = match self.how {
            Interface::Netlink => kernel::disconnect(self.index),
            Interface::Ioctl => kernel::disconnect_ioctl(self.index),
        };
        if let Err(e) = r {
            eprintln!("disconnect /dev/nbd{}: {e}", self.index);
        }
        if let Some(s) = self.ioctl.take() {
            let _ = s.wait();
        }
        if let Some(t) = self.server.take() {
            let _ = t.join();
        }
    }
}

fn root_with_nbd() -> bool {
    std::path::Path::new("/sys/module/nbd").exists() && std::fs::metadata("/dev/nbd0").is_ok()
}

/// Grow, check the old data and the new, write past the old end, shrink,
/// and try the other interface, which the kernel must refuse.
fn grow_and_shrink(how: Interface) {
    assert!(
        root_with_nbd(),
        "needs root and the nbd module (modprobe nbd)"
    );
    let _one = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = std::time::Instant::now();
    let step = |what: &str| eprintln!("[{:6.2}s] {how:?}: {what}", t0.elapsed().as_secs_f64());
    let dev = Device::connect(how, 4 * MIB);
    let i = dev.index;
    assert_eq!(kernel::device_size(i).unwrap(), 4 * MIB);
    let before = dev.read_at(0, 4 * MIB);
    assert_eq!(before, dev.data.lock().unwrap()[..], "the first 4 MiB");
    assert!(
        dev.read_at(4 * MIB, MIB).is_empty(),
        "nothing past the end yet"
    );

    step("connected, first 4 MiB read");
    // Grow: the LUN first, then the device.
    dev.set_data_len(12 * MIB, 2);
    kernel::resize(i, 12 * MIB, BLOCK, how).unwrap();
    assert_eq!(kernel::device_size(i).unwrap(), 12 * MIB);
    let grown = dev.read_at(0, 12 * MIB);
    assert_eq!(grown.len() as u64, 12 * MIB, "a read to the new end");
    assert_eq!(
        grown[..4 * MIB as usize],
        before[..],
        "the old part unchanged"
    );
    assert_eq!(
        grown,
        dev.data.lock().unwrap()[..],
        "the new part is the server's"
    );

    step("grown to 12 MiB and read");
    // A write past the old end reaches the server.
    let written = pattern(MIB, 3);
    let f = dev.open();
    f.write_all_at(&written, 10 * MIB).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let on_server = dev.data.lock().unwrap()[10 * MIB as usize..11 * MIB as usize].to_vec();
    assert_eq!(
        on_server, written,
        "the write past the old end on the server"
    );

    step("written past the old end");
    // The other interface is refused and changes nothing.
    let other = match how {
        Interface::Netlink => Interface::Ioctl,
        Interface::Ioctl => Interface::Netlink,
    };
    let e = kernel::resize(i, 16 * MIB, BLOCK, other).unwrap_err();
    eprintln!("resize of /dev/nbd{i} ({how:?}) through {other:?}: {e}");
    match how {
        Interface::Netlink => assert!(matches!(e, KernelError::IoctlRefused(n) if n == i), "{e}"),
        Interface::Ioctl => assert!(
            matches!(e, KernelError::ReconfigureRefused(n) if n == i),
            "{e}"
        ),
    }
    assert_eq!(kernel::device_size(i).unwrap(), 12 * MIB);

    step("the other interface refused");
    // Shrink: the device ends at the new size at once.
    kernel::resize(i, 2 * MIB, BLOCK, how).unwrap();
    assert_eq!(kernel::device_size(i).unwrap(), 2 * MIB);
    assert!(
        dev.read_at(3 * MIB, 4096).is_empty(),
        "nothing past the new end"
    );
    assert_eq!(dev.read_at(0, 2 * MIB), before[..2 * MIB as usize]);
    dev.set_data_len(2 * MIB, 0);
    step("shrunk to 2 MiB");
    std::thread::sleep(Duration::from_millis(100));
    drop(dev);
    step("disconnected");
}

#[test]
#[ignore = "needs root and the nbd module: run by the VM lab (27-rlun-nbd-resize)"]
fn resize_a_netlink_connected_device() {
    grow_and_shrink(Interface::Netlink);
}

#[test]
#[ignore = "needs root and the nbd module: run by the VM lab (27-rlun-nbd-resize)"]
fn resize_an_ioctl_connected_device() {
    grow_and_shrink(Interface::Ioctl);
}
