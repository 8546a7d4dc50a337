//! `rlun serve`: a target's LUNs as NBD exports (see [`crate::nbd`]).
//!
//! Local problems are checked before any network I/O: the TLS files are
//! loaded, `--listen` on a non-loopback address without TLS is refused
//! (unless `--allow-insecure`), and the socket or port is bound. Then rlun
//! logs in, opens the disk LUNs (one [`LunDevice`] each, shared by every
//! connection), and serves until SIGINT/SIGTERM: new connections are
//! refused, connections stop reading requests, the requests in flight
//! finish and are answered, every device is flushed, and rlun logs out.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::rustls;
use tracing::{info, warn};

use super::{human_size, CliError, Ctx};
use crate::cli::{CacheChoice, CacheOpts, ConnectOpts, DaemonOpts, ServeOpts};
use crate::client::{Lun, Target};
use crate::daemon::{self, Launched, PidFile, Readiness, Signals};
use crate::export::{open_luns, ExportSet, OpenError};
use crate::nbd::server::{Limits, Server};

/// `rlun serve`.
pub async fn run(
    ctx: &Ctx,
    arg: &str,
    o: &ServeOpts,
    d: &DaemonOpts,
    cache: &CacheOpts,
    conn: &ConnectOpts,
) -> Result<(), CliError> {
    let deadline = daemon::ready_deadline(
        conn.connect_timeout.unwrap_or(ctx.config.connect_timeout()),
        conn.login_timeout.unwrap_or(ctx.config.login_timeout()),
    );
    let mut readiness = match daemon::launch(d, deadline).await? {
        Launched::Detached => return Ok(()),
        Launched::Serve(r) => r,
    };
    let result = serve(ctx, arg, o, cache, conn, &mut readiness).await;
    readiness.finished(&result);
    result
}

async fn serve(
    ctx: &Ctx,
    arg: &str,
    o: &ServeOpts,
    cache: &CacheOpts,
    conn: &ConnectOpts,
    readiness: &mut Readiness,
) -> Result<(), CliError> {
    // Local problems first: they need no network.
    let (url, entry) = ctx.resolve_target_url(arg)?;
    let Some(iqn) = url.target.clone() else {
        return Err(CliError::Usage(format!(
            "{arg} names a portal, not a target: serve one target (iscsi://host/<iqn>) or one \
             LUN (iscsi://host/<iqn>/<lun>); `rlun discover {arg}` lists the targets"
        )));
    };
    let tls = load_tls(o)?;
    if let Some(addr) = o.listen {
        check_insecure(addr, tls.is_some(), o.allow_insecure)?;
    }
    let listener = Listener::bind(o).await?;
    let dev_cfg = cache.device_config(cache.cache.unwrap_or(CacheChoice::WriteThrough).mode());

    let cfg = ctx.session_config(&url, entry.as_deref(), conn)?;
    let target = Target::login(cfg).await?;
    let exports = match open_exports(&target, &iqn, url.lun, &dev_cfg, o.read_only).await {
        Ok(e) => Arc::new(e),
        Err(e) => {
            let _ = target.logout().await;
            return Err(e);
        }
    };
    let descriptions: Vec<String> = exports
        .exports()
        .iter()
        .map(|e| {
            let i = e.info();
            format!(
                "LUN {} of {iqn}: {}, {}-byte blocks{}",
                e.number(),
                human_size(i.size),
                i.block_size,
                if i.read_only { ", read-only" } else { "" }
            )
        })
        .collect();

    let mut signals = Signals::install()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let limits = Limits::default();
    let server = Arc::new(Server::new(
        exports.clone(),
        descriptions.clone(),
        tls.clone(),
        limits,
        stop_rx,
    ));
    let pid_file = PidFile::create(daemon::state_file(&listener.state_key()));
    let uris: Vec<String> = exports
        .exports()
        .iter()
        .map(|e| listener.uri(e.name(), tls.is_some()))
        .collect();
    for (uri, d) in uris.iter().zip(&descriptions) {
        info!("serving {d} at {uri}");
    }
    readiness.ready(&format!("serving {}", uris.join(" ")));

    let mut conns = JoinSet::new();
    let signal = loop {
        while conns.try_join_next().is_some() {}
        tokio::select! {
            s = signals.recv() => break s,
            r = listener.accept(&server, &mut conns) => {
                if let Err(e) = r {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    info!(
        "{}: finishing the requests in flight, then stopping",
        signal.name()
    );
    readiness.stopping("finishing the requests in flight");
    let _ = stop_tx.send(true);
    drop(listener);
    let grace = limits.drain_timeout + Duration::from_secs(5);
    tokio::select! {
        _ = async { while conns.join_next().await.is_some() {} } => {}
        _ = tokio::time::sleep(grace) => warn!("connections did not finish in {grace:?}; closing them"),
        _ = signals.recv() => warn!("second signal: closing the connections"),
    }
    // Whatever still hangs on gets ESHUTDOWN; then write back and log out.
    exports.shut_down();
    conns.shutdown().await;
    drop(server);
    let result = daemon::finish_exports(&exports, &target)
        .await
        .map_err(|e| {
            CliError::Other(format!(
                "stopped, but written data did not reach the target: {e}"
            ))
        });
    if let Some(p) = pid_file {
        p.finish(&result);
    }
    result
}

async fn open_exports(
    target: &Target,
    iqn: &str,
    only: Option<u64>,
    cfg: &crate::device::DeviceConfig,
    read_only: bool,
) -> Result<ExportSet<Lun>, CliError> {
    let luns = open_luns(target, iqn, only).await.map_err(|e| match e {
        OpenError::Client(e) => e.into(),
        e @ OpenError::NoDiskLuns { .. } => CliError::Other(format!("{e} to serve")),
    })?;
    ExportSet::new(luns, cfg, read_only).map_err(|e| CliError::Usage(rlun_iscsi::error_chain(&e)))
}

/// `--listen` beyond loopback without TLS gives every host that reaches
/// the port the LUN's data: only with `--allow-insecure`.
fn check_insecure(addr: SocketAddr, tls: bool, allow: bool) -> Result<(), CliError> {
    if addr.ip().is_loopback() || tls || allow {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "refusing to serve on {addr} without TLS: NBD has no authentication, so anyone who can \
         reach this address could read and overwrite the LUNs. Give --tls-cert and --tls-key \
         (and --tls-ca to require client certificates), listen on a loopback address, or pass \
         --allow-insecure if the network is trusted"
    )))
}

fn load_tls(o: &ServeOpts) -> Result<Option<tokio_rustls::TlsAcceptor>, CliError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (Some(cert), Some(key)) = (&o.tls_cert, &o.tls_key) else {
        return Ok(None);
    };
    let bad = |path: &Path, why: String| CliError::Usage(format!("TLS: {}: {why}", path.display()));
    let read_certs = |path: &Path| -> Result<Vec<CertificateDer<'static>>, CliError> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(path, e.to_string()))?;
        if certs.is_empty() {
            return Err(bad(path, "no PEM certificate in the file".into()));
        }
        Ok(certs)
    };
    let certs = read_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| CliError::Other(format!("TLS: {e}")))?;
    let builder = match &o.tls_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in read_certs(ca)? {
                roots.add(c).map_err(|e| bad(ca, e.to_string()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| bad(ca, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        CliError::Usage(format!(
            "TLS: the certificate and key do not fit together: {e}"
        ))
    })?;
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener, SocketAddr),
}

