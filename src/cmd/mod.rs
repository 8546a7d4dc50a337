//! The `rlun` subcommands. `main.rs` parses the command line and calls
//! [`run`]; each subcommand lives in its own file.

/// `println!` that returns an error instead of panicking when standard
/// output is gone (`rlun info | head -1`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::cmd::stdout_error)?;
    }};
}

pub mod attach;
mod bench;
mod cp;
mod info;
mod ls;
pub mod mount;
pub mod serve;

use std::path::PathBuf;

use thiserror::Error;

use crate::cli::{exit, Cli, Command, ConnectOpts, DigestChoice};
use crate::client::{ClientError, Lun, Target};
use crate::config::{resolve_initiator_name, CliCreds, Config, ConfigError, Credentials};
use crate::session::{discover, SessionConfig, SessionError};
use crate::url::{TargetUrl, TransportKind, UrlError};
use rlun_iscsi::proto::digest::{DigestPref, DigestType};
use rlun_iscsi::proto::login::ChapSettings;
use rlun_iscsi::ErrorKind;

/// Any failure of a subcommand. [`CliError::exit_code`] maps it to the
/// documented exit codes.
#[derive(Debug, Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("bad URL")]
    Url(#[from] UrlError),
    #[error("configuration")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Iser(#[from] crate::transport::iser::IserError),
    #[error("{what} {}", path.display())]
    LocalFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
    /// A background process (`rlun mount --daemon`) failed with this message
    /// and exit code.
    #[error("{message}")]
    Child { message: String, code: i32 },
    /// A message composed here, with the kind (so the exit code) of what
    /// failed: `rlun ls PORTAL` naming the targets it could not list, a
    /// discovery error with a hint.
    #[error("{message}")]
    Described { message: String, kind: ErrorKind },
    /// Standard output was closed by its reader: stop quietly.
    #[error("standard output closed")]
    BrokenPipe,
    /// A source read as a stream (`rlun cp - LUN`) is larger than the LUN.
    #[error(
        "{source_name} holds more than the {capacity} bytes of LUN {lun}: the LUN was written full and the rest of the input was not copied"
    )]
    StreamTooLarge {
        source_name: String,
        lun: u64,
        capacity: u64,
    },
    /// SIGINT or SIGTERM stopped the command (exit code 128 + the signal).
    #[error("interrupted by {}", .0.name())]
    Interrupted(crate::daemon::StopSignal),
}

/// A failed SendTargets discovery, with a hint when the portal closed (or
/// reset) the connection during or right after the discovery login: tgtd
/// does that on a portal with no targets bound to it, other targets when
/// no ACL lets this initiator see any.
pub(crate) fn discovery_failed(e: SessionError) -> CliError {
    use crate::transport::TransportError;
    // tgtd closes with a reset when our request is still unread.
    let closed = |t: &TransportError| match t {
        TransportError::Closed | TransportError::Truncated { .. } => true,
        TransportError::Io(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        _ => false,
    };
    let hint = match &e {
        SessionError::LoginTransport { source, .. } => closed(source),
        SessionError::ConnectionLost(source) => closed(source),
        _ => false,
    };
    if !hint {
        return e.into();
    }
    CliError::Described {
        message: format!(
            "{}: the portal may have no targets bound to it, or no ACL that lets this \
             initiator see one (check the target's configuration and --initiator-name)",
            rlun_iscsi::error_chain(&e)
        ),
        kind: e.kind(),
    }
}

/// Map a failed write to standard output.
pub(crate) fn stdout_error(source: std::io::Error) -> CliError {
    if source.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::BrokenPipe
    } else {
        CliError::LocalFile {
            what: "cannot write to",
            path: PathBuf::from("standard output"),
            source,
        }
    }
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::BrokenPipe => exit::OK,
            CliError::Child { code, .. } => *code,
            CliError::Interrupted(s) => 128 + s.number(),
            other => kind_exit_code(other.kind()),
        }
    }

    /// How this failure is classified ([`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            CliError::Usage(_) | CliError::Url(_) | CliError::Config(_) => ErrorKind::Usage,
            CliError::LocalFile { .. } => ErrorKind::LocalFile,
            CliError::Other(_)
            | CliError::BrokenPipe
            | CliError::Child { .. }
            | CliError::Interrupted(_) => ErrorKind::Failure,
            CliError::StreamTooLarge { .. } => ErrorKind::Io,
            CliError::Described { kind, .. } => *kind,
            CliError::Session(e) => e.kind(),
            CliError::Iser(e) => e.kind(),
            CliError::Client(e) => e.kind(),
        }
    }
}

