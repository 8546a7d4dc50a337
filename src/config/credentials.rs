//! CHAP credentials from every source, in the order the module
//! documentation of [`crate::config`] gives.

use std::fs;
use std::path::Path;

use serde::Deserialize;

use super::error::{ChapRole, ConfigError};
use super::file::{check_private, de_opt_secret, describe_toml_error, TargetEntry};
use crate::url::TargetUrl;
use rlun_iscsi::secret::Secret;

/// RFC 7143 §12.1.3: CHAP secrets of at least 96 bits when not protected by
/// IPsec.
pub const MIN_CHAP_SECRET_LEN: usize = 12;

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