impl Listener {
    async fn bind(o: &ServeOpts) -> Result<Listener, CliError> {
        if let Some(path) = &o.socket {
            let local = |what, source| CliError::LocalFile {
                what,
                path: path.clone(),
                source,
            };
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                if !meta.file_type().is_socket() {
                    return Err(local(
                        "refusing to replace",
                        std::io::Error::new(std::io::ErrorKind::AlreadyExists, "not a socket"),
                    ));
                }
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(local(
                        "another server listens on",
                        std::io::Error::new(std::io::ErrorKind::AddrInUse, "socket in use"),
                    ));
                }
                std::fs::remove_file(path)
                    .map_err(|e| local("cannot remove the stale socket", e))?;
            }
            let l = UnixListener::bind(path).map_err(|e| local("cannot listen on", e))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| local("cannot set the permissions of", e))?;
            return Ok(Listener::Unix(l, path.clone()));
        }
        let addr = o.listen.expect("clap requires --socket or --listen");
        let l = TcpListener::bind(addr)
            .await
            .map_err(|e| CliError::LocalFile {
                what: "cannot listen on",
                path: PathBuf::from(addr.to_string()),
                source: e,
            })?;
        let addr = l.local_addr().unwrap_or(addr);
        Ok(Listener::Tcp(l, addr))
    }

    /// What the pid file is named after: the socket path, or `nbd-ADDR`.
    fn state_key(&self) -> PathBuf {
        match self {
            Listener::Unix(_, p) => p.clone(),
            Listener::Tcp(_, a) => PathBuf::from(format!("nbd-{a}")),
        }
    }

    /// The NBD URI of an export (the form qemu and libnbd take).
    fn uri(&self, export: &str, tls: bool) -> String {
        let s = if tls { "s" } else { "" };
        match self {
            Listener::Unix(_, p) => format!("nbd{s}+unix:///{export}?socket={}", p.display()),
            Listener::Tcp(_, a) => format!("nbd{s}://{a}/{export}"),
        }
    }

    async fn accept(
        &self,
        server: &Arc<Server<Lun>>,
        conns: &mut JoinSet<()>,
    ) -> std::io::Result<()> {
        match self {
            Listener::Unix(l, _) => {
                let (s, _) = l.accept().await?;
                crate::nbd::server::enlarge_send_buffer(&s);
                let server = server.clone();
                conns.spawn(async move { log_end(server.serve(s, "unix").await, "unix") });
            }
            Listener::Tcp(l, _) => {
                let (s, peer) = l.accept().await?;
                let _ = s.set_nodelay(true);
                crate::nbd::server::enlarge_send_buffer(&s);
                let server = server.clone();
                conns.spawn(async move {
                    let peer = peer.to_string();
                    log_end(server.serve(s, &peer).await, &peer)
                });
            }
        }
        Ok(())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn log_end(r: Result<(), crate::nbd::server::ConnError>, peer: &str) {
    if let Err(e) = r {
        warn!(
            peer,
            "NBD connection ended: {}",
            rlun_iscsi::error_chain(&e)
        );
    }
}
