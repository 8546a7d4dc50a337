//! A fault-injecting TCP proxy between rlun and a real target (tgtd).
//!
//! It forwards both directions byte for byte, and on command (see
//! [`Fault`], settable at any time with [`FaultProxy::set_fault`]):
//!
//! - corrupts the first PDU after login: once the target's final Login
//!   Response (T bit, NSG = full feature phase, RFC 7143 §11.13) has gone
//!   through, the proxy sends a garbage PDU header to the initiator and
//!   closes the connection — a target that accepts every login and then
//!   misbehaves;
//! - swallows: lets the login through, then forwards nothing more to the
//!   initiator while the connection stays open — a target that goes silent
//!   after every login;
//! - delays everything the target sends by a fixed time;
//! - drops: closes every current connection and each new one at once;
//! - rewrites: hands every PDU the target sends after login to a
//!   [`Rewrite`] function that may change its header or data — a target
//!   that gets the protocol wrong in one precise way (Data-In past the
//!   buffer, an R2T for more than the write, sequence numbers going
//!   backwards) while tgtd does the rest of the work.
//!
//! The proxy follows the target's PDUs during login, where digests are
//! never used, and after login only while rewriting (so rewriting needs a
//! session without digests); otherwise it copies bytes without looking at
//! them.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::hostile::{
    data_segment_length, read_pdu, BHS_LEN, OP_LOGIN_RESPONSE, STAGE_FULL_FEATURE,
};

/// What the proxy does to the connections it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward faithfully.
    None,
    /// Let the login through, then send the initiator a garbage PDU header
    /// and close the connection.
    CorruptAfterLogin,
    /// Let the login through, then forward nothing more to the initiator,
    /// keeping the connection open.
    SwallowAfterLogin,
    /// Hold everything the target sends for this long before forwarding it.
    Delay(Duration),
    /// Close every connection (current and new) at once.
    Drop,
}

/// Changes one PDU from the target after login: its 48-byte BHS and its
/// data segment (padding removed; the proxy fixes DataSegmentLength and
/// the padding after the call). Returns whether it changed anything.
pub type Rewrite = fn(bhs: &mut [u8], data: &mut Vec<u8>) -> bool;

/// A listener on 127.0.0.1 that forwards each connection to `upstream`,
/// injecting the current [`Fault`]. Dropping it stops accepting and closes
/// the connections it carries.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    fault: Mutex<Fault>,
    stop: AtomicBool,
    connections: AtomicUsize,
    logins: AtomicUsize,
    corrupted: AtomicUsize,
    swallowed: AtomicUsize,
    rewrite: Mutex<Option<Rewrite>>,
    rewritten: AtomicUsize,
    /// Both sockets of every connection, to close them on `Drop`.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
}

