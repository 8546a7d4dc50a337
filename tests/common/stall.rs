//! A TCP proxy in front of a real target that lets every login through and
//! then goes silent: the first PDU the initiator sends in the full feature
//! phase (anything but a Login Request) and everything after it, in both
//! directions, is swallowed while the connections stay open. Every new
//! connection gets the same treatment, so an initiator logs in again and
//! again and never gets an answer to a command — a target that accepts the
//! login and then misbehaves.
//!
//! PDU framing (RFC 7143 §11.2): a 48-byte BHS, TotalAHSLength (byte 4) in
//! 4-byte words, DataSegmentLength (bytes 5..8) padded to 4 bytes. The
//! proxy assumes no digests (tgtd's default).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Login Request opcode (§11.12), without the Immediate bit.
const OP_LOGIN_REQUEST: u8 = 0x03;
const BHS_LEN: usize = 48;

/// See the module docs. Dropping it stops accepting and closes the
/// connections it holds.
pub struct StallAfterLogin {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    logins: Arc<AtomicUsize>,
}

impl StallAfterLogin {
    /// Listen on a free loopback port and forward to `upstream`.
    pub fn start(upstream: SocketAddr) -> StallAfterLogin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stalling proxy");
        let addr = listener.local_addr().expect("proxy address");
        let stop = Arc::new(AtomicBool::new(false));
        let logins = Arc::new(AtomicUsize::new(0));
        let (stop2, logins2) = (stop.clone(), logins.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let stalled = Arc::new(AtomicBool::new(false));
                spawn_pump(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                    stalled.clone(),
                    stop2.clone(),
                    Some(logins2.clone()),
                );
                spawn_pump(server, client, stalled, stop2.clone(), None);
            }
        });
        StallAfterLogin { addr, stop, logins }
    }

    /// `iscsi://` URL of LUN `lun` of `iqn` through the proxy.
    pub fn url(&self, iqn: &str, lun: u32) -> String {
        format!("iscsi://{}/{iqn}/{lun}", self.addr)
    }

    /// `iscsi://` URL of target `iqn` through the proxy.
    pub fn target_url(&self, iqn: &str) -> String {
        format!("iscsi://{}/{iqn}", self.addr)
    }

    /// Connections on which a full-feature PDU was swallowed.
    pub fn stalled_sessions(&self) -> usize {
        self.logins.load(Ordering::SeqCst)
    }
}

impl Drop for StallAfterLogin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copy `from` → `to`. The client→server pump (`count` set) frames PDUs
/// and sets `stalled` at the first one that is not a Login Request; from
/// then on both pumps drop what they read.
fn spawn_pump(
    mut from: TcpStream,
    mut to: TcpStream,
    stalled: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    count: Option<Arc<AtomicUsize>>,
) {
    thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    continue
                }
                Err(_) => break,
            };
            if stalled.load(Ordering::SeqCst) {
                continue;
            }
            let Some(count) = &count else {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                continue;
            };
            pending.extend_from_slice(&buf[..n]);
            // Forward whole login PDUs; stall at the first other one.
            while pending.len() >= BHS_LEN {
                let ahs = pending[4] as usize * 4;
                let data = u32::from_be_bytes([0, pending[5], pending[6], pending[7]]) as usize;
                let len = BHS_LEN + ahs + data.div_ceil(4) * 4;
                if pending.len() < len {
                    break;
                }
                if pending[0] & 0x3f != OP_LOGIN_REQUEST {
                    stalled.store(true, Ordering::SeqCst);
                    count.fetch_add(1, Ordering::SeqCst);
                    pending.clear();
                    break;
                }
                let pdu: Vec<u8> = pending.drain(..len).collect();
                if to.write_all(&pdu).is_err() {
                    return;
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}
