//! Settings and credentials: the TOML config file, a CHAP credentials file,
//! the environment, and the initiator name.
//!
//! # Where CHAP credentials come from
//!
//! Each of the four values (one-way user and secret, mutual user and secret)
//! is taken from the first source that has it, in this order:
//!
//! 1. explicit command-line values (`--chap-user`, …);
//! 2. the URL's user information (`iscsi://user%secret@…`) and its
//!    `?target_user=`/`?target_password=` query;
//! 3. environment variables `RLUN_CHAP_USER`, `RLUN_CHAP_SECRET`,
//!    `RLUN_CHAP_MUTUAL_USER`, `RLUN_CHAP_MUTUAL_SECRET`, or else libiscsi's
//!    `LIBISCSI_CHAP_USERNAME`, `LIBISCSI_CHAP_PASSWORD`,
//!    `LIBISCSI_CHAP_TARGET_USERNAME`, `LIBISCSI_CHAP_TARGET_PASSWORD`;
//! 4. the credentials file given with `--chap-file`;
//! 5. the config file's `[targets.<name>]` entry for the target.
//!
//! Values are picked one by one, so `iscsi://alice@host/...` with
//! `RLUN_CHAP_SECRET` set works. A user without a secret (or the reverse) is
//! an error, and so is mutual CHAP without one-way CHAP (RFC 7143 §12.1.3:
//! the target authenticates itself only in answer to the initiator's CHAP
//! response) and the same secret in both directions (RFC 7143 §12.1.3
//! forbids it). A secret shorter than 12 bytes (96 bits, the minimum RFC
//! 7143 §12.1.3 asks for without IPsec) gives a warning, as do secrets in
//! process arguments. A secret file, credentials file or config file with
//! an inline secret that its group or others can read is refused
//! ([`ConfigError::SecretsReadable`]), with the `chmod 600` that fixes it.
//!
//! Warnings are returned, never printed: the caller decides how to show them.
//! No function here reads the process environment directly; they take an
//! `env` closure (`|k| std::env::var(k).ok()` in the binary) so tests stay
//! hermetic.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::url::{check_iscsi_name, TargetUrl, UrlError};
use rlun_iscsi::proto::digest::DigestPref;
use rlun_iscsi::secret::Secret;

/// Where the config file lives unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/rlun/rlun.toml";

/// Prefix of the default initiator name; the host name follows the colon.
pub const DEFAULT_INITIATOR_PREFIX: &str = "iqn.2026-11.org.rlun";

/// RFC 7143 §12.1.3: CHAP secrets of at least 96 bits when not protected by
/// IPsec.
pub const MIN_CHAP_SECRET_LEN: usize = 12;

/// Default TCP connect timeout when the config file sets none.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 10;

/// Default login timeout when the config file sets none.
pub const DEFAULT_LOGIN_TIMEOUT_SECS: u64 = 15;

/// Help text on credentials, for `--help` and the man page.
pub const CREDENTIALS_HELP: &str = "\
CHAP CREDENTIALS
    Each value is taken from the first of these that has it:
      1. --chap-user, --chap-secret, --chap-mutual-user, --chap-mutual-secret
      2. the URL: iscsi://user%secret@host/...?target_user=U&target_password=S
      3. RLUN_CHAP_USER, RLUN_CHAP_SECRET, RLUN_CHAP_MUTUAL_USER,
         RLUN_CHAP_MUTUAL_SECRET; or else libiscsi's LIBISCSI_CHAP_USERNAME,
         LIBISCSI_CHAP_PASSWORD, LIBISCSI_CHAP_TARGET_USERNAME,
         LIBISCSI_CHAP_TARGET_PASSWORD
      4. --chap-file PATH, a TOML file with user, secret, mutual_user and
         mutual_secret (keep it mode 0600)
      5. the [targets.<name>] entry in the config file (chap_user,
         chap_secret or chap_secret_file, mutual_user, mutual_secret or
         mutual_secret_file)
    The mutual pair is the name and secret the target must prove it knows.
    Secrets on the command line or in a URL are visible to every local user
    in the process list; prefer the environment or a file. Secrets should be
    at least 12 bytes long, and the mutual secret must differ from the
    one-way secret (RFC 7143).
";

/// The config file format, man-page ready (it becomes `rlun.toml(5)`).
pub const CONFIG_FORMAT_HELP: &str = r#"NAME
    rlun.toml - configuration file for rlun

SYNOPSIS
    /etc/rlun/rlun.toml (another path with --config PATH)

DESCRIPTION
    A TOML file with an optional [defaults] table and any number of
    [targets.<name>] tables. A missing default file is the same as an empty
    one; a file named with --config must exist. Unknown keys are errors.

[defaults]
    initiator_name = "iqn.2026-11.org.rlun:myhost"
        The iSCSI name rlun logs in with (RFC 7143 section 4.2.7). The
        RLUN_INITIATOR_NAME environment variable and --initiator-name take
        precedence. Without any of them rlun uses the InitiatorName= of
        open-iscsi's /etc/iscsi/initiatorname.iscsi when that file exists
        (so target ACLs written for this host's kernel initiator admit rlun
        too), else iqn.2026-11.org.rlun:<host name>, stable for the host.
    connect_timeout_secs = 10
        Seconds to wait for the TCP (or RDMA) connection. Must be above 0.
    login_timeout_secs = 15
        Seconds to wait for the login to complete. Must be above 0.
    header_digest = "none" | "crc32c" | "prefer-crc32c"
    data_digest = "none" | "crc32c" | "prefer-crc32c"
        What to offer for HeaderDigest and DataDigest (RFC 7143 section
        13.1): "none" offers None, "crc32c" insists on CRC32C, and
        "prefer-crc32c" offers CRC32C,None ("prefer", the short form
        --header-digest also takes, means the same). Default: "none".

[targets.<name>]
    A named target, usable in place of a URL: `rlun mount store /mnt/x`.
    url = "iscsi://10.0.0.5/iqn.2026-11.org.example:store/1"
        Required. Must name a target; the LUN may be left out.
    chap_user = "alice"
    chap_secret = "..."  or  chap_secret_file = "/etc/rlun/store.secret"
        One-way CHAP: the name and secret rlun proves it knows. A secret
        file holds the secret alone (one trailing newline is dropped); a
        relative path is taken from the config file's directory. Give
        chap_secret or chap_secret_file, not both.
    mutual_user = "store-target"
    mutual_secret = "..."  or  mutual_secret_file = "..."
        Mutual CHAP: the name and secret the target must prove it knows.
    header_digest, data_digest
        As in [defaults], for this target only.

    A file that holds secrets must be readable by its owner only (chmod 600):
    rlun refuses a secret file, a credentials file, or this file when it
    holds a secret inline, if its group or others can read it.

