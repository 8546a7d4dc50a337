//! `rlun serve`: a target's LUNs as NBD exports (see [`crate::nbd`]).
//!
//! Local problems are checked before any network I/O: the TLS files are
//! loaded, `--listen` on a non-loopback address without TLS is refused
//! (unless `--allow-insecure`), and the socket or port is bound. Then rlun
//! logs in, opens the disk LUNs (one [`crate::device::LunDevice`] each,
//! shared by every connection), and serves until SIGINT/SIGTERM: new
//! connections are refused, connections stop reading requests, the
//! requests in flight finish and are answered, every device is flushed,
//! and rlun logs out.
//!
//! The lifecycle around that (`--daemon`, readiness, the pid file, the
//! write-back and logout) is [`crate::service`]'s; this module is the NBD
//! listener front end (`Nbd`).

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

use super::context::device_config;
use super::context::Ctx;
use super::error::CliError;
use crate::cli::{CacheChoice, CacheOpts, ConnectOpts, DaemonOpts, ServeOpts};
use crate::client::Lun;
use crate::daemon::{Readiness, Signals};
use crate::export::{Export, ExportSet};
use crate::nbd::server::{Describe, Limits, Server};
use crate::service::{self, human_size, FrontEnd, Live, Plan};

/// `rlun serve`.
pub async fn run(
    ctx: &Ctx,
    arg: &str,
    o: &ServeOpts,
    d: &DaemonOpts,
    cache: &CacheOpts,
    conn: &ConnectOpts,
) -> Result<(), CliError> {
    service::launch(
        &d.options(),
        ctx.ready_deadline(arg, conn),
        async |readiness: &mut Readiness| serve(ctx, arg, (o, d), cache, conn, readiness).await,
    )
    .await
}

/// Check what needs no network and bind the listener, then serve the
/// LUNs until told to stop ([`service::serve`] with the [`Nbd`] front
/// end).
async fn serve(
    ctx: &Ctx,
    arg: &str,
    (o, d): (&ServeOpts, &DaemonOpts),
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
    let settings = ctx.settings(&url, entry.as_deref(), &cache.settings());
    let plan = Plan {
        session: ctx.session_config(&url, entry.as_deref(), conn)?,
        target: iqn.clone(),
        lun: url.lun,
        device: device_config(
            &settings,
            settings.cache.unwrap_or(CacheChoice::WriteThrough).mode(),
        ),
        read_only: o.read_only,
        metrics: ctx.metrics(entry.as_deref(), d.metrics()),
    };
    let front = Nbd { listener, tls, iqn };
    service::serve(plan, front, readiness).await
}

/// The NBD server front end of [`service::serve`]: each export served to
/// the NBD clients that connect to the listener.
struct Nbd {
    listener: Listener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    iqn: String,
}

impl FrontEnd for Nbd {
    type Error = CliError;
    type Live = Serving;
    const STOPPED: &'static str = "stopped";
    const KIND: &'static str = "served";
    const PURPOSE: &'static str = " to serve";

    async fn start(self, exports: Arc<ExportSet<Lun>>) -> Result<Serving, CliError> {
        let iqn = self.iqn.clone();
        let describe: Describe<Lun> = Arc::new(move |e: &Export<Lun>| {
            let i = e.info();
            format!(
                "LUN {} of {iqn}: {}, {}-byte blocks{}",
                e.number(),
                human_size(i.size),
                i.block_size,
                if i.read_only { ", read-only" } else { "" }
            )
        });
        let descriptions: Vec<String> = exports.exports().iter().map(|e| describe(e)).collect();
        let (stop_tx, stop_rx) = watch::channel(false);
        let limits = Limits::default();
        let server = Arc::new(Server::new(
            exports.clone(),
            describe,
            self.tls.clone(),
            limits,
            stop_rx,
        ));
        let uris: Vec<String> = exports
            .exports()
            .iter()
            .map(|e| self.listener.uri(e.name(), self.tls.is_some()))
            .collect();
        Ok(Serving {
            state_key: self.listener.state_key(),
            listener: Some(self.listener),
            uris,
            exports,
            descriptions,
            server,
            limits,
            stop_tx,
        })
    }
}

/// A started [`Nbd`] front end.
struct Serving {
    /// `None` once closed (the socket file is removed with it).
    listener: Option<Listener>,
    state_key: PathBuf,
    /// The NBD URI of each export.
    uris: Vec<String>,
    exports: Arc<ExportSet<Lun>>,
    descriptions: Vec<String>,
    server: Arc<Server<Lun>>,
    limits: Limits,
    /// Tells the connections to stop reading requests.
    stop_tx: watch::Sender<bool>,
}

impl Live for Serving {
    fn exports(&self) -> &Arc<ExportSet<Lun>> {
        &self.exports
    }

    fn state_key(&self) -> PathBuf {
        self.state_key.clone()
    }

    fn endpoints(&self) -> Vec<String> {
        self.uris.clone()
    }

    fn announce(&self, readiness: &mut Readiness) {
        for (uri, d) in self.uris.iter().zip(&self.descriptions) {
            info!("serving {d} at {uri}");
            // The URI clients use, on standard output (with --daemon, from
            // the parent), as `rlun attach` prints its device.
            readiness.print(uri);
        }
        readiness.ready(&format!("serving {}", self.uris.join(" ")));
    }

    /// Accept connections until a signal; then refuse new ones, let the
    /// requests in flight finish (within the drain timeout, or until a
    /// second signal) and close what still hangs on.
    async fn serve(&mut self, signals: &mut Signals, readiness: &mut Readiness) {
        let Some(listener) = self.listener.take() else {
            return;
        };
        let mut conns = JoinSet::new();
        let signal = loop {
            while conns.try_join_next().is_some() {}
            tokio::select! {
                s = signals.recv() => break s,
                r = listener.accept(&self.server, &mut conns) => {
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
        let _ = self.stop_tx.send(true);
        drop(listener);
        let grace = self.limits.drain_timeout + Duration::from_secs(5);
        tokio::select! {
            _ = async { while conns.join_next().await.is_some() {} } => {}
            _ = tokio::time::sleep(grace) => warn!("connections did not finish in {grace:?}; closing them"),
            _ = signals.recv() => warn!("second signal: closing the connections"),
        }
        // Whatever still hangs on gets ESHUTDOWN; then the lifecycle writes
        // back and logs out.
        self.exports.shut_down();
        conns.shutdown().await;
    }
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
            // Absolute, so that the URIs work from any directory and two
            // `rel.sock` of different directories are told apart.
            let path = &std::path::absolute(path).unwrap_or_else(|_| path.clone());
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
