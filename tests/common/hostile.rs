//! A tiny raw-TCP "target" that answers the first login request with
//! scripted, deliberately malformed bytes, and raw login-PDU helpers for
//! tests that play the initiator themselves.
//!
//! PDU layouts: Basic Header Segment RFC 7143 §11.2, Login Request §11.12,
//! Login Response §11.13, text keys §6.1.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Length of a Basic Header Segment (RFC 7143 §11.2).
pub const BHS_LEN: usize = 48;
/// Login Request opcode (§11.12), without the Immediate bit.
pub const OP_LOGIN_REQUEST: u8 = 0x03;
/// Login Response opcode (§11.13).
pub const OP_LOGIN_RESPONSE: u8 = 0x23;
/// Login stage numbers for CSG/NSG (§11.12.3).
pub const STAGE_SECURITY: u8 = 0;
pub const STAGE_OPERATIONAL: u8 = 1;
pub const STAGE_FULL_FEATURE: u8 = 3;

/// Builds a response from the received login request BHS (48 bytes), e.g.
/// to echo its ITT. Plain functions and non-capturing closures fit.
pub type Responder = fn(&[u8]) -> Vec<u8>;

/// What the hostile target does after it has read one login request
/// (BHS + AHS + padded data segment) on a connection.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Send these raw bytes, then keep the connection open.
    Bytes(Vec<u8>),
    /// Send these raw bytes, then close the connection.
    BytesThenClose(Vec<u8>),
    /// Close the connection without answering.
    CloseImmediately,
    /// Never answer; keep the connection open.
    Silent,
    /// Send what the responder builds from the request, keep the connection open.
    Reply(Responder),
    /// Send what the responder builds from the request, then close.
    ReplyThenClose(Responder),
}

/// A listener on 127.0.0.1 that runs one [`Behaviour`] for every connection.
/// Dropping it stops accepting and closes the connections it still holds.
#[derive(Debug)]
pub struct HostileTarget {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    connections: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl HostileTarget {
    /// Start listening on a free loopback port. Panics if it cannot bind
    /// (test set-up).
    pub fn start(behaviour: Behaviour) -> HostileTarget {
        let listener =
            TcpListener::bind("127.0.0.1:0").expect("binding the hostile target on 127.0.0.1");
        let addr = listener.local_addr().expect("hostile target local address");
        let target = HostileTarget {
            addr,
            stop: Arc::new(AtomicBool::new(false)),
            connections: Arc::new(AtomicUsize::new(0)),
            received: Arc::new(Mutex::new(Vec::new())),
        };
        let stop = Arc::clone(&target.stop);
        let connections = Arc::clone(&target.connections);
        let received = Arc::clone(&target.received);
        thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                connections.fetch_add(1, Ordering::SeqCst);
                let behaviour = behaviour.clone();
                let stop = Arc::clone(&stop);
                let received = Arc::clone(&received);
                thread::spawn(move || serve(stream, &behaviour, &stop, &received));
            }
        });
        target
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:PORT`.
    pub fn portal(&self) -> String {
        self.addr.to_string()
    }

    /// `iscsi://127.0.0.1:PORT/IQN/LUN`.
    pub fn url(&self, iqn: &str, lun: u32) -> String {
        format!("iscsi://{}/{iqn}/{lun}", self.addr)
    }

    /// How many connections were accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Every login request PDU received so far (BHS + AHS + padded data).
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for HostileTarget {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(
    mut stream: TcpStream,
    behaviour: &Behaviour,
    stop: &AtomicBool,
    received: &Mutex<Vec<Vec<u8>>>,
) {
    let Ok((bhs, rest)) = read_pdu(&mut stream) else {
        return;
    };
    if stop.load(Ordering::SeqCst) {
        return;
    }
    if let Ok(mut r) = received.lock() {
        let mut pdu = bhs.clone();
        pdu.extend_from_slice(&rest);
        r.push(pdu);
    }
    let (reply, keep_open) = match behaviour {
        Behaviour::Bytes(b) => (b.clone(), true),
        Behaviour::BytesThenClose(b) => (b.clone(), false),
        Behaviour::CloseImmediately => (Vec::new(), false),
        Behaviour::Silent => (Vec::new(), true),
        Behaviour::Reply(f) => (f(&bhs), true),
        Behaviour::ReplyThenClose(f) => (f(&bhs), false),
    };
    if !reply.is_empty()
        && stream
            .write_all(&reply)
            .and_then(|_| stream.flush())
            .is_err()
    {
        return;
    }
    if keep_open {
        // Hold the connection until the peer closes it or the target is dropped;
        // whatever the peer sends is read and ignored.
        let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
        let mut sink = [0u8; 4096];
        while !stop.load(Ordering::SeqCst) {
            match stream.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                // EINTR: a read with SO_RCVTIMEO can return it with no signal
                // handler installed, e.g. after the process was stopped or
                // frozen and resumed (signal(7)); seen here under load. It
                // must not close the connection.
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Read one PDU: the 48-byte BHS, then TotalAHSLength*4 bytes of AHS and the
/// data segment padded to a multiple of 4 (no digests: as during login).
/// Returns (BHS, AHS + padded data).
pub fn read_pdu(stream: &mut impl Read) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut bhs = vec![0u8; BHS_LEN];
    stream.read_exact(&mut bhs)?;
    let ahs_len = usize::from(bhs[4]) * 4;
    let data_len = data_segment_length(&bhs) as usize;
    let mut rest = vec![0u8; ahs_len + padded(data_len)];
    stream.read_exact(&mut rest)?;
    Ok((bhs, rest))
}

/// The 24-bit DataSegmentLength at BHS bytes 5..8 (§11.2.1.4).
pub fn data_segment_length(bhs: &[u8]) -> u32 {
    u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]])
}

