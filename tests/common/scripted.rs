//! A scripted iSCSI "target" that completes any login (no authentication,
//! echoing the initiator's operational offers back as its answers) and then
//! answers Text Requests in ways no real target does: for the resource
//! bounds of rlun's text exchanges (SendTargets discovery).
//!
//! PDU layouts: Text Request/Response RFC 7143 §11.10/§11.11, NOP-Out/In
//! §11.18/§11.19, Logout §11.14/§11.15, Login §11.12/§11.13.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::hostile::{
    itt, parse_text_keys, read_pdu, text_keys, LoginResponse, BHS_LEN, OP_LOGIN_REQUEST,
    STAGE_FULL_FEATURE, STAGE_SECURITY,
};

const OP_NOP_OUT: u8 = 0x00;
const OP_TEXT_REQUEST: u8 = 0x04;
const OP_LOGOUT_REQUEST: u8 = 0x06;
const OP_NOP_IN: u8 = 0x20;
const OP_TEXT_RESPONSE: u8 = 0x24;
const OP_LOGOUT_RESPONSE: u8 = 0x26;
const RESERVED_TAG: u32 = 0xffff_ffff;

/// How the target answers every Text Request in the full feature phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextScript {
    /// An empty, non-final Text Response (F=0) with a fresh Target
    /// Transfer Tag, for ever: the initiator must keep asking for more.
    EndlessContinuation,
    /// Non-final Text Responses each filled to the initiator's
    /// MaxRecvDataSegmentLength with `TargetName=…`/`TargetAddress=…`
    /// pairs, for ever: a SendTargets answer of unbounded length.
    UnboundedSendTargets,
}

/// A listener on 127.0.0.1 running one [`TextScript`] on every connection.
/// Dropping it stops accepting and ends its connections.
#[derive(Debug)]
pub struct ScriptedTarget {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    logins: Arc<AtomicUsize>,
    text_responses: Arc<AtomicUsize>,
    text_bytes: Arc<AtomicU64>,
}

impl ScriptedTarget {
    /// Start listening on a free loopback port. Panics if it cannot bind.
    pub fn start(script: TextScript) -> ScriptedTarget {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the scripted target");
        let target = ScriptedTarget {
            addr: listener.local_addr().expect("scripted target address"),
            stop: Arc::new(AtomicBool::new(false)),
            logins: Arc::new(AtomicUsize::new(0)),
            text_responses: Arc::new(AtomicUsize::new(0)),
            text_bytes: Arc::new(AtomicU64::new(0)),
        };
        let counters = Counters {
            stop: Arc::clone(&target.stop),
            logins: Arc::clone(&target.logins),
            text_responses: Arc::clone(&target.text_responses),
            text_bytes: Arc::clone(&target.text_bytes),
        };
        thread::spawn(move || {
            for stream in listener.incoming() {
                if counters.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let c = counters.clone();
                thread::spawn(move || {
                    let _ = serve(stream, script, &c);
                });
            }
        });
        target
    }

    /// `127.0.0.1:PORT`.
    pub fn portal(&self) -> String {
        self.addr.to_string()
    }

    /// Logins completed (full feature phase reached).
    pub fn logins(&self) -> usize {
        self.logins.load(Ordering::SeqCst)
    }

    /// Text Responses sent so far.
    pub fn text_responses(&self) -> usize {
        self.text_responses.load(Ordering::SeqCst)
    }