SYSTEMD
    The packages install three unit templates that run a target of this
    file by its name; the instance name is the <name> of [targets.<name>]:
    rlun-mount@<name>.service
        rlun mount <name> /run/rlun/mount/<name>: each disk LUN as a file
        in that directory (`systemctl enable --now rlun-mount@store`).
    rlun-serve@<name>.service
        rlun serve <name> --socket /run/rlun/nbd/<name>.sock: each disk LUN
        as the NBD export lun<N> on that socket (mode 0600: root's clients).
    rlun-attach@<name>.service
        rlun attach <name>: the target's one disk LUN (or the LUN its url
        names) as the first free /dev/nbdN, shown in the unit's status and
        by `rlun list`; the unit loads the nbd module first.
    The mount point, the socket and the device follow that fixed layout. To
    use another one, replace the unit's command with a drop-in (`systemctl
    edit rlun-mount@store`: an empty ExecStart= line, then your
    ExecStart=). All three are Type=notify: the unit is started only when
    the mount answers, the socket accepts clients or the device is
    configured. Stopping writes back cached data, logs out and unmounts or
    detaches (rlun-attach first flushes the device's dirty pages) within
    TimeoutStopSec=150; the unit fails when written data did not reach the
    target. Restart=on-failure; LimitMEMLOCK=infinity for iSER. Secret
    files must lie outside /home and /root for the serve and attach units
    (ProtectHome=yes).

EXAMPLE
    [defaults]
    initiator_name = "iqn.2026-11.org.example:db1"
    header_digest = "prefer-crc32c"

    [targets.store]
    url = "iscsi://10.0.0.5/iqn.2026-11.org.example:store/1"
    chap_user = "db1"
    chap_secret_file = "store.secret"
"#;

/// Errors from loading the config, a credentials file or resolving
/// credentials. Messages name the file and the key, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}", path.display())]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("config file {}: {detail}", path.display())]
    ParseConfig { path: PathBuf, detail: String },

    #[error("config file {}: {key}: {reason}", path.display())]
    InvalidConfig {
        path: PathBuf,
        key: String,
        reason: String,
    },

    #[error("no target named '{name}' {}", where_looked(path, *file_read, known))]
    UnknownTarget {
        name: String,
        path: PathBuf,
        /// False when no config file was read at all (missing, unreadable).
        file_read: bool,
        known: Vec<String>,
    },

    #[error(
        "{what} {} holds secrets but is readable by {by} (mode {mode:04o}); rlun refuses it: run chmod 600 {}",
        path.display(),
        path.display()
    )]
    SecretsReadable {
        what: &'static str,
        path: PathBuf,
        by: &'static str,
        mode: u32,
    },

    #[error("cannot read credentials file {}", path.display())]
    ReadCredentials {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("credentials file {}: {detail}", path.display())]
    ParseCredentials { path: PathBuf, detail: String },

    #[error("cannot read secret file {} (named by {key})", path.display())]
    ReadSecretFile {
        path: PathBuf,
        key: String,
        #[source]
        source: io::Error,
    },

    #[error("secret file {} (named by {key}) is empty", path.display())]
    EmptySecretFile { path: PathBuf, key: String },

    #[error("{role} CHAP user '{user}' (from {from}) has no secret; {hint}")]
    UserWithoutSecret {
        role: ChapRole,
        user: String,
        from: String,
        hint: &'static str,
    },

    #[error("{role} CHAP secret (from {from}) has no user name; {hint}")]
    SecretWithoutUser {
        role: ChapRole,
        from: String,
        hint: &'static str,
    },

    #[error("mutual CHAP is configured but one-way CHAP is not; the target can only authenticate itself after the initiator did (RFC 7143 §12.1.3)")]
    MutualWithoutOneWay,

    #[error("the mutual CHAP secret equals the one-way CHAP secret; RFC 7143 §12.1.3 forbids one secret in both directions")]
    SameSecretBothWays,

    #[error("bad initiator name from {from}")]
    BadInitiatorName {
        from: String,
        #[source]
        source: UrlError,
    },
}

fn where_looked(path: &Path, file_read: bool, known: &[String]) -> String {
    if file_read || !known.is_empty() {
        format!("in config file {}{}", path.display(), known_list(known))
    } else {
        format!(
            "(no config file was read: {} is missing or unreadable; --config PATH names another)",
            path.display()
        )
    }
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        " (it defines no targets)".to_string()
    } else {
        format!("; known: {}", known.join(", "))
    }
}

/// Which direction a CHAP pair authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChapRole {
    /// The initiator proves itself to the target.
    OneWay,
    /// The target proves itself to the initiator.
    Mutual,
}

impl fmt::Display for ChapRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChapRole::OneWay => "one-way",
            ChapRole::Mutual => "mutual",
        })
    }
}

/// One CHAP name and secret (RFC 7143 §12.1.3, RFC 1994).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChapCredentials {
    pub user: String,
    pub secret: Secret,
}

/// The credentials for one login.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// One-way CHAP: what the initiator answers the target's challenge with.
    pub chap: Option<ChapCredentials>,
    /// Mutual CHAP: the target's name and secret, which the initiator checks.
    pub mutual: Option<ChapCredentials>,
}

/// Credentials given explicitly on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliCreds {
    pub user: Option<String>,
    pub secret: Option<Secret>,
    pub mutual_user: Option<String>,
    pub mutual_secret: Option<Secret>,
}

/// The `[defaults]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    pub initiator_name: Option<String>,
    pub connect_timeout_secs: Option<u64>,
    pub login_timeout_secs: Option<u64>,
    pub header_digest: Option<DigestPref>,
    pub data_digest: Option<DigestPref>,
}

/// One `[targets.<name>]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetEntry {
    #[serde(deserialize_with = "de_url")]
    pub url: TargetUrl,
    pub chap_user: Option<String>,
    #[serde(default, deserialize_with = "de_opt_secret")]
    pub chap_secret: Option<Secret>,
    /// Absolute after [`Config::load`] (relative paths are taken from the
    /// config file's directory).
    pub chap_secret_file: Option<PathBuf>,
    pub mutual_user: Option<String>,
    #[serde(default, deserialize_with = "de_opt_secret")]
    pub mutual_secret: Option<Secret>,
    pub mutual_secret_file: Option<PathBuf>,
    pub header_digest: Option<DigestPref>,
    pub data_digest: Option<DigestPref>,
}

/// The whole config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default)]
    pub targets: BTreeMap<String, TargetEntry>,
    /// The file this came from; `None` when no file was read.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// Warnings found while loading (a readable file holding secrets).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// The credentials file (`--chap-file`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredFile {
    user: Option<String>,
    #[serde(default, deserialize_with = "de_opt_secret")]
    secret: Option<Secret>,
    mutual_user: Option<String>,
    #[serde(default, deserialize_with = "de_opt_secret")]
    mutual_secret: Option<Secret>,
}

fn de_opt_secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(Secret::new))
}

fn de_url<'de, D: Deserializer<'de>>(d: D) -> Result<TargetUrl, D::Error> {
    let s = String::deserialize(d)?;
    TargetUrl::parse(&s).map_err(serde::de::Error::custom)
}

