//! The `rlun` subcommands. `main.rs` parses the command line and calls
//! [`run`], the dispatcher; each subcommand lives in its own file.
//!
//! The files of this module use each other in one direction only: the
//! subcommands use the leaves [`error`] ([`CliError`]) and [`context`]
//! ([`Ctx`]: the config file, URLs, session settings); only this file, the
//! dispatcher, uses the subcommands. The serving commands (`mount`,
//! `serve`, `attach`) supply their front end to the lifecycle in
//! [`crate::service`].

/// `println!` that returns an error instead of panicking when standard
/// output is gone (`rlun info | head -1`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
            .map_err($crate::cmd::error::stdout_error)?;
    }};
}

pub mod attach;
mod attach_ublk;
mod bench;
pub mod context;
mod cp;
mod discover;
mod docs;
pub mod error;
mod info;
mod list;
mod ls;
pub mod mount;
mod paths;
mod rescan;
pub mod serve;
mod stats;
pub mod tips;

pub use context::Ctx;
pub use docs::write_completions;
pub use error::CliError;

use crate::cli::{Cli, Command};
use crate::client::ClientError;
use crate::config::Config;
use crate::session::{self, SessionError};

/// Run the parsed command line.
pub async fn run(cli: Cli, config: Config) -> Result<(), CliError> {
    let ctx = Ctx::new(config);
    match run_command(&ctx, cli).await {
        Err(e) => Err(explain_unknown_target(&ctx, explain_foreign_service(e).await).await),
        ok => ok,
    }
}

/// The target named in the URL does not exist at the portal (login
/// status 0x0203): repeat the name and list the names the portal offers
/// (one SendTargets discovery with the same settings), so that a typo is
/// seen at once.
async fn explain_unknown_target(ctx: &Ctx, e: CliError) -> CliError {
    use rlun_iscsi::proto::login::LoginError;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut not_found = false;
    // With several portals: the one whose login was refused.
    let path = match &e {
        CliError::Session(SessionError::PathRefused { portal, .. })
        | CliError::Client(ClientError::Session(SessionError::PathRefused { portal, .. })) => {
            crate::url::Portal::parse(portal).ok()
        }
        _ => None,
    };
    while let Some(s) = source {
        if matches!(
            s.downcast_ref::<LoginError>(),
            Some(LoginError::TargetNotFound)
        ) {
            not_found = true;
            break;
        }
        source = s.source();
    }
    let Some(mut cfg) = ctx.last_target().filter(|_| not_found) else {
        return e;
    };
    let through = match path {
        Some(p) => {
            (cfg.host, cfg.port) = p.host_port();
            "the path given with --portal: "
        }
        None => "",
    };
    let name = cfg.target_name.clone().unwrap_or_default();
    let portal = session::portal_string(&cfg.host, cfg.port);
    let offered = match session::discover(cfg).await {
        Ok(targets) if targets.is_empty() => "it offers no targets to this initiator".to_string(),
        Ok(targets) => {
            let names: Vec<String> = targets.into_iter().map(|t| t.name).collect();
            format!("it offers {}", names.join(", "))
        }
        Err(d) => format!(
            "listing its targets failed too: {}",
            rlun_iscsi::error_chain(&d)
        ),
    };
    CliError::Described {
        message: format!(
            "{through}target {name} not found at portal {portal} (login status 0x0203); {offered}"
        ),
        kind: e.kind(),
    }
}

/// The login failed on an answer that is no iSCSI PDU (a framing error,
/// or a cut-off or unexpected answer): often another service (a web
/// server, SSH) listens on the port. Unless the answer starts like a
/// login response, say so with its first bytes — they name the service.
/// They come from the failed connection; only a login response that broke
/// the protocol is asked again on a fresh connection.
async fn explain_foreign_service(e: CliError) -> CliError {
    use crate::transport::TransportError;
    use rlun_iscsi::proto::login::LoginError;
    let session = match &e {
        CliError::Session(s) | CliError::Client(ClientError::Session(s)) => s,
        _ => return e,
    };
    let (portal, first) = match session {
        SessionError::LoginTransport {
            portal,
            source: TransportError::Pdu(_) | TransportError::Truncated { .. },
            answer,
        } => (portal.clone(), Some(answer.clone())),
        SessionError::Login {
            portal,
            source: LoginError::Protocol(_),
        } => (portal.clone(), None),
        _ => return e,
    };
    // The answer to rlun's own login, when the connection kept it; else
    // (a login response that broke the protocol) ask once more.
    let answer = match first.filter(|a| !a.is_empty()) {
        Some(a) => Some(a),
        None => probe_login_answer(&portal).await,
    };
    let answer = match answer {
        Some(a) if looks_like_login_response(&a) => return e,
        Some(a) if !a.is_empty() => format!("its answer to a login begins {}", show_bytes(&a)),
        _ => "its answer to the login is no iSCSI login response".to_string(),
    };
    CliError::Described {
        message: format!(
            "{portal} does not look like an iSCSI target: {answer} (is the port right? iSCSI \
             listens on 3260); the login failed with: {}",
            rlun_iscsi::error_chain(&e)
        ),
        kind: e.kind(),
    }
}

