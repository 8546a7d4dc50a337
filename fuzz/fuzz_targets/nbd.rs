//! The NBD server's sans-IO protocol (`nbd::proto`): the fixed newstyle
//! handshake fed a client's bytes in arbitrary pieces, then transmission
//! request headers checked against what was negotiated. All of it comes
//! from NBD clients.
//!
//! Input: a byte choosing TLS off or required, then chunks (a length byte
//! and that many bytes) given to the handshake as they would arrive; what
//! is left after the handshake is parsed as requests. The handshake must
//! end (transmission, abort or an error) or wait for input without
//! buffering more than one option, and never pick an export that is not
//! in its list.
#![no_main]
use std::sync::Arc;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rlun::nbd::proto::{
    self, tflag, BlockSizes, ExportInfo, Handshake, HandshakeEvent, TlsMode, Transmission,
};
use rlun_fuzz::Input;

fn exports() -> Arc<[ExportInfo]> {
    let flags = tflag::HAS_FLAGS
        | tflag::SEND_FLUSH
        | tflag::SEND_FUA
        | tflag::SEND_TRIM
        | tflag::SEND_WRITE_ZEROES
        | tflag::SEND_CACHE;
    let block = BlockSizes {
        minimum: 1,
        preferred: 4096,
        maximum: 32 << 20,
    };
    Arc::from(vec![
        ExportInfo {
            name: String::new(),
            description: "default".into(),
            size: 1 << 30,
            flags,
            block,
        },
        ExportInfo {
            name: "ro".into(),
            description: String::new(),
            size: 4096,
            flags: tflag::HAS_FLAGS | tflag::READ_ONLY,
            block,
        },
    ])
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let tls = if input.bool() {
        TlsMode::Required
    } else {
        TlsMode::Off
    };
    let exports = exports();
    let mut hs = Handshake::new(Arc::clone(&exports), tls);
    let mut buf = BytesMut::new();
    let negotiated = loop {
        if input.is_empty() {
            return;
        }
        let n = usize::from(input.u8()) + 1;
        buf.extend_from_slice(input.bytes(n));
        match hs.handle_input(&mut buf) {
            Ok(HandshakeEvent::NeedInput) => {
                let _ = hs.take_output();
                // Only an incomplete option header and data stay buffered.
                assert!(buf.len() <= 16 + proto::MAX_OPTION_LEN as usize);
            }
            Ok(HandshakeEvent::StartTls) => {
                let _ = hs.take_output();
                hs.tls_started();
            }
            Ok(HandshakeEvent::Abort) => return,
            Ok(HandshakeEvent::Transmission(n)) => break n,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        }
    };
    assert!(negotiated.export < exports.len());
    let e = &exports[negotiated.export];
    let t = Transmission {
        size: e.size,
        flags: negotiated.flags,
        block: e.block,
        negotiated,
    };
    buf.extend_from_slice(input.rest());
    let mut rest = &buf[..];
    while let Ok(Some(r)) = proto::parse_request(rest) {
        let _ = t.check(&r);
        rest = &rest[proto::REQUEST_LEN..];
    }
});