impl Config {
    /// Loads the config file. With `None`, reads [`DEFAULT_CONFIG_PATH`] and
    /// treats a missing file as an empty config; a path given explicitly
    /// must exist.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            Some(p) => Config::load_from(p, true),
            None => Config::load_from(Path::new(DEFAULT_CONFIG_PATH), false),
        }
    }

    /// Reads `path`; a missing file is an empty config unless `explicit`.
    fn load_from(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !explicit => {
                return Ok(Config::default())
            }
            // The packaged /etc/rlun/rlun.toml is root's (mode 600, for the
            // systemd units): an ordinary user goes on without it.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && !explicit => {
                return Ok(Config {
                    warnings: vec![format!(
                        "config file {} is not readable by this user; going on without it \
                         (name targets in a file of your own with --config PATH)",
                        path.display()
                    )],
                    ..Config::default()
                });
            }
            Err(source) => {
                return Err(ConfigError::ReadConfig {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let config = Config::from_toml_str(&text, path)?;
        if config.has_inline_secrets() {
            check_private(path, "config file")?;
        }
        Ok(config)
    }

    /// Parses and checks config text; `path` is used in messages and to
    /// anchor relative secret-file paths. Reads no file.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::ParseConfig {
            path: path.to_path_buf(),
            detail: describe_toml_error(text, &e),
        })?;
        config.path = Some(path.to_path_buf());
        config.validate(path)?;
        Ok(config)
    }

    fn validate(&mut self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| ConfigError::InvalidConfig {
            path: path.to_path_buf(),
            key,
            reason,
        };
        if let Some(name) = &self.defaults.initiator_name {
            check_iscsi_name(name)
                .map_err(|e| invalid("defaults.initiator_name".into(), e.to_string()))?;
        }
        for (key, v) in [
            ("connect_timeout_secs", self.defaults.connect_timeout_secs),
            ("login_timeout_secs", self.defaults.login_timeout_secs),
        ] {
            if v == Some(0) {
                return Err(invalid(
                    format!("defaults.{key}"),
                    "must be at least 1".into(),
                ));
            }
        }
        let base = path.parent().unwrap_or(Path::new("/"));
        for (name, t) in &mut self.targets {
            if t.url.target.is_none() {
                return Err(invalid(
                    format!("targets.{name}.url"),
                    "must name a target: iscsi://host/<iqn>[/<lun>]".into(),
                ));
            }
            for (secret, file, file_key) in [
                (&t.chap_secret, &mut t.chap_secret_file, "chap_secret_file"),
                (
                    &t.mutual_secret,
                    &mut t.mutual_secret_file,
                    "mutual_secret_file",
                ),
            ] {
                if secret.is_some() && file.is_some() {
                    let inline = file_key.trim_end_matches("_file");
                    return Err(invalid(
                        format!("targets.{name}.{file_key}"),
                        format!("give {inline} or {file_key}, not both"),
                    ));
                }
                if let Some(f) = file {
                    if f.is_relative() {
                        *f = base.join(&*f);
                    }
                }
            }
        }
        Ok(())
    }

    fn has_inline_secrets(&self) -> bool {
        self.targets.values().any(|t| {
            t.chap_secret.is_some()
                || t.mutual_secret.is_some()
                || t.url.password.is_some()
                || t.url.mutual_password.is_some()
        })
    }

    /// The `[targets.<name>]` entry, if there is one.
    pub fn target(&self, name: &str) -> Option<&TargetEntry> {
        self.targets.get(name)
    }

    /// The `[targets.<name>]` entry, or an error listing the known names.
    pub fn require_target(&self, name: &str) -> Result<&TargetEntry, ConfigError> {
        self.target(name).ok_or_else(|| ConfigError::UnknownTarget {
            name: name.to_string(),
            path: self
                .path
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH)),
            file_read: self.path.is_some(),
            known: self.targets.keys().cloned().collect(),
        })
    }

    /// The connect timeout from `[defaults]`, or the built-in default.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(
            self.defaults
                .connect_timeout_secs
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT_SECS),
        )
    }

    /// The login timeout from `[defaults]`, or the built-in default.
    pub fn login_timeout(&self) -> Duration {
        Duration::from_secs(
            self.defaults
                .login_timeout_secs
                .unwrap_or(DEFAULT_LOGIN_TIMEOUT_SECS),
        )
    }

    /// Header digest: the URL's `?header_digest=`, else the target entry,
    /// else `[defaults]`, else none. (A command-line value, if the CLI has
    /// one, goes before all of these.)
    pub fn header_digest(
        &self,
        url: Option<&TargetUrl>,
        entry: Option<&TargetEntry>,
    ) -> DigestPref {
        url.and_then(|u| u.header_digest)
            .or(entry.and_then(|e| e.header_digest))
            .or(self.defaults.header_digest)
            .unwrap_or_default()
    }

    /// Data digest: the target entry, else `[defaults]`, else none.
    pub fn data_digest(&self, entry: Option<&TargetEntry>) -> DigestPref {
        entry
            .and_then(|e| e.data_digest)
            .or(self.defaults.data_digest)
            .unwrap_or_default()
    }
}

/// open-iscsi's initiator name file, used when nothing else names one.
pub const OPEN_ISCSI_NAME_FILE: &str = "/etc/iscsi/initiatorname.iscsi";

/// The initiator name: `cli`, else `RLUN_INITIATOR_NAME`, else
/// `[defaults] initiator_name`, else open-iscsi's
/// [`OPEN_ISCSI_NAME_FILE`], else [`default_initiator_name`]. Checked
/// against RFC 7143 §4.2.7.
pub fn resolve_initiator_name(
    cli: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    config: &Config,
) -> Result<String, ConfigError> {
    resolve_initiator_name_with(cli, env, config, Path::new(OPEN_ISCSI_NAME_FILE))
}

/// [`resolve_initiator_name`] with open-iscsi's file at `open_iscsi_file`.
pub fn resolve_initiator_name_with(
    cli: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    config: &Config,
    open_iscsi_file: &Path,
) -> Result<String, ConfigError> {
    let (name, from) = if let Some(n) = cli {
        (n.to_string(), "the command line".to_string())
    } else if let Some(n) = env("RLUN_INITIATOR_NAME").filter(|n| !n.is_empty()) {
        (n, "RLUN_INITIATOR_NAME".to_string())
    } else if let Some(n) = &config.defaults.initiator_name {
        (n.clone(), "[defaults] initiator_name".to_string())
    } else if let Some(n) = fs::read_to_string(open_iscsi_file)
        .ok()
        .and_then(|t| parse_open_iscsi_name(&t))
    {
        (n, open_iscsi_file.display().to_string())
    } else {
        return Ok(default_initiator_name());
    };
    check_iscsi_name(&name).map_err(|source| ConfigError::BadInitiatorName { from, source })?;
    Ok(name)
}

/// The `InitiatorName=` of an open-iscsi `initiatorname.iscsi` file
/// (comments start with `#`; the last assignment wins, as in iscsid).
pub fn parse_open_iscsi_name(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("InitiatorName="))
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty())
}

/// `iqn.2026-11.org.rlun:<hostname>`, with the host name read from
/// `/proc/sys/kernel/hostname` or `/etc/hostname` ("localhost" if neither).
pub fn default_initiator_name() -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty());
    initiator_name_for_host(host.as_deref().unwrap_or("localhost"))
}

/// `iqn.2026-11.org.rlun:<host>`, with the host name lower-cased and any
/// character an iSCSI name cannot hold replaced by `-`.
pub fn initiator_name_for_host(host: &str) -> String {
    let clean: String = host
        .trim()
        .chars()
        .take(MAX_HOST_IN_NAME)
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let clean = if clean.is_empty() {
        "localhost".to_string()
    } else {
        clean
    };
    format!("{DEFAULT_INITIATOR_PREFIX}:{clean}")
}