fn padded(len: usize) -> usize {
    (len + 3) & !3
}

/// ITT at BHS bytes 16..20.
pub fn itt(bhs: &[u8]) -> u32 {
    u32::from_be_bytes([bhs[16], bhs[17], bhs[18], bhs[19]])
}

/// `key=value\0` text for a data segment (§6.1).
pub fn text_keys(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Parse `key=value\0...` text; entries without '=' or not UTF-8 are skipped.
pub fn parse_text_keys(data: &[u8]) -> Vec<(String, String)> {
    data.split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A Login Request PDU (§11.12) with Transit set, moving from stage `csg` to
/// `nsg`, carrying `text` as its data segment (padded to 4 bytes).
pub fn login_request(itt: u32, csg: u8, nsg: u8, text: &[u8]) -> Vec<u8> {
    let mut pdu = vec![0u8; BHS_LEN];
    pdu[0] = 0x40 | OP_LOGIN_REQUEST; // I bit (always set for login) + opcode
    pdu[1] = 0x80 | ((csg & 3) << 2) | (nsg & 3); // T, C=0, CSG, NSG
    pdu[2] = 0x00; // Version-max
    pdu[3] = 0x00; // Version-min
    pdu[4] = 0; // TotalAHSLength
    pdu[5..8].copy_from_slice(&(text.len() as u32).to_be_bytes()[1..]); // DataSegmentLength
    pdu[8..14].copy_from_slice(&[0x80, 0x00, 0x12, 0x34, 0x56, 0x78]); // ISID: random format (T=10)
    pdu[14..16].copy_from_slice(&0u16.to_be_bytes()); // TSIH: new session
    pdu[16..20].copy_from_slice(&itt.to_be_bytes()); // ITT
    pdu[20..22].copy_from_slice(&0u16.to_be_bytes()); // CID
    pdu[24..28].copy_from_slice(&1u32.to_be_bytes()); // CmdSN
    pdu[28..32].copy_from_slice(&0u32.to_be_bytes()); // ExpStatSN
    pdu.extend_from_slice(text);
    pdu.resize(BHS_LEN + padded(text.len()), 0);
    pdu
}

/// The fields of a Login Response BHS (§11.13), to build valid and invalid ones.
#[derive(Debug, Clone)]
pub struct LoginResponse {
    pub opcode: u8,
    pub transit: bool,
    pub cont: bool,
    pub csg: u8,
    pub nsg: u8,
    pub version_max: u8,
    pub version_active: u8,
    /// Overrides the DataSegmentLength field (default: `data.len()`).
    pub data_segment_length: Option<u32>,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub status_class: u8,
    pub status_detail: u8,
    pub data: Vec<u8>,
}

impl LoginResponse {
    /// A successful, final-looking answer to `request` (a login request BHS):
    /// echoes its ISID, ITT and CmdSN, moves from its CSG to its NSG.
    pub fn answering(request: &[u8]) -> LoginResponse {
        let get = |i: usize| request.get(i).copied().unwrap_or(0);
        let cmd_sn = u32::from_be_bytes([get(24), get(25), get(26), get(27)]);
        LoginResponse {
            opcode: OP_LOGIN_RESPONSE,
            transit: true,
            cont: false,
            csg: (get(1) >> 2) & 3,
            nsg: get(1) & 3,
            version_max: 0,
            version_active: 0,
            data_segment_length: None,
            isid: [get(8), get(9), get(10), get(11), get(12), get(13)],
            tsih: 0,
            itt: u32::from_be_bytes([get(16), get(17), get(18), get(19)]),
            stat_sn: 0,
            exp_cmd_sn: cmd_sn,
            max_cmd_sn: cmd_sn,
            status_class: 0,
            status_detail: 0,
            data: Vec::new(),
        }
    }

    /// BHS followed by the data segment padded to 4 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let dsl = self.data_segment_length.unwrap_or(self.data.len() as u32);
        let mut pdu = vec![0u8; BHS_LEN];
        pdu[0] = self.opcode & 0x3f; // opcode (no I bit in responses)
        pdu[1] = (u8::from(self.transit) << 7)
            | (u8::from(self.cont) << 6)
            | ((self.csg & 3) << 2)
            | (self.nsg & 3); // T, C, CSG, NSG
        pdu[2] = self.version_max; // Version-max
        pdu[3] = self.version_active; // Version-active
        pdu[4] = 0; // TotalAHSLength
        pdu[5..8].copy_from_slice(&dsl.to_be_bytes()[1..]); // DataSegmentLength (24 bits)
        pdu[8..14].copy_from_slice(&self.isid); // ISID
        pdu[14..16].copy_from_slice(&self.tsih.to_be_bytes()); // TSIH
        pdu[16..20].copy_from_slice(&self.itt.to_be_bytes()); // ITT
        pdu[24..28].copy_from_slice(&self.stat_sn.to_be_bytes()); // StatSN
        pdu[28..32].copy_from_slice(&self.exp_cmd_sn.to_be_bytes()); // ExpCmdSN
        pdu[32..36].copy_from_slice(&self.max_cmd_sn.to_be_bytes()); // MaxCmdSN
        pdu[36] = self.status_class; // Status-Class
        pdu[37] = self.status_detail; // Status-Detail
        pdu.extend_from_slice(&self.data);
        pdu.resize(BHS_LEN + padded(self.data.len()), 0);
        pdu
    }
}

/// Only the first 20 bytes of a login response BHS, as if the target died
/// mid-header (use with [`Behaviour::ReplyThenClose`]).
pub fn truncated_bhs(request: &[u8]) -> Vec<u8> {
    let mut pdu = LoginResponse::answering(request).to_bytes();
    pdu.truncate(20);
    pdu
}

/// A login response whose DataSegmentLength is 0xFFFFFF (16 MiB - 1) with no
/// data following: the initiator must refuse it, not allocate and wait.
pub fn oversized_data_segment(request: &[u8]) -> Vec<u8> {
    let mut rsp = LoginResponse::answering(request);
    rsp.data_segment_length = Some(0x00FF_FFFF);
    rsp.to_bytes()
}

/// A BHS with the unknown target opcode 0x1c, otherwise a login response.
pub fn unknown_opcode(request: &[u8]) -> Vec<u8> {
    let mut rsp = LoginResponse::answering(request);
    rsp.opcode = 0x1c;
    rsp.to_bytes()
}

/// A successful login response whose text segment is not UTF-8 and has no '='.
pub fn bogus_text(request: &[u8]) -> Vec<u8> {
    let mut rsp = LoginResponse::answering(request);
    rsp.data = vec![
        0xff, 0xfe, 0x80, b'n', b'o', b'k', b'e', b'y', 0xc3, 0x28, 0x00,
    ];
    rsp.to_bytes()
}

/// A well-formed login reject: Status-Class 2 (initiator error), Status-Detail
/// 0x03 "target not found" (§11.13.5), no Transit, no data.
pub fn target_not_found(request: &[u8]) -> Vec<u8> {
    let mut rsp = LoginResponse::answering(request);
    rsp.transit = false;
    rsp.nsg = 0;
    rsp.status_class = 0x02;
    rsp.status_detail = 0x03;
    rsp.to_bytes()
}
