//! [`Ctx`], what every subcommand starts from: the config file, and what
//! it and the command line make of a target argument — its URL, the
//! credentials and timeouts of its session ([`SessionConfig`]), a
//! logged-in LUN.
//!
//! A leaf of `cmd` (it uses only [`super::error`]): the subcommands and
//! the dispatcher use it, it uses none of them.

use std::time::Duration;

use super::error::CliError;
use crate::cli::ConnectOpts;
use crate::client::{ClientError, LoggedIn, Lun, Target};
use crate::config::settings::{Effective, OnOff, Settings};
use crate::config::{resolve_initiator_name, CliCreds, Config, Credentials, TargetEntry};
use crate::device::{CacheBudget, CacheMode, DeviceConfig};
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

    /// The `[targets.<name>]` entry for `url`: the one named, else one
    /// whose URL names the same portal and target (a URL that matches a
    /// configured target picks up its settings too).
    pub fn entry_for(&self, url: &TargetUrl, entry_name: Option<&str>) -> Option<&TargetEntry> {
        entry_name.and_then(|n| self.config.target(n)).or_else(|| {
            self.config.targets.values().find(|e| {
                e.url.portal == url.portal && e.url.target.is_some() && e.url.target == url.target
            })
        })
    }

    /// Where to serve metrics: `cli` (`--metrics-listen`), else the
    /// `metrics_listen` of the `[targets.<name>]` entry named on the
    /// command line (not one found by URL: a second command serving the
    /// same target by URL would want the same port).
    pub fn metrics(
        &self,
        entry_name: Option<&str>,
        cli: Option<crate::metrics::Listen>,
    ) -> Option<crate::metrics::Listen> {
        cli.or_else(|| {
            let e = self.config.target(entry_name?)?;
            e.metrics_listen.map(|addr| crate::metrics::Listen {
                addr,
                allow_remote: e.metrics_allow_remote,
            })
        })
    }

    /// The settings in effect for `url`: `cli` (the command line's), then
    /// the URL's `?header_digest=`, then the target's config entry, then
    /// `[defaults]`, then the built-in defaults.
    pub fn settings(&self, url: &TargetUrl, entry_name: Option<&str>, cli: &Settings) -> Effective {
        let from_url = Settings {
            header_digest: url.header_digest,
            ..Settings::default()
        };
        let file = self.config.settings_for(self.entry_for(url, entry_name));
        cli.clone().or(&from_url).or(&file).resolve()
    }

    /// [`Ctx::settings`] for a target argument (URL or config name); one
    /// that does not resolve gets `[defaults]` (its error comes later).
    pub fn settings_for_arg(&self, arg: &str, cli: &Settings) -> Effective {
        match self.resolve_url(arg) {
            Ok((url, entry)) => self.settings(&url, entry.as_deref(), cli),
            Err(_) => cli.clone().or(&self.config.settings_for(None)).resolve(),
        }
    }

    /// How long a `--daemon` parent waits for its child to be ready
    /// ([`crate::daemon::ready_deadline`]) for target `arg` with these
    /// connection options.
    pub fn ready_deadline(&self, arg: &str, opts: &ConnectOpts) -> Duration {
        let s = self.settings_for_arg(arg, &opts.settings());
        crate::daemon::ready_deadline(s.connect_timeout, s.login_timeout)
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
        let entry = self.entry_for(url, entry_name);
        let s = self.settings(url, entry_name, &opts.settings());
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
        cfg.connect_timeout = s.connect_timeout;
        cfg.login_timeout = s.login_timeout;
        cfg.replacement_timeout = s.replacement_timeout;
        cfg.nop_interval = (!s.nop_interval.is_zero()).then_some(s.nop_interval);
        cfg.nop_timeout = s.nop_timeout;
        cfg.command_timeout = s.command_timeout;
        cfg.proposal.max_recv_data_segment_length = s.max_recv_segment;
        cfg.chap = creds.chap.map(|c| ChapSettings {
            user: c.user,
            secret: c.secret,
            mutual: creds.mutual.map(|m| (m.user, m.secret)),
        });
        if let Some(h) = s.header_digest {
            cfg.proposal.header_digest = digest_list(h);
        }
        if let Some(d) = s.data_digest {
            cfg.proposal.data_digest = digest_list(d);
        }
        // --portal replaces the entry's list.
        let portals = match (&opts.portals, entry) {
            (given, _) if !given.is_empty() => given.as_slice(),
            (_, Some(e)) => e.portals.as_slice(),
            (_, None) => &[],
        };
        let auto = s.multipath == crate::config::settings::MultipathMode::Auto;
        if !portals.is_empty() || (auto && cfg.target_name.is_some()) {
            cfg.multipath = Some(multipath_config(url, portals, &s)?);
        } else if opts.multipath_policy.is_some()
            || opts.failback.is_some()
            || opts.path_check_interval.is_some()
            || opts.path_timeout.is_some()
            || opts.path_fence.is_some()
        {
            tracing::warn!(
                "the multipath options take effect with more than one portal: give --portal (or --multipath auto)"
            );
        }
        tracing::debug!(
            connect_timeout = ?s.connect_timeout,
            login_timeout = ?s.login_timeout,
            replacement_timeout = ?s.replacement_timeout,
            nop_interval = ?s.nop_interval,
            nop_timeout = ?s.nop_timeout,
            command_timeout = ?s.command_timeout,
            max_recv_segment = s.max_recv_segment,
            header_digest = ?s.header_digest,
            data_digest = ?s.data_digest,
            "session settings"
        );
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

/// The device layer's settings from the settings in effect, for cache
/// `mode`. Every call makes a new budget of `cache_size`, shared by every
/// device opened with (a clone of) the returned settings: call it once per
/// process. With a cache, its page memory is reserved here, before the
/// command logs in, so that an iSER connection registers it when it
/// connects.
pub fn device_config(s: &Effective, mode: CacheMode) -> DeviceConfig {
    let budget = CacheBudget::new(s.cache_size);
    if mode != CacheMode::None {
        budget.reserve();
    }
    tracing::debug!(
        ?mode,
        cache_size = s.cache_size,
        readahead = ?s.readahead,
        writeback_delay = ?s.writeback_delay,
        stats_interval = ?s.stats_interval,
        "cache settings"
    );
    DeviceConfig {
        mode,
        cache_size: s.cache_size,
        budget: Some(budget),
        readahead: s.readahead == OnOff::On,
        writeback_delay: s.writeback_delay,
        stats_interval: s.stats_interval,
        ..DeviceConfig::default()
    }
}

fn digest_list(p: DigestPref) -> Vec<DigestType> {
    match p {
        DigestPref::None => vec![DigestType::None],
        DigestPref::Crc32c => vec![DigestType::Crc32c],
        DigestPref::PreferCrc32c => vec![DigestType::Crc32c, DigestType::None],
    }
}

/// The other paths of `--portal` (each `HOST[:PORT]`, or a portal URL
/// for another transport) and the multipath settings. A portal given
/// twice, or the URL's own, is refused: it would be one path counted as
/// two.
fn multipath_config(
    url: &TargetUrl,
    portals: &[String],
    s: &crate::config::settings::Effective,
) -> Result<crate::session::MultipathConfig, CliError> {
    let mut seen = vec![(url.transport, url.portal.host_port())];
    let mut out = Vec::new();
    for p in portals {
        let (transport, portal) = if p.contains("://") {
            let u = TargetUrl::parse(p)?;
            if u.target
                .as_ref()
                .is_some_and(|t| Some(t) != url.target.as_ref())
            {
                return Err(CliError::Usage(format!(
                    "portal {p}: a path must lead to the URL's target; give the portal alone"
                )));
            }
            (u.transport, u.portal)
        } else {
            (url.transport, crate::url::Portal::parse(p)?)
        };
        let hp = portal.host_port();
        if seen.iter().any(|(t, x)| *t == transport && *x == hp) {
            return Err(CliError::Usage(format!(
                "portal {p}: this portal is already a path (each portal is one path)"
            )));
        }
        seen.push((transport, hp.clone()));
        out.push((transport, hp.0, hp.1));
    }
    Ok(crate::session::MultipathConfig {
        portals: out,
        discover: s.multipath == crate::config::settings::MultipathMode::Auto,
        policy: s.multipath_policy,
        failback: s.failback,
        check_interval: s.path_check_interval,
        path_timeout: s.path_timeout,
        fence: s.path_fence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::DigestChoice;

    #[test]
    fn digest_choices_become_proposal_lists() {
        assert_eq!(digest_list(DigestChoice::None.pref()), [DigestType::None]);
        assert_eq!(
            digest_list(DigestChoice::Crc32c.pref()),
            [DigestType::Crc32c]
        );
        assert_eq!(
            digest_list(DigestChoice::Prefer.pref()),
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
            ctx.ready_deadline("iscsi://h/iqn.x/1", &conn),
            Duration::from_secs(5) + crate::daemon::STARTUP_ALLOWANCE
        );
    }

    #[test]
    fn the_command_line_beats_the_target_entry_which_beats_defaults() {
        use clap::Parser as _;
        let config = Config::from_toml_str(
            "[defaults]\nconnect_timeout = \"3s\"\nnop_interval = \"1s\"\ncache_size = \"8M\"\n\
             [targets.t]\nurl = \"iscsi://h/iqn.2026-11.org.example:t\"\n\
             connect_timeout = \"4s\"\nlogin_timeout = \"6s\"\ncache = \"write-back\"\n",
            std::path::Path::new("r.toml"),
        )
        .unwrap();
        let ctx = Ctx::new(config);
        let cli = crate::cli::Cli::parse_from([
            "rlun",
            "serve",
            "t",
            "--socket",
            "/s",
            "--login-timeout",
            "2s",
        ]);
        let crate::cli::Command::Serve { conn, cache, .. } = cli.command else {
            unreachable!("parsed as serve")
        };
        let flags = conn.settings().or(&cache.settings());
        let s = ctx.settings_for_arg("t", &flags);
        assert_eq!(s.login_timeout, Duration::from_secs(2)); // command line
        assert_eq!(s.connect_timeout, Duration::from_secs(4)); // target entry
        assert_eq!(s.cache, Some(crate::cli::CacheChoice::WriteBack));
        assert_eq!(s.nop_interval, Duration::from_secs(1)); // [defaults]
        assert_eq!(s.cache_size, 8 << 20);
        assert_eq!(
            s.command_timeout,
            crate::config::settings::BUILT_IN.command_timeout
        );
        // A URL naming the same target finds the entry too.
        let s = ctx.settings_for_arg("iscsi://h/iqn.2026-11.org.example:t/1", &flags);
        assert_eq!(s.connect_timeout, Duration::from_secs(4));
        // Another target gets [defaults] only.
        let s = ctx.settings_for_arg("iscsi://h/iqn.2026-11.org.example:u/1", &flags);
        assert_eq!(s.connect_timeout, Duration::from_secs(3));
        assert_eq!(s.cache, None);
        assert_eq!(
            ctx.ready_deadline("t", &conn),
            Duration::from_secs(6) + crate::daemon::STARTUP_ALLOWANCE
        );
    }
}