/// Room for the host name within the 223-byte limit (RFC 7143 §4.2.7.1).
const MAX_HOST_IN_NAME: usize = crate::url::MAX_ISCSI_NAME_LEN - DEFAULT_INITIATOR_PREFIX.len() - 1;

/// One source's values, with a name for messages.
struct Layer {
    from: String,
    user: Option<String>,
    secret: Option<Secret>,
    mutual_user: Option<String>,
    mutual_secret: Option<Secret>,
}

impl Credentials {
    /// Resolves the credentials for one login from every source, in the
    /// order the module documentation gives. Returns warnings alongside.
    pub fn resolve(
        cli: &CliCreds,
        url: &TargetUrl,
        env: impl Fn(&str) -> Option<String>,
        file: Option<&Path>,
        config_entry: Option<&TargetEntry>,
    ) -> Result<(Credentials, Vec<String>), ConfigError> {
        let mut warnings = Vec::new();
        let env = |k: &str| env(k).filter(|v| !v.is_empty());

        if cli.secret.is_some() || cli.mutual_secret.is_some() {
            warnings.push(
                "a CHAP secret on the command line is visible to every local user \
                 (ps, /proc/<pid>/cmdline); prefer RLUN_CHAP_SECRET, --chap-file or the config file"
                    .to_string(),
            );
        }
        let url_from_config = config_entry.is_some_and(|e| e.url == *url);
        if !url_from_config && (url.password.is_some() || url.mutual_password.is_some()) {
            warnings.push(
                "a CHAP secret in the URL is visible to every local user \
                 (ps, /proc/<pid>/cmdline); prefer RLUN_CHAP_SECRET, --chap-file or the config file"
                    .to_string(),
            );
        }

        let mut layers = vec![
            Layer {
                from: "the command line".into(),
                user: cli.user.clone(),
                secret: cli.secret.clone(),
                mutual_user: cli.mutual_user.clone(),
                mutual_secret: cli.mutual_secret.clone(),
            },
            Layer {
                from: "the URL".into(),
                user: url.user.clone(),
                secret: url.password.clone(),
                mutual_user: url.mutual_user.clone(),
                mutual_secret: url.mutual_password.clone(),
            },
            env_layer(&env),
        ];
        if let Some(path) = file {
            layers.push(file_layer(path)?);
        }
        if let Some(entry) = config_entry {
            layers.push(Layer {
                from: "the config file".into(),
                user: entry.chap_user.clone(),
                secret: entry.chap_secret.clone(),
                mutual_user: entry.mutual_user.clone(),
                mutual_secret: entry.mutual_secret.clone(),
            });
        }

        let pick = |get: &dyn Fn(&Layer) -> bool| layers.iter().find(|l| get(l));
        let user = pick(&|l| l.user.is_some());
        let mut secret = pick(&|l| l.secret.is_some()).map(|l| (l.secret.clone(), l.from.clone()));
        let mutual_user = pick(&|l| l.mutual_user.is_some());
        let mut mutual_secret =
            pick(&|l| l.mutual_secret.is_some()).map(|l| (l.mutual_secret.clone(), l.from.clone()));

        // Secret files in the config entry come last, and are read only when
        // nothing above gave the secret.
        if let Some(entry) = config_entry {
            if secret.is_none() {
                if let Some(f) = &entry.chap_secret_file {
                    let s = read_secret_file(f, "chap_secret_file")?;
                    secret = Some((Some(s), format!("secret file {}", f.display())));
                }
            }
            if mutual_secret.is_none() {
                if let Some(f) = &entry.mutual_secret_file {
                    let s = read_secret_file(f, "mutual_secret_file")?;
                    mutual_secret = Some((Some(s), format!("secret file {}", f.display())));
                }
            }
        }

        let chap = pair(
            ChapRole::OneWay,
            user.map(|l| (l.user.clone().unwrap_or_default(), l.from.clone())),
            secret.and_then(|(s, from)| s.map(|s| (s, from))),
        )?;
        let mutual = pair(
            ChapRole::Mutual,
            mutual_user.map(|l| (l.mutual_user.clone().unwrap_or_default(), l.from.clone())),
            mutual_secret.and_then(|(s, from)| s.map(|s| (s, from))),
        )?;

        if mutual.is_some() && chap.is_none() {
            return Err(ConfigError::MutualWithoutOneWay);
        }
        if let (Some(c), Some(m)) = (&chap, &mutual) {
            if c.secret.expose() == m.secret.expose() {
                return Err(ConfigError::SameSecretBothWays);
            }
        }
        for (role, c) in [(ChapRole::OneWay, &chap), (ChapRole::Mutual, &mutual)] {
            if let Some(c) = c {
                let n = c.secret.expose().len();
                if n < MIN_CHAP_SECRET_LEN {
                    warnings.push(format!(
                        "the {role} CHAP secret is only {n} bytes long; RFC 7143 §12.1.3 asks for \
                         at least {MIN_CHAP_SECRET_LEN} (96 bits) and some targets refuse shorter ones"
                    ));
                }
            }
        }
        Ok((Credentials { chap, mutual }, warnings))
    }
}

fn env_layer(env: &dyn Fn(&str) -> Option<String>) -> Layer {
    // Name the variable that was actually used, for messages.
    let first = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|n| env(n).map(|v| (v, (*n).to_string())))
    };
    let user = first(["RLUN_CHAP_USER", "LIBISCSI_CHAP_USERNAME"]);
    let secret = first(["RLUN_CHAP_SECRET", "LIBISCSI_CHAP_PASSWORD"]);
    let mutual_user = first(["RLUN_CHAP_MUTUAL_USER", "LIBISCSI_CHAP_TARGET_USERNAME"]);
    let mutual_secret = first(["RLUN_CHAP_MUTUAL_SECRET", "LIBISCSI_CHAP_TARGET_PASSWORD"]);
    let names: Vec<String> = [&user, &secret, &mutual_user, &mutual_secret]
        .iter()
        .filter_map(|v| v.as_ref().map(|(_, n)| n.clone()))
        .collect();
    Layer {
        from: if names.is_empty() {
            "the environment".into()
        } else {
            format!("the environment ({})", names.join(", "))
        },
        user: user.map(|(v, _)| v),
        secret: secret.map(|(v, _)| Secret::new(v)),
        mutual_user: mutual_user.map(|(v, _)| v),
        mutual_secret: mutual_secret.map(|(v, _)| Secret::new(v)),
    }
}

fn file_layer(path: &Path) -> Result<Layer, ConfigError> {
    let text = fs::read_to_string(path).map_err(|source| ConfigError::ReadCredentials {
        path: path.to_path_buf(),
        source,
    })?;
    check_private(path, "credentials file")?;
    let f: CredFile = toml::from_str(&text).map_err(|e| ConfigError::ParseCredentials {
        path: path.to_path_buf(),
        detail: describe_toml_error(&text, &e),
    })?;
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Ok(Layer {
        from: format!("credentials file {}", path.display()),
        user: nonempty(f.user),
        secret: f.secret.filter(|s| !s.is_empty()),
        mutual_user: nonempty(f.mutual_user),
        mutual_secret: f.mutual_secret.filter(|s| !s.is_empty()),
    })
}