impl Shared {
    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FaultProxy {
    /// Start forwarding to `upstream` (e.g. a tgtd portal). Panics if it
    /// cannot bind (test set-up).
    pub fn start(upstream: SocketAddr, fault: Fault) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the proxy on 127.0.0.1");
        let addr = listener.local_addr().expect("proxy local address");
        let shared = Arc::new(Shared {
            fault: Mutex::new(fault),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            logins: AtomicUsize::new(0),
            corrupted: AtomicUsize::new(0),
            swallowed: AtomicUsize::new(0),
            rewrite: Mutex::new(None),
            rewritten: AtomicUsize::new(0),
            open: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = stream else { continue };
                s.connections.fetch_add(1, Ordering::SeqCst);
                if s.fault() == Fault::Drop {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(sv)) = (client.try_clone(), server.try_clone()) {
                    s.open
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((c, sv));
                }
                let s2 = Arc::clone(&s);
                let (c2, sv2) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(sv)) => (c, sv),
                    _ => continue,
                };
                thread::spawn(move || copy_raw(c2, sv2));
                thread::spawn(move || target_to_initiator(server, client, &s2));
            }
        });
        FaultProxy { addr, shared }
    }

    /// `127.0.0.1:PORT`.
    pub fn portal(&self) -> String {
        self.addr.to_string()
    }

    /// `iscsi://127.0.0.1:PORT/IQN/LUN`.
    pub fn url(&self, iqn: &str, lun: u32) -> String {
        format!("iscsi://{}/{iqn}/{lun}", self.addr)
    }

    /// `iscsi://127.0.0.1:PORT/IQN` (every LUN of the target).
    pub fn target_url(&self, iqn: &str) -> String {
        format!("iscsi://{}/{iqn}", self.addr)
    }

    /// Change the fault; [`Fault::Drop`] also closes the current connections.
    pub fn set_fault(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
        if fault == Fault::Drop {
            self.close_all();
        }
    }

    /// Rewrite every PDU the target sends after a login that completes from
    /// now on (connections already in the full feature phase keep being
    /// copied as they are); `None` stops rewriting on new connections.
    pub fn set_rewrite(&self, rewrite: Option<Rewrite>) {
        *self
            .shared
            .rewrite
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = rewrite;
    }

    /// PDUs the [`Rewrite`] function changed so far.
    pub fn rewritten(&self) -> usize {
        self.shared.rewritten.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Logins that completed through the proxy so far.
    pub fn logins(&self) -> usize {
        self.shared.logins.load(Ordering::SeqCst)
    }

    /// Connections the proxy broke right after login so far.
    pub fn corrupted(&self) -> usize {
        self.shared.corrupted.load(Ordering::SeqCst)
    }

    /// Connections the proxy went silent on after login so far.
    pub fn swallowed(&self) -> usize {
        self.shared.swallowed.load(Ordering::SeqCst)
    }

    fn close_all(&self) {
        let open = std::mem::take(&mut *self.shared.open.lock().unwrap_or_else(|e| e.into_inner()));
        for (c, s) in open {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.close_all();
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Initiator → target: plain copy until either side closes.
fn copy_raw(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// Target → initiator: follow the login PDUs to see when the full feature
/// phase starts, then apply the fault.
fn target_to_initiator(mut server: TcpStream, mut client: TcpStream, shared: &Shared) {
    let close = |a: &TcpStream, b: &TcpStream| {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    };
    // Login phase: whole PDUs (no digests during login).
    loop {
        let Ok((bhs, rest)) = read_pdu(&mut server) else {
            return close(&server, &client);
        };
        delay(shared);
        if client.write_all(&bhs).is_err() || client.write_all(&rest).is_err() {
            return close(&server, &client);
        }
        let login_done = bhs[0] & 0x3f == OP_LOGIN_RESPONSE
            && bhs[1] & 0x80 != 0
            && bhs[1] & 0x03 == STAGE_FULL_FEATURE;
        if login_done {
            break;
        }
    }
    shared.logins.fetch_add(1, Ordering::SeqCst);
    if shared.fault() == Fault::CorruptAfterLogin {
        // A header no target sends: opcode 0x3f is not defined (§11.2.1.2).
        let mut garbage = [0xa5u8; BHS_LEN];
        garbage[0] = 0x3f;
        garbage[4] = 0; // TotalAHSLength
        garbage[5..8].copy_from_slice(&[0, 0, 0]); // DataSegmentLength
        let _ = client.write_all(&garbage);
        shared.corrupted.fetch_add(1, Ordering::SeqCst);
        // Let the initiator read it before the connection goes.
        thread::sleep(Duration::from_millis(100));
        return close(&server, &client);
    }
    let rewrite = *shared.rewrite.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rewrite) = rewrite {
        while let Ok((mut bhs, mut data)) = read_pdu(&mut server) {
            // read_pdu returns AHS + padded data; keep the data proper.
            let ahs = usize::from(bhs[4]) * 4;
            let dsl = data_segment_length(&bhs) as usize;
            let mut segment = data.split_off(ahs.min(data.len()));
            segment.truncate(dsl);
            if rewrite(&mut bhs, &mut segment) {
                shared.rewritten.fetch_add(1, Ordering::SeqCst);
            }
            let len = (segment.len() as u32).to_be_bytes();
            bhs[5..8].copy_from_slice(&len[1..]);
            segment.resize(segment.len().div_ceil(4) * 4, 0);
            delay(shared);
            if client.write_all(&bhs).is_err()
                || client.write_all(&data).is_err()
                || client.write_all(&segment).is_err()
            {
                break;
            }
        }
        return close(&server, &client);
    }
    let mut buf = vec![0u8; 256 * 1024];
    if shared.fault() == Fault::SwallowAfterLogin {
        shared.swallowed.fetch_add(1, Ordering::SeqCst);
        // Read and discard what the target answers; the initiator hears
        // nothing more until it gives up on the connection.
        while matches!(server.read(&mut buf), Ok(n) if n > 0) {}
        return close(&server, &client);
    }
    loop {
        let n = match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        delay(shared);
        if shared.fault() == Fault::Drop || client.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    close(&server, &client);
}

fn delay(shared: &Shared) {
    if let Fault::Delay(d) = shared.fault() {
        thread::sleep(d);
    }
}