/// How long the probe of [`explain_foreign_service`] waits to connect, and
/// then for the answer (the service answered rlun's login at once).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// Connect to `portal` (`host:port`, over TCP), send a bare 48-byte login
/// request header, and return the first bytes of the answer (one read, at
/// most 64 bytes; `None` when the connection fails).
async fn probe_login_answer(portal: &str) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(portal))
        .await
        .ok()?
        .ok()?;
    // Login request (immediate, 0x43), Transit, CSG 1 → NSG 3, no data.
    let mut bhs = [0u8; 48];
    bhs[0] = 0x43;
    bhs[1] = 0x87;
    stream.write_all(&bhs).await.ok()?;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(PROBE_TIMEOUT, stream.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(buf[..n].to_vec())
}

/// Whether `bytes` start like an iSCSI Login Response header (opcode 0x23).
fn looks_like_login_response(bytes: &[u8]) -> bool {
    bytes.first().is_some_and(|b| b & 0x3f == 0x23)
}

/// Up to 32 bytes quoted as text when printable, with escapes otherwise.
fn show_bytes(bytes: &[u8]) -> String {
    let shown: String = bytes
        .iter()
        .take(32)
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect();
    let more = if bytes.len() > 32 { "…" } else { "" };
    format!("\"{shown}{more}\"")
}

/// The config file `--config` names, or the default one: loaded before the
/// runtime starts, as `threads` in it sizes the runtime.
pub fn load_config(cli: &Cli) -> Result<Config, CliError> {
    Ok(Config::load(cli.config.as_deref())?)
}

/// Worker threads of the runtime: `--threads` (or RLUN_THREADS), else the
/// config file's `[defaults] threads`, else one.
pub fn threads(cli: &Cli, config: &Config) -> usize {
    cli.threads
        .or(config.defaults.threads)
        .unwrap_or(crate::config::settings::DEFAULT_THREADS)
}

async fn run_command(ctx: &Ctx, cli: Cli) -> Result<(), CliError> {
    let quiet = cli.quiet;
    match cli.command {
        Command::Discover { portal, json, conn } => discover::run(ctx, &portal, json, &conn).await,
        Command::Ls { url, json, conn } => ls::run(ctx, &url, json, &conn).await,
        Command::Info { url, json, conn } => info::run(ctx, &url, json, &conn).await,
        Command::Cp {
            src,
            dst,
            bs,
            qd,
            progress,
            no_progress,
            no_sparse,
            offset,
            fua,
            conn,
        } => {
            let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
            cp::run(
                ctx,
                &src,
                &dst,
                cp::Options {
                    bs,
                    qd,
                    progress: cp::ProgressMode::choose(quiet, progress, no_progress, terminal),
                    summary: !quiet,
                    fua,
                    sparse: !no_sparse,
                    offset,
                },
                &conn,
            )
            .await
        }
        Command::Bench {
            url,
            pattern,
            bs,
            qd,
            duration,
            size,
            json,
            allow_write,
            cache,
            conn,
        } => {
            bench::run(
                ctx,
                &url,
                bench::Options {
                    pattern,
                    bs,
                    qd,
                    duration,
                    size,
                    json,
                    allow_write,
                    cache,
                },
                &conn,
            )
            .await
        }
        Command::Mount {
            target,
            mountpoint,
            mount,
            daemon,
            cache,
            conn,
        } => mount::run(ctx, &target, &mountpoint, &mount, &daemon, &cache, &conn).await,
        Command::Umount {
            mountpoint,
            lazy,
            timeout,
        } => mount::umount(&mountpoint, lazy, timeout).await,
        Command::Serve {
            target,
            serve,
            daemon,
            conn,
            cache,
        } => serve::run(ctx, &target, &serve, &daemon, &cache, &conn).await,
        Command::Attach {
            target,
            device,
            attach,
            daemon,
            conn,
            cache,
        } => {
            attach::run(
                ctx,
                &target,
                device.as_deref(),
                &attach,
                &daemon,
                &cache,
                &conn,
            )
            .await
        }
        Command::Detach { device, timeout } => attach::detach(&device, timeout).await,
        Command::List { json } => list::list(json).await,
        Command::Paths { what, json } => paths::paths(what.as_deref(), json).await,
        Command::Rescan { what, timeout } => rescan::rescan(what.as_deref(), timeout).await,
        Command::Stats { what, watch, json } => stats::stats(what.as_deref(), watch, json).await,
        Command::UblkGuard {
            device,
            server,
            timeout,
        } => attach_ublk::guard(device, server, std::time::Duration::from_secs(timeout)).await,
        Command::GenerateMan { dir } => docs::generate_man(&dir),
        Command::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            docs::write_completions(shell, &mut out).map_err(|source| CliError::LocalFile {
                what: "cannot write to",
                path: "standard output".into(),
                source,
            })
        }
    }
}