fn pair(
    role: ChapRole,
    user: Option<(String, String)>,
    secret: Option<(Secret, String)>,
) -> Result<Option<ChapCredentials>, ConfigError> {
    match (user, secret) {
        (None, None) => Ok(None),
        (Some((user, _)), Some((secret, _))) => Ok(Some(ChapCredentials { user, secret })),
        (Some((user, from)), None) => Err(ConfigError::UserWithoutSecret {
            role,
            user,
            from,
            hint: match role {
                ChapRole::OneWay => {
                    "give it with RLUN_CHAP_SECRET, --chap-file or chap_secret in the config file"
                }
                ChapRole::Mutual => {
                    "give it with RLUN_CHAP_MUTUAL_SECRET, --chap-file or mutual_secret in the config file"
                }
            },
        }),
        (None, Some((_, from))) => Err(ConfigError::SecretWithoutUser {
            role,
            from,
            hint: match role {
                ChapRole::OneWay => "give one with --chap-user or RLUN_CHAP_USER",
                ChapRole::Mutual => "give one with --chap-mutual-user or RLUN_CHAP_MUTUAL_USER",
            },
        }),
    }
}

/// A secret file: its whole content, less one trailing newline.
fn read_secret_file(path: &Path, key: &str) -> Result<Secret, ConfigError> {
    let text = fs::read_to_string(path).map_err(|source| ConfigError::ReadSecretFile {
        path: path.to_path_buf(),
        key: key.to_string(),
        source,
    })?;
    check_private(path, "secret file")?;
    let s = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if s.is_empty() {
        return Err(ConfigError::EmptySecretFile {
            path: path.to_path_buf(),
            key: key.to_string(),
        });
    }
    Ok(Secret::new(s))
}

/// Refuses `path` when its group or others can read it: it holds secrets.
fn check_private(path: &Path, what: &'static str) -> Result<(), ConfigError> {
    let Ok(meta) = fs::metadata(path) else {
        return Ok(()); // the read that follows reports a missing file
    };
    let mode = meta.permissions().mode();
    if mode & 0o044 == 0 {
        return Ok(());
    }
    Err(ConfigError::SecretsReadable {
        what,
        path: path.to_path_buf(),
        by: match (mode & 0o040 != 0, mode & 0o004 != 0) {
            (true, true) => "its group and by others",
            (true, false) => "its group",
            _ => "others",
        },
        mode: mode & 0o7777,
    })
}

