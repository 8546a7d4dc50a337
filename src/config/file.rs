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
use super::settings::{settings_table, Settings};
use crate::url::{check_iscsi_name, TargetUrl};
use rlun_iscsi::secret::Secret;

/// Where the config file lives unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/rlun/rlun.toml";

settings_table! {
    /// The `[defaults]` table: the settings every target starts from.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Defaults {
        pub initiator_name: Option<String>,
        /// Worker threads of the async runtime (`--threads`): only here,
        /// as the runtime is one per process, started before any target
        /// is looked up.
        #[serde(default, deserialize_with = "super::settings::de::threads")]
        pub threads: Option<usize>,
        /// Deprecated spelling of `connect_timeout` (whole seconds); read
        /// into it by [`Config::from_toml_str`], with a warning.
        pub connect_timeout_secs: Option<u64>,
        /// Deprecated spelling of `login_timeout`, as above.
        pub login_timeout_secs: Option<u64>,
    }
}

settings_table! {
    /// One `[targets.<name>]` table: where the target is, its credentials,
    /// and settings that go before `[defaults]`.
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
        /// `--metrics-listen` when the target is served by this name.
        pub metrics_listen: Option<std::net::SocketAddr>,
        /// `--metrics-allow-remote`, as above.
        #[serde(default)]
        pub metrics_allow_remote: bool,
        /// More portals of the target, as paths (`--portal`).
        #[serde(default)]
        pub portals: Vec<String>,
    }
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
    /// Warnings found while loading (a file this user cannot read,
    /// deprecated keys).
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
        config.validate(text, path)?;
        Ok(config)
    }

    fn validate(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let invalid =
            |key: String, line: Option<usize>, reason: String| ConfigError::InvalidConfig {
                path: path.to_path_buf(),
                line,
                key,
                reason,
            };
        if let Some(name) = &self.defaults.initiator_name {
            check_iscsi_name(name).map_err(|e| {
                invalid(
                    "defaults.initiator_name".into(),
                    line_of(text, "defaults", "initiator_name"),
                    e.to_string(),
                )
            })?;
        }
        // The old integer keys still work, with a warning; 0 is refused as
        // it is for connect_timeout and login_timeout.
        let d = &mut self.defaults;
        for (old, new, secs, value) in [
            (
                "connect_timeout_secs",
                "connect_timeout",
                d.connect_timeout_secs,
                &mut d.connect_timeout,
            ),
            (
                "login_timeout_secs",
                "login_timeout",
                d.login_timeout_secs,
                &mut d.login_timeout,
            ),
        ] {
            let Some(secs) = secs else { continue };
            let key = format!("defaults.{old}");
            let line = line_of(text, "defaults", old);
            if value.is_some() {
                return Err(invalid(key, line, format!("give {new} or {old}, not both")));
            }
            if secs == 0 {
                return Err(invalid(key, line, "must be more than 0".into()));
            }
            *value = Some(Duration::from_secs(secs));
            self.warnings.push(format!(
                "config file {}: {}key `{key}` is deprecated: write {new} = \"{secs}s\" instead",
                path.display(),
                line.map(|l| format!("line {l}, ")).unwrap_or_default(),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("/"));
        for (name, t) in &mut self.targets {
            if t.url.target.is_none() {
                return Err(invalid(
                    format!("targets.{name}.url"),
                    line_of(text, &format!("targets.{name}"), "url"),
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
                        line_of(text, &format!("targets.{name}"), file_key),
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

    /// The settings the file gives for a target: its entry's, else
    /// `[defaults]`'s (the command line's go before both; see
    /// [`Settings::or`]).
    pub fn settings_for(&self, entry: Option<&TargetEntry>) -> Settings {
        let defaults = self.defaults.settings();
        match entry {
            Some(e) => e.settings().or(&defaults),
            None => defaults,
        }
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

/// The line of `key = …` in table `[table]` of `text`, for messages (best
/// effort: the first such line after the header, or `None`).
fn line_of(text: &str, table: &str, key: &str) -> Option<usize> {
    let mut in_table = false;
    for (n, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.starts_with('[') {
            let inner = l.trim_start_matches('[').split(']').next().unwrap_or("");
            let inner: String = inner
                .split('.')
                .map(|p| p.trim().trim_matches('"'))
                .collect::<Vec<_>>()
                .join(".");
            in_table = inner == table;
            continue;
        }
        if in_table {
            if let Some((k, _)) = l.split_once('=') {
                if k.trim().trim_matches('"') == key {
                    return Some(n + 1);
                }
            }
        }
    }
    None
}
