//! The test harness's fault-injecting proxy (tests/common/proxy.rs) as a
//! stand-alone program, for scripts/soak.sh and for trying faults by hand.
//!
//! ```text
//! cargo build --example fault_proxy
//! target/debug/examples/fault_proxy UPSTREAM_ADDR:PORT [LISTEN_PORT_FILE]
//! ```
//!
//! It listens on 127.0.0.1 (an ephemeral port), prints `listening
//! 127.0.0.1:PORT` on standard output (and writes `PORT` to
//! LISTEN_PORT_FILE if given), then reads one command per line on standard
//! input and answers each with one line:
//!
//! - `none`, `corrupt`, `swallow`, `drop`, `delay MS`: set the fault
//!   ([`proxy::Fault`]; `drop` also closes the current connections);
//! - `stats`: `connections=N logins=N corrupted=N swallowed=N`.
//!
//! End of input stops the proxy.

#[path = "../tests/common/hostile.rs"]
#[allow(dead_code)]
mod hostile;
#[path = "../tests/common/proxy.rs"]
#[allow(dead_code)]
mod proxy;

use std::io::{self, BufRead, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use proxy::{Fault, FaultProxy};

fn parse(line: &str) -> Result<Option<Fault>, String> {
    let mut words = line.split_whitespace();
    let fault = match (words.next(), words.next()) {
        (Some("none"), None) => Fault::None,
        (Some("corrupt"), None) => Fault::CorruptAfterLogin,
        (Some("swallow"), None) => Fault::SwallowAfterLogin,
        (Some("drop"), None) => Fault::Drop,
        (Some("delay"), Some(ms)) => {
            let ms: u64 = ms.parse().map_err(|_| format!("bad delay {ms:?}"))?;
            Fault::Delay(Duration::from_millis(ms))
        }
        (Some("stats"), None) => return Ok(None),
        _ => return Err(format!("unknown command {line:?}")),
    };
    Ok(Some(fault))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(upstream) = args.first() else {
        eprintln!("usage: fault_proxy UPSTREAM_ADDR:PORT [LISTEN_PORT_FILE]");
        return ExitCode::from(2);
    };
    let upstream: SocketAddr = match upstream.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a,
        _ => {
            eprintln!("fault_proxy: cannot resolve {upstream:?}");
            return ExitCode::from(2);
        }
    };
    let proxy = FaultProxy::start(upstream, Fault::None);
    let portal = proxy.portal();
    if let Some(file) = args.get(1) {
        let port = portal.rsplit(':').next().unwrap_or_default();
        if let Err(e) = std::fs::write(file, format!("{port}\n")) {
            eprintln!("fault_proxy: cannot write {file}: {e}");
            return ExitCode::from(1);
        }
    }
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "listening {portal}");
    let _ = out.flush();
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let answer = match parse(&line) {
            Ok(Some(fault)) => {
                proxy.set_fault(fault);
                format!("ok {fault:?}")
            }
            Ok(None) => format!(
                "connections={} logins={} corrupted={} swallowed={}",
                proxy.connections(),
                proxy.logins(),
                proxy.corrupted(),
                proxy.swallowed()
            ),
            Err(e) => format!("error {e}"),
        };
        let _ = writeln!(out, "{answer}");
        let _ = out.flush();
    }
    ExitCode::SUCCESS
}
