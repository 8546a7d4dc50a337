//! The config file: its tables, loading and checking it, and TOML errors
//! told by line and key.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::error::ConfigError;
use crate::url::{check_iscsi_name, TargetUrl};
use rlun_iscsi::proto::digest::DigestPref;
use rlun_iscsi::secret::Secret;

/// Where the config file lives unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/rlun/rlun.toml";

/// Default TCP connect timeout when the config file sets none.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 10;

/// Default login timeout when the config file sets none.
pub const DEFAULT_LOGIN_TIMEOUT_SECS: u64 = 15;

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

pub(super) fn de_opt_secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
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
    pub(super) fn load_from(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
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

/// Refuses `path` when its group or others can read it: it holds secrets.
pub(super) fn check_private(path: &Path, what: &'static str) -> Result<(), ConfigError> {
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
pub(super) fn describe_toml_error(text: &str, err: &toml::de::Error) -> String {
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