/// A TOML error as "line L, column C, key `a.b`: message", without the
/// source line the `toml` crate would quote (it could hold a secret).
fn describe_toml_error(text: &str, err: &toml::de::Error) -> String {
    let mut out = String::new();
    let key = err.span().map(|span| {
        let start = span.start.min(text.len());
        let before = &text[..floor_char_boundary(text, start)];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        out.push_str(&format!("line {line}, column {col}"));
        key_at(text, start)
    });
    let key = key.flatten();
    if let Some(k) = &key {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&format!("key `{k}`"));
    }
    if !out.is_empty() {
        out.push_str(": ");
    }
    let secretish = key
        .as_deref()
        .is_some_and(|k| k.contains("secret") || k.contains("password"));
    if secretish && err.message().contains('`') {
        // serde's "invalid type: integer `123`" would show the value.
        out.push_str("invalid value (not shown: the key holds a secret); expected a string");
    } else {
        // Some messages span lines ("invalid table header\nexpected ..."):
        // keep the error on one line.
        let msg: Vec<&str> = err
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        out.push_str(&msg.join("; "));
    }
    out
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Best-effort dotted key at byte `offset`: the nearest `[table]` header
/// above, plus the `key =` of the line itself.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = floor_char_boundary(text, offset);
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[line_start..line_end].trim();
    let header = |l: &str| -> Option<String> {
        let l = l.trim();
        let inner = l.strip_prefix("[[").or_else(|| l.strip_prefix('['))?;
        let inner = inner.split(']').next()?;
        Some(inner.trim().to_string())
    };
    if line.starts_with('[') {
        return header(line);
    }
    let table = text[..line_start].lines().rev().find_map(|l| {
        let t = l.trim();
        if t.starts_with('[') {
            header(t)
        } else {
            None
        }
    });
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string())
        .filter(|k| !k.is_empty() && !k.starts_with('#'));
    match (table, key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k),
        (Some(t), None) => Some(t),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::Write;

    const IQN: &str = "iqn.2026-11.org.example:store";

    fn url(s: &str) -> TargetUrl {
        TargetUrl::parse(s).unwrap()
    }

    fn plain_url() -> TargetUrl {
        url(&format!("iscsi://10.0.0.5/{IQN}/1"))
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn no_env() -> impl Fn(&str) -> Option<String> {
        |_| None
    }

    fn write_file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        let mut f = fs::File::create(&p).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn entry(text: &str) -> TargetEntry {
        let cfg = Config::from_toml_str(text, Path::new("/etc/rlun/rlun.toml")).unwrap();
        cfg.targets.into_values().next().unwrap()
    }

    fn chap(user: &str, secret: &str) -> Option<ChapCredentials> {
        Some(ChapCredentials {
            user: user.into(),
            secret: Secret::new(secret),
        })
    }

    // ---- precedence ----

    #[test]
    fn no_source_gives_no_credentials_and_no_warnings() {
        let (c, w) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), None, None).unwrap();
        assert_eq!(c, Credentials::default());
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn cli_beats_url_beats_env_beats_file_beats_config() {
        let dir = tempfile::tempdir().unwrap();
        let file = write_file(
            dir.path(),
            "creds.toml",
            "user = \"file-user\"\nsecret = \"file-secret-123\"\n",
            0o600,
        );
        let cfg_entry = entry(&format!(
            "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"cfg-user\"\nchap_secret = \"cfg-secret-1234\"\n"
        ));
        let env = env_of(&[
            ("RLUN_CHAP_USER", "env-user"),
            ("RLUN_CHAP_SECRET", "env-secret-1234"),
        ]);
        let cli = CliCreds {
            user: Some("cli-user".into()),
            secret: Some(Secret::new("cli-secret-1234")),
            ..CliCreds::default()
        };
        let u = url(&format!("iscsi://url-user%url-secret-123@h/{IQN}/1"));

        // Each step removes the winning source and checks the next one wins.
        let resolve = |cli: &CliCreds,
                       u: &TargetUrl,
                       env: &dyn Fn(&str) -> Option<String>,
                       f: Option<&Path>,
                       e: Option<&TargetEntry>| {
            Credentials::resolve(cli, u, env, f, e).unwrap().0.chap
        };
        assert_eq!(
            resolve(&cli, &u, &env, Some(&file), Some(&cfg_entry)),
            chap("cli-user", "cli-secret-1234")
        );
        let no_cli = CliCreds::default();
        assert_eq!(
            resolve(&no_cli, &u, &env, Some(&file), Some(&cfg_entry)),
            chap("url-user", "url-secret-123")
        );
        let bare = plain_url();
        assert_eq!(
            resolve(&no_cli, &bare, &env, Some(&file), Some(&cfg_entry)),
            chap("env-user", "env-secret-1234")
        );
        assert_eq!(
            resolve(&no_cli, &bare, &no_env(), Some(&file), Some(&cfg_entry)),
            chap("file-user", "file-secret-123")
        );
        assert_eq!(
            resolve(&no_cli, &bare, &no_env(), None, Some(&cfg_entry)),
            chap("cfg-user", "cfg-secret-1234")
        );
    }

    #[test]
    fn values_are_picked_one_by_one_across_sources() {
        let u = url(&format!("iscsi://alice@h/{IQN}/1"));
        let env = env_of(&[("RLUN_CHAP_SECRET", "from-the-environment")]);
        let (c, _) = Credentials::resolve(&CliCreds::default(), &u, env, None, None).unwrap();
        assert_eq!(c.chap, chap("alice", "from-the-environment"));
    }

    #[test]
    fn libiscsi_variables_are_fallbacks_for_rlun_ones() {
        let env = env_of(&[
            ("LIBISCSI_CHAP_USERNAME", "li-user"),
            ("LIBISCSI_CHAP_PASSWORD", "li-secret-1234"),
            ("RLUN_CHAP_SECRET", "rlun-secret-123"),
            ("LIBISCSI_CHAP_TARGET_USERNAME", "tgt"),
            ("LIBISCSI_CHAP_TARGET_PASSWORD", "tgt-secret-1234"),
        ]);
        let (c, w) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap();
        assert_eq!(c.chap, chap("li-user", "rlun-secret-123"));
        assert_eq!(c.mutual, chap("tgt", "tgt-secret-1234"));
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn empty_environment_values_count_as_unset() {
        let env = env_of(&[("RLUN_CHAP_USER", ""), ("LIBISCSI_CHAP_USERNAME", "")]);
        let (c, _) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap();
        assert_eq!(c.chap, None);
    }

    #[test]
    fn mutual_credentials_come_from_url_query() {
        let u = url(&format!(
            "iscsi://alice%one-way-secret@h/{IQN}/1?target_user=tgt&target_password=other-secret-1"
        ));
        let (c, _) = Credentials::resolve(&CliCreds::default(), &u, no_env(), None, None).unwrap();
        assert_eq!(c.chap, chap("alice", "one-way-secret"));
        assert_eq!(c.mutual, chap("tgt", "other-secret-1"));
    }

    #[test]
    fn config_secret_file_is_read_when_nothing_else_gives_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), "store.secret", "file-secret-1234\n", 0o600);
        let cfg = Config::from_toml_str(
            &format!(
                "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"store.secret\"\n"
            ),
            &dir.path().join("rlun.toml"),
        )
        .unwrap();
        let e = cfg.target("s").unwrap();
        assert_eq!(
            e.chap_secret_file.as_deref(),
            Some(&*dir.path().join("store.secret"))
        );

        let (c, w) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), None, Some(e))
                .unwrap();

        assert_eq!(c.chap, chap("u", "file-secret-1234"));
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn config_secret_file_is_not_read_when_a_higher_source_has_the_secret() {
        let e = entry(&format!(
            "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"/nonexistent/x\"\n"
        ));
        let env = env_of(&[("RLUN_CHAP_SECRET", "env-secret-1234")]);
        let (c, _) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, Some(&e)).unwrap();
        assert_eq!(c.chap, chap("u", "env-secret-1234"));
    }

    #[test]
    fn missing_secret_file_is_an_error_naming_the_file_and_key() {
        let e = entry(&format!(
            "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"/nonexistent/x\"\n"
        ));
        let err =
            Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), None, Some(&e))
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read secret file /nonexistent/x (named by chap_secret_file)"
        );
    }

    // ---- validation ----

    #[test]
    fn user_without_secret_is_an_error_naming_the_source() {
        let u = url(&format!("iscsi://alice@h/{IQN}/1"));
        let err = Credentials::resolve(&CliCreds::default(), &u, no_env(), None, None).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::UserWithoutSecret {
                role: ChapRole::OneWay,
                ..
            }
        ));
        assert!(
            err.to_string()
                .starts_with("one-way CHAP user 'alice' (from the URL) has no secret"),
            "{err}"
        );
    }

    #[test]
    fn secret_without_user_is_an_error() {
        let env = env_of(&[("LIBISCSI_CHAP_PASSWORD", "secret-secret")]);
        let err =
            Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("one-way CHAP secret (from the environment (LIBISCSI_CHAP_PASSWORD)) has no user name"),
            "{err}"
        );
    }

    #[test]
    fn mutual_without_one_way_is_an_error() {
        let env = env_of(&[
            ("RLUN_CHAP_MUTUAL_USER", "tgt"),
            ("RLUN_CHAP_MUTUAL_SECRET", "tgt-secret-1234"),
        ]);
        let err =
            Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap_err();
        assert!(matches!(err, ConfigError::MutualWithoutOneWay), "{err:?}");
    }

    #[test]
    fn same_secret_both_ways_is_an_error() {
        let env = env_of(&[
            ("RLUN_CHAP_USER", "me"),
            ("RLUN_CHAP_SECRET", "same-secret-123"),
            ("RLUN_CHAP_MUTUAL_USER", "tgt"),
            ("RLUN_CHAP_MUTUAL_SECRET", "same-secret-123"),
        ]);
        let err =
            Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap_err();
        assert!(matches!(err, ConfigError::SameSecretBothWays), "{err:?}");
        assert!(!err.to_string().contains("same-secret"));
    }

    #[test]
    fn short_secret_gives_a_warning_not_an_error() {
        let env = env_of(&[("RLUN_CHAP_USER", "me"), ("RLUN_CHAP_SECRET", "short")]);
        let (c, w) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap();
        assert_eq!(c.chap, chap("me", "short"));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("only 5 bytes") && w[0].contains("at least 12"),
            "{w:?}"
        );
        assert!(!w[0].contains("short\""));
    }

    #[test]
    fn secrets_in_arguments_or_url_give_a_warning() {
        let cli = CliCreds {
            user: Some("me".into()),
            secret: Some(Secret::new("long-enough-secret")),
            ..CliCreds::default()
        };
        let (_, w) = Credentials::resolve(&cli, &plain_url(), no_env(), None, None).unwrap();
        assert!(w.iter().any(|w| w.contains("command line")), "{w:?}");

        let u = url(&format!("iscsi://me%long-enough-secret@h/{IQN}/1"));
        let (_, w) = Credentials::resolve(&CliCreds::default(), &u, no_env(), None, None).unwrap();
        assert!(w.iter().any(|w| w.contains("in the URL")), "{w:?}");
    }

    #[test]
    fn url_taken_from_the_config_entry_gives_no_argv_warning() {
        let e = entry(&format!(
            "[targets.s]\nurl = \"iscsi://me%long-enough-secret@h/{IQN}/1\"\n"
        ));
        let (c, w) =
            Credentials::resolve(&CliCreds::default(), &e.url, no_env(), None, Some(&e)).unwrap();
        assert_eq!(c.chap, chap("me", "long-enough-secret"));
        assert!(w.is_empty(), "{w:?}");
    }

    // ---- credentials file ----

    #[test]
    fn group_readable_credentials_file_is_refused_with_the_chmod_fix() {
        let dir = tempfile::tempdir().unwrap();
        let f = write_file(
            dir.path(),
            "c.toml",
            "user = \"u\"\nsecret = \"long-enough-secret\"\n",
            0o640,
        );
        let err =
            Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None)
                .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ConfigError::SecretsReadable { .. }), "{msg}");
        assert!(
            msg.contains("readable by its group")
                && msg.contains("0640")
                && msg.contains(&format!("chmod 600 {}", f.display())),
            "{msg}"
        );
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        let (c, _) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None)
                .unwrap();
        assert_eq!(c.chap, chap("u", "long-enough-secret"));
    }

    #[test]
    fn owner_only_credentials_file_gives_no_warning() {
        let dir = tempfile::tempdir().unwrap();
        let f = write_file(
            dir.path(),
            "c.toml",
            "user = \"u\"\nsecret = \"long-enough-secret\"\n",
            0o600,
        );
        let (_, w) =
            Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None)
                .unwrap();
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn world_readable_secret_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), "s", "long-enough-secret", 0o644);
        let cfg = Config::from_toml_str(
            &format!("[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"s\"\n"),
            &dir.path().join("rlun.toml"),
        )
        .unwrap();
        let err = Credentials::resolve(
            &CliCreds::default(),
            &plain_url(),
            no_env(),
            None,
            cfg.target("s"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("its group and by others"), "{err}");
    }

    #[test]
    fn unknown_key_in_credentials_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = write_file(
            dir.path(),
            "c.toml",
            "user = \"u\"\npassword = \"long-enough-secret\"\n",
            0o600,
        );
        let err =
            Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None)
                .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ConfigError::ParseCredentials { .. }));
        assert!(
            msg.contains("c.toml") && msg.contains("line 2") && msg.contains("`password`"),
            "{msg}"
        );
        assert!(!msg.contains("long-enough-secret"), "{msg}");
    }

    #[test]
    fn missing_credentials_file_is_an_error() {
        let err = Credentials::resolve(
            &CliCreds::default(),
            &plain_url(),
            no_env(),
            Some(Path::new("/nonexistent/creds.toml")),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read credentials file /nonexistent/creds.toml"
        );
    }

    // ---- config file ----

    const FULL: &str = r#"
