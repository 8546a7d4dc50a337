//! The test side of systemd's notification socket (`NOTIFY_SOCKET`).

use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// The next datagram on `sock` as text, within 30 s (`what` names it in
/// the panic). A receive with a timeout can fail with EINTR when no signal
/// handler ran, after the process was stopped or frozen and resumed
/// (signal(7)); that is retried, not taken for the answer.
pub fn recv_notify(sock: &UnixDatagram, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {what} within 30 s");
        sock.set_read_timeout(Some(left))
            .expect("notify socket timeout");
        match sock.recv(&mut buf) {
            Ok(n) => return String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => panic!("no {what} within 30 s: {e}"),
        }
    }
}