    /// Bytes of text data sent so far.
    pub fn text_bytes(&self) -> u64 {
        self.text_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedTarget {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

#[derive(Debug, Clone)]
struct Counters {
    stop: Arc<AtomicBool>,
    logins: Arc<AtomicUsize>,
    text_responses: Arc<AtomicUsize>,
    text_bytes: Arc<AtomicU64>,
}

fn u32_at(bhs: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bhs[at], bhs[at + 1], bhs[at + 2], bhs[at + 3]])
}

/// Keys the initiator declares about itself, which a target does not echo.
const NOT_ECHOED: &[&str] = &[
    "InitiatorName",
    "InitiatorAlias",
    "SessionType",
    "TargetName",
    "AuthMethod",
];

fn serve(mut stream: TcpStream, script: TextScript, c: &Counters) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut stat_sn: u32 = 0x1000;
    let mut max_recv = 8192usize;
    let mut discovery = false;
    // Login: answer each request with Transit to the stage it asks for.
    loop {
        let (bhs, rest) = read_pdu(&mut stream)?;
        if bhs[0] & 0x3f != OP_LOGIN_REQUEST {
            return Ok(());
        }
        let keys = parse_text_keys(&rest);
        let mut answer: Vec<(String, String)> = Vec::new();
        for (k, v) in &keys {
            match k.as_str() {
                "SessionType" => discovery = v == "Discovery",
                "AuthMethod" => answer.push((k.clone(), "None".into())),
                "MaxRecvDataSegmentLength" => {
                    max_recv = v.parse().unwrap_or(8192);
                    answer.push((k.clone(), "8192".into()));
                }
                _ if NOT_ECHOED.contains(&k.as_str()) => {}
                _ => {
                    let first = v.split(',').next().unwrap_or_default();
                    answer.push((k.clone(), first.to_string()));
                }
            }
        }
        let csg = (bhs[1] >> 2) & 3;
        if csg == STAGE_SECURITY && !discovery {
            answer.push(("TargetPortalGroupTag".into(), "1".into()));
        }
        let pairs: Vec<(&str, &str)> = answer
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut rsp = LoginResponse::answering(&bhs);
        rsp.stat_sn = stat_sn;
        rsp.max_cmd_sn = rsp.exp_cmd_sn.wrapping_add(16);
        rsp.data = text_keys(&pairs);
        let done = bhs[1] & 0x80 != 0 && bhs[1] & 3 == STAGE_FULL_FEATURE;
        if done {
            rsp.tsih = 1;
        }
        stream.write_all(&rsp.to_bytes())?;
        if done {
            stat_sn = stat_sn.wrapping_add(1);
            break;
        }
    }
    c.logins.fetch_add(1, Ordering::SeqCst);

    let mut serial = 0u64;
    let mut ttt = 1u32;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    while !c.stop.load(Ordering::SeqCst) {
        let (bhs, rest) = match read_pdu(&mut stream) {
            Ok(p) => p,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        let immediate = bhs[0] & 0x40 != 0;
        let cmd_sn = u32_at(&bhs, 24);
        let exp_cmd_sn = if immediate {
            cmd_sn
        } else {
            cmd_sn.wrapping_add(1)
        };
        let mut out = vec![0u8; BHS_LEN];
        out[16..20].copy_from_slice(&itt(&bhs).to_be_bytes());
        out[24..28].copy_from_slice(&stat_sn.to_be_bytes());
        out[28..32].copy_from_slice(&exp_cmd_sn.to_be_bytes());
        out[32..36].copy_from_slice(&exp_cmd_sn.wrapping_add(16).to_be_bytes());
        let mut data = Vec::new();
        match bhs[0] & 0x3f {
            OP_TEXT_REQUEST => {
                out[0] = OP_TEXT_RESPONSE;
                out[1] = 0; // F=0: more to come, for ever
                out[20..24].copy_from_slice(&ttt.to_be_bytes());
                ttt = ttt.wrapping_add(1).max(1);
                if script == TextScript::UnboundedSendTargets {
                    while data.len() + 96 <= max_recv {
                        serial += 1;
                        data.extend_from_slice(
                            format!(
                                "TargetName=iqn.2026-11.org.example:endless-{serial:012}\0\
                                 TargetAddress=127.0.0.1:3260,1\0"
                            )
                            .as_bytes(),
                        );
                    }
                }
                c.text_responses.fetch_add(1, Ordering::SeqCst);
                c.text_bytes.fetch_add(data.len() as u64, Ordering::SeqCst);
            }
            OP_NOP_OUT if itt(&bhs) != RESERVED_TAG => {
                out[0] = OP_NOP_IN;
                out[1] = 0x80;
                out[20..24].copy_from_slice(&RESERVED_TAG.to_be_bytes());
                let dsl = super::hostile::data_segment_length(&bhs) as usize;
                data = rest[..dsl.min(rest.len())].to_vec();
            }
            OP_LOGOUT_REQUEST => {
                out[0] = OP_LOGOUT_RESPONSE;
                out[1] = 0x80;
                stream.write_all(&out)?;
                let _ = stream.shutdown(Shutdown::Both);
                return Ok(());
            }
            _ => continue,
        }
        stat_sn = stat_sn.wrapping_add(1);
        let len = (data.len() as u32).to_be_bytes();
        out[5..8].copy_from_slice(&len[1..]);
        data.resize(data.len().div_ceil(4) * 4, 0);
        stream.write_all(&out)?;
        stream.write_all(&data)?;
    }
    let _ = stream.shutdown(Shutdown::Both);
    // Drain so a blocked peer write does not keep it waiting.
    let mut sink = [0u8; 1024];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}