[defaults]
initiator_name = "iqn.2026-11.org.example:db1"
connect_timeout_secs = 5
login_timeout_secs = 20
header_digest = "prefer-crc32c"
data_digest = "crc32c"

[targets.store]
url = "iser://10.0.0.5:3261/iqn.2026-11.org.example:store/1"
chap_user = "db1"
chap_secret = "inline-secret-1"
mutual_user = "store"
mutual_secret_file = "/etc/rlun/store-mutual.secret"
header_digest = "none"

[targets.all]
url = "iscsi://10.0.0.6/iqn.2026-11.org.example:all"
"#;

    #[test]
    fn full_config_parses() {
        let cfg = Config::from_toml_str(FULL, Path::new("/etc/rlun/rlun.toml")).unwrap();
        assert_eq!(
            cfg.defaults.initiator_name.as_deref(),
            Some("iqn.2026-11.org.example:db1")
        );
        assert_eq!(cfg.connect_timeout(), Duration::from_secs(5));
        assert_eq!(cfg.login_timeout(), Duration::from_secs(20));
        let store = cfg.target("store").unwrap();
        assert_eq!(store.url.transport, crate::url::TransportKind::Iser);
        assert_eq!(store.url.lun, Some(1));
        assert_eq!(
            store.chap_secret.as_ref().map(Secret::expose),
            Some("inline-secret-1")
        );
        assert_eq!(cfg.header_digest(None, Some(store)), DigestPref::None);
        assert_eq!(cfg.data_digest(Some(store)), DigestPref::Crc32c);
        let all = cfg.target("all").unwrap();
        assert_eq!(all.url.lun, None);
        assert_eq!(cfg.header_digest(None, Some(all)), DigestPref::PreferCrc32c);
        assert!(!format!("{cfg:?}").contains("inline-secret"));
    }

    #[test]
    fn empty_config_uses_built_in_defaults() {
        let cfg = Config::from_toml_str("", Path::new("x.toml")).unwrap();
        assert_eq!(
            cfg.connect_timeout(),
            Duration::from_secs(DEFAULT_CONNECT_TIMEOUT_SECS)
        );
        assert_eq!(
            cfg.login_timeout(),
            Duration::from_secs(DEFAULT_LOGIN_TIMEOUT_SECS)
        );
        assert_eq!(cfg.header_digest(None, None), DigestPref::None);
        assert!(cfg.targets.is_empty());
    }

    #[test]
    fn url_header_digest_beats_the_config() {
        let cfg = Config::from_toml_str(FULL, Path::new("/etc/rlun/rlun.toml")).unwrap();
        let u = url(&format!("iscsi://h/{IQN}/1?header_digest=crc32c"));
        assert_eq!(
            cfg.header_digest(Some(&u), cfg.target("store")),
            DigestPref::Crc32c
        );
    }

    #[test]
    fn unknown_key_is_an_error_naming_file_line_and_key() {
        let text = "[defaults]\nconnect_timeout = 5\n";
        let err = Config::from_toml_str(text, Path::new("/etc/rlun/rlun.toml")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("config file /etc/rlun/rlun.toml: line 2, column 1, key `defaults.connect_timeout`: unknown field `connect_timeout`"), "{msg}");
    }

    #[test]
    fn unknown_key_in_target_table_is_named() {
        let text = format!("[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_pasword = \"x\"\n");
        let msg = Config::from_toml_str(&text, Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("key `targets.s.chap_pasword`") && msg.contains("unknown field"),
            "{msg}"
        );
    }

    #[test]
    fn bad_toml_syntax_is_an_error_with_a_position() {
        let err = Config::from_toml_str("[defaults\n", Path::new("r.toml")).unwrap_err();
        assert!(matches!(err, ConfigError::ParseConfig { .. }));
        let msg = err.to_string();
        assert!(msg.starts_with("config file r.toml: line 1"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg:?}");
    }

    #[test]
    fn wrong_type_for_a_secret_does_not_echo_the_value() {
        let text = format!("[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_secret = 123456789\n");
        let msg = Config::from_toml_str(&text, Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("targets.s.chap_secret"), "{msg}");
        assert!(!msg.contains("123456789"), "{msg}");
    }

    #[test]
    fn bad_digest_value_is_named() {
        let msg =
            Config::from_toml_str("[defaults]\nheader_digest = \"md5\"\n", Path::new("r.toml"))
                .unwrap_err()
                .to_string();
        assert!(
            msg.contains("defaults.header_digest") && msg.contains("md5"),
            "{msg}"
        );
    }

    #[test]
    fn bad_url_in_target_is_reported_with_its_key_and_no_password() {
        let text = "[targets.s]\nurl = \"http://me%topsecretpw@h/x/1\"\n";
        let msg = Config::from_toml_str(text, Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("targets.s.url") && msg.contains("unsupported URL scheme 'http'"),
            "{msg}"
        );
        assert!(!msg.contains("topsecretpw"), "{msg}");
    }

    #[test]
    fn target_url_must_name_a_target() {
        let err = Config::from_toml_str("[targets.s]\nurl = \"iscsi://h\"\n", Path::new("r.toml"))
            .unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidConfig { ref key, .. } if key == "targets.s.url"),
            "{err:?}"
        );
    }

    #[test]
    fn secret_and_secret_file_together_are_rejected() {
        let text = format!(
            "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nmutual_secret = \"a\"\nmutual_secret_file = \"b\"\n"
        );
        let err = Config::from_toml_str(&text, Path::new("r.toml")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config file r.toml: targets.s.mutual_secret_file: give mutual_secret or mutual_secret_file, not both"
        );
    }

    #[test]
    fn zero_timeout_and_bad_initiator_name_are_rejected() {
        let err =
            Config::from_toml_str("[defaults]\nlogin_timeout_secs = 0\n", Path::new("r.toml"))
                .unwrap_err();
        assert!(
            err.to_string()
                .contains("defaults.login_timeout_secs: must be at least 1"),
            "{err}"
        );
        let err = Config::from_toml_str(
            "[defaults]\ninitiator_name = \"bob\"\n",
            Path::new("r.toml"),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("defaults.initiator_name: bad iSCSI name 'bob'"),
            "{err}"
        );
    }

    #[test]
    fn missing_default_file_is_empty_but_missing_explicit_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        let cfg = Config::load_from(&missing, false).unwrap();
        assert_eq!(cfg, Config::default());

        let err = Config::load(Some(&missing)).unwrap_err();
        assert!(matches!(err, ConfigError::ReadConfig { .. }));
        assert!(err.to_string().contains("nope.toml"));
    }

    #[test]
    fn load_refuses_a_readable_config_with_inline_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "rlun.toml", FULL, 0o644);
        let err = Config::load(Some(&p)).unwrap_err();
        assert!(err.to_string().contains("config file"), "{err}");
        assert!(err.to_string().contains("chmod 600"), "{err}");

        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        let cfg = Config::load(Some(&p)).unwrap();
        assert_eq!(cfg.path.as_deref(), Some(&*p));
        assert!(cfg.warnings.is_empty());
    }

    #[test]
    fn require_target_lists_known_names() {
        let cfg = Config::from_toml_str(FULL, Path::new("/etc/rlun/rlun.toml")).unwrap();
        let err = cfg.require_target("stor").unwrap_err();
        assert_eq!(
            err.to_string(),
            "no target named 'stor' in config file /etc/rlun/rlun.toml; known: all, store"
        );
        assert!(cfg.require_target("store").is_ok());
    }

    #[test]
    fn unknown_target_without_a_config_file_says_no_file_was_read() {
        let cfg = Config::default();
        let err = cfg.require_target("store").unwrap_err();
        assert_eq!(
            err.to_string(),
            "no target named 'store' (no config file was read: /etc/rlun/rlun.toml is \
             missing or unreadable; --config PATH names another)"
        );
    }

    // ---- initiator name ----

    #[test]
    fn initiator_name_precedence_is_cli_env_config_default() {
        let cfg = Config::from_toml_str(FULL, Path::new("r.toml")).unwrap();
        let env = env_of(&[("RLUN_INITIATOR_NAME", "iqn.2026-11.org.example:env")]);
        assert_eq!(
            resolve_initiator_name(Some("iqn.2026-11.org.example:cli"), &env, &cfg).unwrap(),
            "iqn.2026-11.org.example:cli"
        );
        assert_eq!(
            resolve_initiator_name(None, &env, &cfg).unwrap(),
            "iqn.2026-11.org.example:env"
        );
        assert_eq!(
            resolve_initiator_name(None, no_env(), &cfg).unwrap(),
            "iqn.2026-11.org.example:db1"
        );
        let no_file = Path::new("/nonexistent/initiatorname.iscsi");
        let dflt =
            resolve_initiator_name_with(None, no_env(), &Config::default(), no_file).unwrap();
        assert!(dflt.starts_with("iqn.2026-11.org.rlun:"), "{dflt}");
        assert_eq!(check_iscsi_name(&dflt), Ok(()));
    }

    #[test]
    fn open_iscsi_name_file_is_used_after_the_config_and_before_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let f = write_file(
            dir.path(),
            "initiatorname.iscsi",
            "## DO NOT EDIT\n#InitiatorName=iqn.2026-11.org.example:old\nInitiatorName=iqn.1993-08.org.debian:01:abcdef\n",
            0o644,
        );
        let cfg = Config::from_toml_str(FULL, Path::new("r.toml")).unwrap();
        assert_eq!(
            resolve_initiator_name_with(None, no_env(), &cfg, &f).unwrap(),
            "iqn.2026-11.org.example:db1"
        );
        assert_eq!(
            resolve_initiator_name_with(None, no_env(), &Config::default(), &f).unwrap(),
            "iqn.1993-08.org.debian:01:abcdef"
        );
        let missing = dir.path().join("absent");
        let dflt =
            resolve_initiator_name_with(None, no_env(), &Config::default(), &missing).unwrap();
        assert!(dflt.starts_with("iqn.2026-11.org.rlun:"), "{dflt}");
    }

    #[test]
    fn bad_name_in_the_open_iscsi_file_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = write_file(dir.path(), "n", "InitiatorName=not a name\n", 0o644);
        let err = resolve_initiator_name_with(None, no_env(), &Config::default(), &f).unwrap_err();
        assert!(err.to_string().contains(&f.display().to_string()), "{err}");
    }

    #[test]
    fn bad_initiator_name_from_env_is_an_error_naming_the_variable() {
        let env = env_of(&[("RLUN_INITIATOR_NAME", "not a name")]);
        let err = resolve_initiator_name(None, env, &Config::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad initiator name from RLUN_INITIATOR_NAME"
        );
    }

    #[test]
    fn host_name_is_sanitised_into_a_valid_iqn() {
        assert_eq!(
            initiator_name_for_host("DB1_x.example"),
            "iqn.2026-11.org.rlun:db1-x.example"
        );
        assert_eq!(
            initiator_name_for_host(""),
            "iqn.2026-11.org.rlun:localhost"
        );
        let long = initiator_name_for_host(&"h".repeat(400));
        assert_eq!(long.len(), crate::url::MAX_ISCSI_NAME_LEN);
        assert_eq!(check_iscsi_name(&long), Ok(()));
    }

    #[test]
    fn digest_pref_parses_displays_and_offers() {
        for (s, d, offer) in [
            ("none", DigestPref::None, "None"),
            ("CRC32C", DigestPref::Crc32c, "CRC32C"),
            ("prefer-crc32c", DigestPref::PreferCrc32c, "CRC32C,None"),
        ] {
            let parsed: DigestPref = s.parse().unwrap();
            assert_eq!(parsed, d);
            assert_eq!(parsed.offer(), offer);
            assert_eq!(parsed.to_string().parse::<DigestPref>(), Ok(d));
        }
        assert!("md5".parse::<DigestPref>().is_err());
    }

    #[test]
    fn help_texts_mention_every_source_and_key() {
        for k in [
            "RLUN_CHAP_USER",
            "RLUN_CHAP_MUTUAL_SECRET",
            "LIBISCSI_CHAP_TARGET_PASSWORD",
            "--chap-file",
        ] {
            assert!(CREDENTIALS_HELP.contains(k), "{k}");
        }
        for k in [
            "initiator_name",
            "connect_timeout_secs",
            "login_timeout_secs",
            "header_digest",
            "data_digest",
            "chap_secret_file",
            "mutual_secret_file",
            "mutual_user",
        ] {
            assert!(CONFIG_FORMAT_HELP.contains(k), "{k}");
        }
    }
}