/// The documented exit code (`cli::exit`) of each kind of failure.
pub fn kind_exit_code(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::Usage => exit::USAGE,
        ErrorKind::Unreachable => exit::UNREACHABLE,
        ErrorKind::Auth => exit::AUTH,
        ErrorKind::NotFound => exit::NOT_FOUND,
        ErrorKind::Io => exit::IO,
        ErrorKind::Protocol => exit::PROTOCOL,
        ErrorKind::LocalFile => exit::LOCAL_FILE,
        ErrorKind::Failure => exit::FAILURE,
    }
}

/// Shared state of one invocation: the config file and what it implies.
pub struct Ctx {
    pub config: Config,
}

impl Ctx {
    /// Resolve an argument that names a target: a URL, a bare portal, or
    /// the name of a `[targets.<name>]` entry in the config file.
    pub fn resolve_url(&self, arg: &str) -> Result<(TargetUrl, Option<String>), CliError> {
        if !arg.contains("://") {
            if let Some(entry) = self.config.target(arg) {
                return Ok((entry.url.clone(), Some(arg.to_string())));
            }
        }
        Ok((TargetUrl::parse(arg)?, None))
    }

    /// [`Ctx::resolve_url`] for commands that need a target: a bare word
    /// that is neither a configured name nor a URL naming a target is
    /// reported as an unknown config-file target (what a systemd unit
    /// instance name or a typo most likely is), listing the known names.
    pub fn resolve_target_url(&self, arg: &str) -> Result<(TargetUrl, Option<String>), CliError> {
        let (url, entry) = self.resolve_url(arg)?;
        let bare_word = !arg.contains("://") && !arg.contains('/') && !arg.contains(':');
        if entry.is_none() && url.target.is_none() && bare_word {
            if let Err(e) = self.config.require_target(arg) {
                return Err(e.into());
            }
        }
        Ok((url, entry))
    }

    /// Everything needed to log in to `url`.
    pub fn session_config(
        &self,
        url: &TargetUrl,
        entry_name: Option<&str>,
        opts: &ConnectOpts,
    ) -> Result<SessionConfig, CliError> {
        if url.transport == TransportKind::Iser {
            // Say at once when this machine cannot do RDMA at all.
            crate::transport::iser::check_available()?;
        }
        let entry = entry_name.and_then(|n| self.config.target(n)).or_else(|| {
            // A URL that matches a configured target picks up its settings too.
            self.config.targets.values().find(|e| {
                e.url.portal == url.portal && e.url.target.is_some() && e.url.target == url.target
            })
        });
        let env = |k: &str| std::env::var(k).ok();
        let initiator = resolve_initiator_name(opts.initiator_name.as_deref(), env, &self.config)?;
        let cli_creds = CliCreds {
            user: opts.chap_user.clone(),
            ..Default::default()
        };
        let (creds, warnings) =
            Credentials::resolve(&cli_creds, url, env, opts.chap_file.as_deref(), entry)?;
        for w in warnings.iter().chain(self.config.warnings.iter()) {
            tracing::warn!("{w}");
        }
        let (host, port) = url.portal.host_port();
        let mut cfg = SessionConfig::new(host, port, initiator);
        cfg.transport = url.transport;
        cfg.target_name = url.target.clone();
        cfg.connect_timeout = opts
            .connect_timeout
            .unwrap_or(self.config.connect_timeout());
        cfg.login_timeout = opts.login_timeout.unwrap_or(self.config.login_timeout());
        cfg.replacement_timeout = opts.replacement_timeout;
        cfg.nop_interval = (!opts.nop_interval.is_zero()).then_some(opts.nop_interval);
        cfg.nop_timeout = opts.nop_timeout;
        cfg.command_timeout = opts.command_timeout;
        if !(512..=0xff_ffff).contains(&opts.max_recv_segment) {
            return Err(CliError::Usage(format!(
                "--max-recv-segment {} is outside 512..16777215",
                opts.max_recv_segment
            )));
        }
        cfg.proposal.max_recv_data_segment_length = opts.max_recv_segment as u32;
        cfg.chap = creds.chap.map(|c| ChapSettings {
            user: c.user,
            secret: c.secret,
            mutual: creds.mutual.map(|m| (m.user, m.secret)),
        });
        let header = match opts.header_digest {
            Some(d) => Some(choice_pref(d)),
            None => url
                .header_digest
                .or(entry.and_then(|e| e.header_digest))
                .or(self.config.defaults.header_digest),
        };
        let data = match opts.data_digest {
            Some(d) => Some(choice_pref(d)),
            None => entry
                .and_then(|e| e.data_digest)
                .or(self.config.defaults.data_digest),
        };
        if let Some(h) = header {
            cfg.proposal.header_digest = digest_list(h);
        }
        if let Some(d) = data {
            cfg.proposal.data_digest = digest_list(d);
        }
        Ok(cfg)
    }

