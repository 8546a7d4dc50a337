//! [`Ctx`], what every subcommand starts from: the config file, and what
//! it and the command line make of a target argument — its URL, the
//! credentials and timeouts of its session ([`SessionConfig`]), a
//! logged-in LUN.
//!
//! A leaf of `cmd` (it uses only [`super::error`]): the subcommands and
//! the dispatcher use it, it uses none of them.

use std::time::Duration;

use super::error::CliError;
use crate::cli::{ConnectOpts, DigestChoice};
use crate::client::{ClientError, LoggedIn, Lun, Target};
use crate::config::{resolve_initiator_name, CliCreds, Config, Credentials};
use crate::session::SessionConfig;
use crate::url::{TargetUrl, TransportKind};
use rlun_iscsi::proto::digest::{DigestPref, DigestType};
use rlun_iscsi::proto::login::ChapSettings;

/// Shared state of one invocation: the config file and what it implies.
pub struct Ctx {
    pub config: Config,
    /// The session settings of the last target this invocation logged in
    /// to (or tried to): an error that a target does not exist is followed
    /// by a discovery with the same settings, to list the names there are.
    last_target: std::sync::Mutex<Option<SessionConfig>>,
}

impl Ctx {
    pub fn new(config: Config) -> Ctx {
        Ctx {
            config,
            last_target: std::sync::Mutex::new(None),
        }
    }

    /// The session settings of the last target [`Ctx::session_config`]
    /// was asked for.
    pub fn last_target(&self) -> Option<SessionConfig> {
        self.last_target.lock().ok()?.clone()
    }

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

    /// How long a `--daemon` parent waits for its child to be ready
    /// ([`crate::daemon::ready_deadline`]) with these connection options.
    pub fn ready_deadline(&self, opts: &ConnectOpts) -> Duration {
        crate::daemon::ready_deadline(
            opts.connect_timeout
                .unwrap_or(self.config.connect_timeout()),
            opts.login_timeout.unwrap_or(self.config.login_timeout()),
        )
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
        if cfg.target_name.is_some() {
            if let Ok(mut last) = self.last_target.lock() {
                *last = Some(cfg.clone());
            }
        }
        Ok(cfg)
    }

    /// Log in to the target of `url` and open its LUN. The session is
    /// logged out again (awaited) when the LUN cannot be opened; on success
    /// the caller holds it ([`LoggedIn`]).
    pub async fn open_lun(
        &self,
        arg: &str,
        opts: &ConnectOpts,
    ) -> Result<(LoggedIn, Lun), CliError> {
        let (url, entry) = self.resolve_target_url(arg)?;
        url.require_target()?;
        let lun = match (url.lun, &entry) {
            (Some(lun), _) => Some(lun),
            // The README's [targets.NAME] examples name a whole target (for
            // mount and serve): say which URL that was and what to do.
            (None, Some(name)) => {
                return Err(CliError::Usage(format!(
                    "config-file target '{name}' is {url}, which names no LUN, but this command \
                     works on one LUN: `rlun ls {name}` lists them; give {url}/<lun>"
                )))
            }
            (None, None) => None,
        };
        let cfg = self.session_config(&url, entry.as_deref(), opts)?;
        let login = LoggedIn::login(cfg).await;
        let Some(lun) = lun else {
            let Ok(target) = login else {
                // Cannot list them: the URL's mistake comes first.
                return Err(url.require_lun().expect_err("the URL names no LUN").into());
            };
            // Say which LUNs there are, then fail as the URL does.
            let listed = target.scope(async |t: &Target| Ok::<_, CliError>(disk_luns(t).await));
            let listed = listed.await?;
            let e = url.require_lun().expect_err("the URL names no LUN");
            return Err(match listed {
                Some((luns, first)) => CliError::Usage(format!(
                    "URL {url} names no LUN, and this command works on one; {luns}: give {}",
                    url.with_lun(first.unwrap_or(1))
                )),
                None => e.into(),
            });
        };
        let opened = login?
            .or_logout(async |t: &Target| match t.open_lun(lun).await {
                Err(ClientError::LunNotFound(n)) => Err(match disk_luns(t).await {
                    Some((luns, _)) => CliError::Described {
                        message: format!(
                            "LUN {n} does not exist on {}; {luns}",
                            TargetUrl {
                                lun: None,
                                ..url.clone()
                            }
                        ),
                        kind: rlun_iscsi::ErrorKind::NotFound,
                    },
                    None => ClientError::LunNotFound(n).into(),
                }),
                r => r.map_err(CliError::from),
            })
            .await?;
        Ok(opened)
    }
}

/// Most LUNs [`disk_luns`] opens to tell disks from other devices.
const MAX_LUNS_DESCRIBED: usize = 32;

/// "the target's disk LUNs are 1, 2, 3" (with the others it reports, by
/// kind), for messages about a LUN that is not there, and the first disk
/// LUN; `None` when even REPORT LUNS fails.
pub async fn disk_luns(t: &Target) -> Option<(String, Option<u64>)> {
    let numbers = t.report_luns().await.ok()?;
    let mut disks = Vec::new();
    let mut others = Vec::new();
    for &n in numbers.iter().take(MAX_LUNS_DESCRIBED) {
        match t.open_lun(n).await {
            Ok(_) => disks.push(n),
            Err(ClientError::NotADisk { device_type, .. }) => {
                others.push(format!("LUN {n}: {device_type}"))
            }
            Err(_) => others.push(format!("LUN {n}")),
        }
    }
    if numbers.len() > MAX_LUNS_DESCRIBED {
        others.push(format!("{} more", numbers.len() - MAX_LUNS_DESCRIBED));
    }
    let list: Vec<String> = disks.iter().map(u64::to_string).collect();
    let mut text = match disks.len() {
        0 => "the target has no disk LUNs".to_string(),
        1 => format!("the target's disk LUN is {}", list[0]),
        _ => format!("the target's disk LUNs are {}", list.join(", ")),
    };
    if !others.is_empty() {
        text.push_str(&format!(" (besides {})", others.join(", ")));
    }
    Some((text, disks.first().copied()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_choices_become_proposal_lists() {
        assert_eq!(
            digest_list(choice_pref(DigestChoice::None)),
            [DigestType::None]
        );
        assert_eq!(
            digest_list(choice_pref(DigestChoice::Crc32c)),
            [DigestType::Crc32c]
        );
        assert_eq!(
            digest_list(choice_pref(DigestChoice::Prefer)),
            [DigestType::Crc32c, DigestType::None]
        );
    }

    #[test]
    fn the_ready_deadline_follows_the_connect_and_login_timeouts() {
        use clap::Parser as _;
        let ctx = Ctx::new(Config::default());
        let cli = crate::cli::Cli::parse_from([
            "rlun",
            "info",
            "iscsi://h/iqn.x/1",
            "--connect-timeout",
            "2s",
            "--login-timeout",
            "3s",
        ]);
        let crate::cli::Command::Info { conn, .. } = cli.command else {
            unreachable!("parsed as info")
        };

        assert_eq!(
            ctx.ready_deadline(&conn),
            Duration::from_secs(5) + crate::daemon::STARTUP_ALLOWANCE
        );
    }
}