    /// Log in to the target of `url` and open its LUN.
    pub async fn open_lun(&self, arg: &str, opts: &ConnectOpts) -> Result<(Target, Lun), CliError> {
        let (url, entry) = self.resolve_target_url(arg)?;
        url.require_target()?;
        let lun = match (url.lun, &entry) {
            (Some(lun), _) => lun,
            // The README's [targets.NAME] examples name a whole target (for
            // mount and serve): say which URL that was and what to do.
            (None, Some(name)) => {
                return Err(CliError::Usage(format!(
                    "config-file target '{name}' is {url}, which names no LUN, but this command \
                     works on one LUN: `rlun ls {name}` lists them; give {url}/<lun>"
                )))
            }
            (None, None) => url.require_lun()?,
        };
        let cfg = self.session_config(&url, entry.as_deref(), opts)?;
        let target = Target::login(cfg).await?;
        match target.open_lun(lun).await {
            Ok(l) => Ok((target, l)),
            Err(e) => {
                let _ = target.logout().await;
                Err(e.into())
            }
        }
    }
}

impl Ctx {
    /// Log in to the target of `url` and open what it names as exports
    /// (one LUN, or every disk LUN; see [`crate::export::open_luns`]), each
    /// over a device with `cfg`. Logs out again on failure. For every
    /// command that serves exports (`mount`; `serve` and `attach` next).
    pub async fn open_exports(
        &self,
        url: &TargetUrl,
        entry: Option<&str>,
        conn: &ConnectOpts,
        cfg: &crate::device::DeviceConfig,
        read_only: bool,
    ) -> Result<(Target, crate::export::ExportSet<Lun>), CliError> {
        use crate::export::{open_luns, ExportSet, OpenError};
        let iqn = url.require_target()?.to_string();
        let session = self.session_config(url, entry, conn)?;
        let target = Target::login(session).await?;
        let opened = match open_luns(&target, &iqn, url.lun).await {
            Ok(luns) => ExportSet::new(luns, cfg, read_only)
                .map_err(|e| CliError::Usage(rlun_iscsi::error_chain(&e))),
            Err(OpenError::Client(e)) => Err(e.into()),
            Err(e @ OpenError::NoDiskLuns { .. }) => Err(CliError::Other(e.to_string())),
        };
        match opened {
            Ok(set) => Ok((target, set)),
            Err(e) => {
                let _ = target.logout().await;
                Err(e)
            }
        }
    }
}

fn choice_pref(c: DigestChoice) -> DigestPref {
    match c {
        DigestChoice::None => DigestPref::None,
        DigestChoice::Crc32c => DigestPref::Crc32c,
        DigestChoice::Prefer => DigestPref::PreferCrc32c,
    }
}

fn digest_list(p: DigestPref) -> Vec<DigestType> {
    match p {
        DigestPref::None => vec![DigestType::None],
        DigestPref::Crc32c => vec![DigestType::Crc32c],
        DigestPref::PreferCrc32c => vec![DigestType::Crc32c, DigestType::None],
    }
}

/// Human size: 1.5 GiB, 512 B.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Run the parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match run_command(cli).await {
        Err(e) => Err(explain_foreign_service(e).await),
        ok => ok,
    }
}

/// The login failed on an answer that is no iSCSI PDU (a framing error,
/// or a cut-off or unexpected answer): often another service (a web
/// server, SSH) listens on the port. Ask again on a fresh connection
/// with a bare login request and, unless a login response comes back,
/// say so with the first bytes of the answer — they name the service.
async fn explain_foreign_service(e: CliError) -> CliError {
    use crate::transport::TransportError;
    use rlun_iscsi::proto::login::LoginError;
    let session = match &e {
        CliError::Session(s) | CliError::Client(ClientError::Session(s)) => s,
        _ => return e,
    };
    let portal = match session {
        SessionError::LoginTransport {
            portal,
            source: TransportError::Pdu(_) | TransportError::Truncated { .. },
        }
        | SessionError::Login {
            portal,
            source: LoginError::Protocol(_),
        } => portal.clone(),
        _ => return e,
    };
    let answer = match probe_login_answer(&portal).await {
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

async fn run_command(cli: Cli) -> Result<(), CliError> {
    let config = Config::load(cli.config.as_deref())?;
    let ctx = Ctx { config };
    match cli.command {
        Command::Discover { portal, conn } => {
            let (url, entry) = ctx.resolve_url(&portal)?;
            let portal_url = TargetUrl {
                target: None,
                lun: None,
                ..url
            };
            let cfg = ctx.session_config(&portal_url, entry.as_deref(), &conn)?;
            let targets = discover(cfg).await.map_err(discovery_failed)?;
            if targets.is_empty() {
                eprintln!(
                    "portal {} offers no targets to this initiator",
                    portal_url.portal
                );
            }
            for t in targets {
                let addrs: Vec<String> = t.addresses.iter().map(|a| a.to_string()).collect();
                out!("{} {}", t.name, addrs.join(" "));
            }
            Ok(())
        }
        Command::Ls { url, conn } => ls::run(&ctx, &url, &conn).await,
        Command::Info { url, json, conn } => info::run(&ctx, &url, json, &conn).await,
        Command::Cp {
            src,
            dst,
            bs,
            qd,
            progress,
            no_progress,
            fua,
            conn,
        } => {
            let show = if no_progress {
                false
            } else {
                progress || std::io::IsTerminal::is_terminal(&std::io::stderr())
            };
            cp::run(
                &ctx,
                &src,
                &dst,
                cp::Options {
                    bs,
                    qd,
                    progress: show,
                    fua,
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
                &ctx,
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
        } => mount::run(&ctx, &target, &mountpoint, &mount, &daemon, &cache, &conn).await,
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
        } => serve::run(&ctx, &target, &serve, &daemon, &cache, &conn).await,
        Command::Attach {
            target,
            device,
            attach,
            daemon,
            conn,
            cache,
        } => {
            attach::run(
                &ctx,
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
        Command::List => attach::list(),
        Command::GenerateMan { dir } => generate_man(&dir),
        Command::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            write_completions(shell, &mut out).map_err(|source| CliError::LocalFile {
                what: "cannot write to",
                path: "standard output".into(),
                source,
            })
        }
    }
}

/// The completion script for `shell`, generated from the clap definitions.
pub fn write_completions(
    shell: crate::cli::Shell,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use clap::CommandFactory;
    use clap_complete::shells;
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    match shell {
        crate::cli::Shell::Bash => {
            clap_complete::generate(shells::Bash, &mut cmd, "rlun", &mut buf)
        }
        crate::cli::Shell::Zsh => clap_complete::generate(shells::Zsh, &mut cmd, "rlun", &mut buf),
        crate::cli::Shell::Fish => {
            clap_complete::generate(shells::Fish, &mut cmd, "rlun", &mut buf)
        }
    }
    out.write_all(&buf)?;
    out.flush()
}

fn generate_man(dir: &std::path::Path) -> Result<(), CliError> {
    use clap::CommandFactory;
    let io = |source| CliError::LocalFile {
        what: "cannot write man page into",
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let cmd = Cli::command();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .render(&mut buf)
        .map_err(io)?;
    std::fs::write(dir.join("rlun.8"), &buf).map_err(io)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("rlun-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).bin_name(name.clone());
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub)
            .section("8")
            .render(&mut buf)
            .map_err(io)?;
        std::fs::write(dir.join(format!("{name}.8")), &buf).map_err(io)?;
    }
    std::fs::write(dir.join("rlun.toml.5"), config_man_page()).map_err(io)?;
    Ok(())
}

/// rlun.toml(5): the config format text as a preformatted man page. Its
/// upper-case headings become `.SH` sections, and the NAME line reads
/// `rlun.toml \- ...`, so that mandb/whatis can index the page.
fn config_man_page() -> String {
    let mut out = String::from(".TH RLUN.TOML 5 \"rlun\" \"\" \"File Formats\"\n");
    let mut in_name = false;
    for line in crate::config::CONFIG_FORMAT_HELP.lines() {
        let heading = !line.is_empty() && line.chars().all(|c| c.is_ascii_uppercase() || c == ' ');
        if heading {
            out.push_str(&format!(".SH {line}\n.nf\n"));
            in_name = line == "NAME";
            continue;
        }
        if in_name {
            if let Some((name, what)) = line.trim().split_once(" - ") {
                out.push_str(&format!("{name} \\- {what}\n"));
                continue;
            }
        }
        // Escape roff: backslashes, and a leading dot or quote.
        let l = line.replace('\\', "\\e");
        if l.starts_with('.') || l.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlun_iscsi::proto::login::LoginError;

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(64 << 20), "64.0 MiB");
        assert_eq!(human_size(3 << 29), "1.5 GiB");
    }

    #[test]
    fn login_failures_map_to_documented_exit_codes() {
        let e = CliError::Session(SessionError::Login {
            portal: "p".into(),
            source: LoginError::AuthenticationFailed,
        });
        assert_eq!(e.exit_code(), exit::AUTH);
        let e = CliError::Session(SessionError::Login {
            portal: "p".into(),
            source: LoginError::TargetNotFound,
        });
        assert_eq!(e.exit_code(), exit::NOT_FOUND);
        assert_eq!(
            CliError::Client(ClientError::ReadOnly(1)).exit_code(),
            exit::IO
        );
        assert_eq!(
            CliError::Client(ClientError::LunNotFound(9)).exit_code(),
            exit::NOT_FOUND
        );
    }
}
