//! `iscsi://` and `iser://` URLs, in the form libiscsi and QEMU use:
//!
//! ```text
//! iscsi://[user[%password]@]host[:port]/<target-iqn>/<lun>
//! iser://[user[%password]@]host[:port]/<target-iqn>/<lun>
//! ```
//!
//! Accepted shapes (see [`TargetUrl::parse`]):
//!
//! | input | meaning |
//! | --- | --- |
//! | `iscsi://host/iqn.2026-11.org.example:disk/1` | one LUN |
//! | `iscsi://host/iqn.2026-11.org.example:disk` (or with a trailing `/`) | every LUN of the target (`rlun ls`, `rlun mount`) |
//! | `iscsi://host`, `iscsi://host:3261/` | a portal only (`rlun discover`) |
//! | `host`, `host:3261`, `[fe80::1]:3260` | a portal, as if written with `iscsi://` |
//!
//! # User and password: what libiscsi does, and what we do
//!
//! libiscsi (`iscsi_parse_url` in `lib/init.c`) cuts the query at the first
//! `?`, then the user information at the first `@`, then splits that at the
//! first `%` (or, when there is no `%`, at the first `:`). It does **not**
//! percent-decode the user or the password: in `iscsi://u%pa%41ss@host/...`
//! the password is the seven characters `pa%41ss`. Only the target name is
//! percent-decoded.
//!
//! We do exactly the same, so a URL pasted from a QEMU command line or a
//! libiscsi tool means the same thing here. Consequences, all documented in
//! [`URL_HELP`]:
//!
//! - a literal `%` in a password needs no escaping (everything after the
//!   first `%` is the password); `%25` stays the three characters `%25`;
//! - a user name cannot contain `%` or `@`, and a password cannot contain
//!   `@` or `?`: give such credentials through the environment, a
//!   `--chap-file` or the config file (see `config::CREDENTIALS_HELP`),
//!   which is where secrets belong anyway (process arguments are readable by
//!   every local user).
//!
//! libiscsi's query keys are understood too: `target_user` and
//! `target_password` (the mutual-CHAP name and secret), `header_digest`
//! (`none`, `crc32c`, or our `prefer-crc32c`) and `iser` (use iSER). Any other
//! key is an error, so a typo does not silently do nothing.
//!
//! # Other decisions
//!
//! - The LUN is a decimal number `0..=2^64-1` (libiscsi and QEMU accept only
//!   decimal). No `0x` form: a hex string would invite confusion with the
//!   8-byte SAM LUN *structure*, which this number is not; the number is the
//!   LUN as `REPORT LUNS` lists it once the addressing method is decoded.
//! - The scheme is matched case-insensitively (RFC 3986 §3.1).
//! - IPv6 literals go in brackets (RFC 3986 §3.2.2); a zone is written
//!   `[fe80::1%25eth0]` (RFC 6874) or `[fe80::1%eth0]`.
//! - The target name is checked against RFC 7143 §4.2.7 (see
//!   [`check_iscsi_name`]).
//! - Error messages name the offending part but never echo the whole URL,
//!   because the URL may hold a password.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use rlun_iscsi::proto::digest::DigestPref;
use rlun_iscsi::secret::Secret;

/// The well-known iSCSI TCP port (RFC 7143 §13.2, IANA "iscsi-target").
pub const DEFAULT_PORT: u16 = 3260;

/// Longest iSCSI name in bytes (RFC 7143 §4.2.7.1).
pub const MAX_ISCSI_NAME_LEN: usize = 223;

/// The full URL syntax, for usage errors.
pub const URL_SYNTAX: &str = "iscsi://[user[%password]@]host[:port]/<target-iqn>/<lun>";

/// Help text about URLs, for `--help` and the man page.
pub const URL_HELP: &str = "\
URLS
    iscsi://[user[%password]@]host[:port]/<target>/<lun>
    iser://[user[%password]@]host[:port]/<target>/<lun>

    The form libiscsi and QEMU use. <port> defaults to 3260. IPv6 addresses
    go in brackets: iscsi://[fe80::1%25eth0]:3260/... <target> is an iSCSI
    name (iqn.yyyy-mm.reversed.domain[:id], eui.<16 hex>, naa.<16 or 32 hex>).
    <lun> is a decimal LUN number. Without <lun> the URL names every LUN of
    the target; without <target> it names only the portal, and for
    `rlun discover` a bare host[:port] is enough.

    As in libiscsi, the user name ends at the first '%' (or ':' when there is
    no '%'), the password is everything after it up to the '@', and neither
    is percent-decoded. A user name cannot contain '%' or '@'; a password
    cannot contain '@' or '?'. Query keys understood: target_user=,
    target_password= (mutual CHAP), header_digest=none|crc32c|prefer-crc32c,
    iser. Passwords in URLs are visible to other local users in the process
    list: prefer the environment or a credentials file.
";

/// Errors from parsing or using a URL. Messages name the offending part and
/// never contain a password.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    #[error("empty URL; expected {URL_SYNTAX}")]
    Empty,

    #[error("unsupported URL scheme '{scheme}'; expected iscsi:// or iser://")]
    UnsupportedScheme { scheme: String },

    #[error("URL scheme '{scheme}:' must be followed by '//'; expected {URL_SYNTAX}")]
    MissingSlashes { scheme: String },

    #[error("'{input}' is neither a URL nor a portal; expected {URL_SYNTAX} or host[:port]")]
    NotAPortal { input: String },

    #[error("URL has no host; expected {URL_SYNTAX}")]
    EmptyHost,

    #[error("bad host '{host}': {reason}")]
    BadHost { host: String, reason: &'static str },

    #[error("IPv6 address '{host}' must be written in brackets, e.g. [{host}]:3260")]
    Ipv6NeedsBrackets { host: String },

    #[error("bad IPv6 address '[{host}]'")]
    BadIpv6 { host: String },

    #[error("bad port '{port}': expected a number from 1 to 65535")]
    BadPort { port: String },

    #[error("URL has a password but no user name before it")]
    PasswordWithoutUser,

    #[error("{what} contains a control character")]
    ControlCharacter { what: &'static str },

    #[error("bad percent-escape in target name '{text}': '%' must be followed by two hex digits")]
    BadPercentEscape { text: String },

    #[error("bad iSCSI name '{name}': {reason}")]
    BadName { name: String, reason: String },

    #[error("URL has an empty target name before the LUN; expected {URL_SYNTAX}")]
    EmptyTarget,

    #[error(
        "bad LUN '{lun}': expected a decimal number from 0 to 18446744073709551615 \
         (or lunN, as `rlun mount` names the files)"
    )]
    BadLun { lun: String },

    #[error("unexpected '{extra}' after the LUN; expected {URL_SYNTAX}")]
    TrailingPath { extra: String },

    #[error(
        "unknown URL query key '{key}'; known: target_user, target_password, header_digest, iser"
    )]
    UnknownQueryKey { key: String },

    #[error("bad value for URL query key '{key}': {reason}")]
    BadQueryValue { key: String, reason: String },

    #[error("URL {url} names no target; expected iscsi://host/<iqn>/<lun>")]
    NoTarget { url: String },

    #[error("URL {url} names no LUN; expected iscsi://host/<iqn>/<lun>")]
    NoLun { url: String },
}

/// How the iSCSI PDUs travel: TCP (RFC 7143) or iSER over RDMA (RFC 7145).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportKind {
    #[default]
    Tcp,
    Iser,
}

impl TransportKind {
    /// The most one command may move over this transport, known before
    /// connecting (the transport's own `Transport::MAX_TRANSFER`): none for
    /// TCP, 512 KiB for iSER (see `transport::iser::MAX_DIRECT_TRANSFER`).
    pub fn max_transfer(self) -> Option<u64> {
        match self {
            TransportKind::Tcp => None,
            TransportKind::Iser => Some(512 * 1024),
        }
    }

    /// The URL scheme for this transport, without `://`.
    pub fn scheme(self) -> &'static str {
        match self {
            TransportKind::Tcp => "iscsi",
            TransportKind::Iser => "iser",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Iser => "iser",
        })
    }
}

/// A network portal: host name or address, and TCP port (RFC 7143 §4.2.8's
/// `TargetAddress` is the same idea). An IPv6 host is stored without
/// brackets, with its zone (if any) after a single `%`: `fe80::1%eth0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Portal {
    pub host: String,
    pub port: u16,
}

impl Portal {
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Portal {
            host: host.into(),
            port,
        }
    }

    /// Parses `host`, `host:port`, `[v6]` or `[v6]:port`; the port defaults
    /// to [`DEFAULT_PORT`].
    pub fn parse(s: &str) -> Result<Portal, UrlError> {
        parse_hostport(s)
    }

    /// True when the host is an IPv6 literal (it prints in brackets).
    pub fn is_ipv6(&self) -> bool {
        self.host.contains(':')
    }

    /// Host (without brackets, zone kept as `%zone`) and port, the form
    /// `tokio::net::lookup_host((host.as_str(), port))` and
    /// `std::net::ToSocketAddrs` take.
    pub fn host_port(&self) -> (String, u16) {
        (self.host.clone(), self.port)
    }
}

impl fmt::Display for Portal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ipv6() {
            match self.host.split_once('%') {
                // RFC 6874: the zone delimiter is written "%25" in a URI.
                Some((addr, zone)) => write!(f, "[{addr}%25{zone}]:{}", self.port),
                None => write!(f, "[{}]:{}", self.host, self.port),
            }
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for Portal {
    type Err = UrlError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Portal::parse(s)
    }
}

/// A parsed `iscsi://` or `iser://` URL.
///
/// `Debug` is safe to log: the passwords are [`Secret`]s. `Display` prints a
/// URL without any password (`iscsi://alice@host:3260/iqn.../1`), which
/// parses back to the same URL minus the secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    pub transport: TransportKind,
    pub portal: Portal,
    /// The target's iSCSI name; `None` for a portal-only URL.
    pub target: Option<String>,
    /// `None` means "all LUNs of the target" (or no target at all).
    pub lun: Option<u64>,
    /// CHAP user name from the URL's user information.
    pub user: Option<String>,
    /// CHAP secret from the URL's user information.
    pub password: Option<Secret>,
    /// Mutual CHAP: the name the target must present (`?target_user=`).
    pub mutual_user: Option<String>,
    /// Mutual CHAP: the target's secret (`?target_password=`).
    pub mutual_password: Option<Secret>,
    /// `?header_digest=` from the URL.
    pub header_digest: Option<DigestPref>,
}

impl TargetUrl {
    /// A URL for a portal alone, without credentials.
    pub fn portal_only(transport: TransportKind, portal: Portal) -> Self {
        TargetUrl {
            transport,
            portal,
            target: None,
            lun: None,
            user: None,
            password: None,
            mutual_user: None,
            mutual_password: None,
            header_digest: None,
        }
    }

    /// Parses any of the accepted shapes (module docs). A string without
    /// `://` is taken as a bare `host[:port]` portal for `iscsi://`.
    pub fn parse(input: &str) -> Result<TargetUrl, UrlError> {
        if input.is_empty() {
            return Err(UrlError::Empty);
        }
        let Some((scheme, rest)) = input.split_once("://") else {
            return parse_bare(input);
        };
        let transport = match scheme.to_ascii_lowercase().as_str() {
            "iscsi" => TransportKind::Tcp,
            "iser" => TransportKind::Iser,
            _ => {
                return Err(UrlError::UnsupportedScheme {
                    scheme: printable(scheme),
                })
            }
        };

        // Same order of cuts as libiscsi: query, then user information.
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (userinfo, hostpath) = match rest.split_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let (user, password) = match userinfo {
            Some(u) => parse_userinfo(u)?,
            None => (None, None),
        };

        let (authority, path) = match hostpath.split_once('/') {
            Some((a, p)) => (a, p),
            None => (hostpath, ""),
        };
        let portal = parse_hostport(authority)?;
        let (target, lun) = parse_path(path)?;

        let mut url = TargetUrl {
            transport,
            portal,
            target,
            lun,
            user,
            password,
            mutual_user: None,
            mutual_password: None,
            header_digest: None,
        };
        if let Some(q) = query {
            url.apply_query(q)?;
        }
        Ok(url)
    }

    /// The target name, or an error for a portal-only URL.
    pub fn require_target(&self) -> Result<&str, UrlError> {
        self.target.as_deref().ok_or_else(|| UrlError::NoTarget {
            url: self.to_string(),
        })
    }

    /// The LUN, or an error when the URL names none (or no target).
    pub fn require_lun(&self) -> Result<u64, UrlError> {
        self.require_target()?;
        self.lun.ok_or_else(|| UrlError::NoLun {
            url: self.to_string(),
        })
    }

    /// The same URL naming LUN `lun` (for listing the LUNs of a target).
    pub fn with_lun(&self, lun: u64) -> TargetUrl {
        TargetUrl {
            lun: Some(lun),
            ..self.clone()
        }
    }

    fn apply_query(&mut self, query: &str) -> Result<(), UrlError> {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = match pair.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (pair, None),
            };
            let need_value = |what: &str| -> Result<&str, UrlError> {
                match value {
                    Some(v) if !v.is_empty() => Ok(v),
                    _ => Err(UrlError::BadQueryValue {
                        key: key.to_string(),
                        reason: format!("expected {what}"),
                    }),
                }
            };
            match key {
                "target_user" => {
                    let v = need_value("a user name")?;
                    reject_controls(v, "URL target_user")?;
                    self.mutual_user = Some(v.to_string());
                }
                "target_password" => {
                    let v = need_value("a password")?;
                    reject_controls(v, "URL target_password")?;
                    self.mutual_password = Some(Secret::new(v));
                }
                "header_digest" => {
                    let v = need_value("none, crc32c or prefer-crc32c")?;
                    let d = v
                        .parse::<DigestPref>()
                        .map_err(|e| UrlError::BadQueryValue {
                            key: key.to_string(),
                            reason: e.to_string(),
                        })?;
                    self.header_digest = Some(d);
                }
                // libiscsi accepts `iser` with or without a value.
                "iser" => self.transport = TransportKind::Iser,
                _ => {
                    return Err(UrlError::UnknownQueryKey {
                        key: printable(key),
                    })
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.transport.scheme())?;
        if let Some(user) = &self.user {
            // The password is left out on purpose; see the type's docs. A
            // user name with ':' gets an empty "%" password so that it
            // parses back whole (the split is at '%' first).
            if user.contains(':') {
                write!(f, "{user}%@")?;
            } else {
                write!(f, "{user}@")?;
            }
        }
        write!(f, "{}", self.portal)?;
        if let Some(target) = &self.target {
            write!(f, "/{target}")?;
            if let Some(lun) = self.lun {
                write!(f, "/{lun}")?;
            }
        }
        let mut sep = '?';
        if let Some(mu) = &self.mutual_user {
            write!(f, "{sep}target_user={mu}")?;
            sep = '&';
        }
        if let Some(d) = self.header_digest {
            write!(f, "{sep}header_digest={d}")?;
        }
        Ok(())
    }
}

impl FromStr for TargetUrl {
    type Err = UrlError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TargetUrl::parse(s)
    }
}

/// A bare `host[:port]` (no scheme): an `iscsi://` portal.
fn parse_bare(input: &str) -> Result<TargetUrl, UrlError> {
    // "iscsi:host" is a mistyped URL rather than host "iscsi" with port "host".
    if let Some((scheme, _)) = input.split_once(':') {
        let s = scheme.to_ascii_lowercase();
        if s == "iscsi" || s == "iser" {
            return Err(UrlError::MissingSlashes {
                scheme: scheme.to_string(),
            });
        }
    }
    if input.contains(['/', '@', '?']) {
        return Err(UrlError::NotAPortal {
            input: printable(&redact_userinfo(input)),
        });
    }
    let portal = parse_hostport(input)?;
    Ok(TargetUrl::portal_only(TransportKind::Tcp, portal))
}

/// Splits user information the way libiscsi does: at the first `%`, or at
/// the first `:` when there is no `%`. No percent-decoding.
fn parse_userinfo(userinfo: &str) -> Result<(Option<String>, Option<Secret>), UrlError> {
    let (user, password) = match userinfo.split_once('%') {
        Some((u, p)) => (u, Some(p)),
        None => match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (userinfo, None),
        },
    };
    let password = password.filter(|p| !p.is_empty());
    if user.is_empty() {
        return match password {
            Some(_) => Err(UrlError::PasswordWithoutUser),
            None => Ok((None, None)),
        };
    }
    reject_controls(user, "URL user name")?;
    if let Some(p) = password {
        reject_controls(p, "URL password")?;
    }
    Ok((Some(user.to_string()), password.map(Secret::new)))
}

/// Parses `host[:port]` or `[v6[%zone]][:port]`.
fn parse_hostport(s: &str) -> Result<Portal, UrlError> {
    if s.is_empty() {
        return Err(UrlError::EmptyHost);
    }
    let (host, port) = if let Some(inner) = s.strip_prefix('[') {
        let Some((literal, after)) = inner.split_once(']') else {
            return Err(UrlError::BadHost {
                host: printable(s),
                reason: "'[' without a closing ']'",
            });
        };
        let host = parse_ipv6_literal(literal)?;
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => {
                    return Err(UrlError::BadHost {
                        host: printable(s),
                        reason: "expected ':' and a port after ']'",
                    })
                }
            },
        };
        (host, port)
    } else {
        let (host, port) = match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        if let Some(p) = port {
            if p.contains(':') {
                return Err(UrlError::Ipv6NeedsBrackets { host: printable(s) });
            }
        }
        (parse_reg_name(host)?, port)
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => parse_port(p)?,
    };
    Ok(Portal { host, port })
}

fn parse_port(p: &str) -> Result<u16, UrlError> {
    let bad = || UrlError::BadPort { port: printable(p) };
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad()),
        Ok(n) => Ok(n),
    }
}

/// The inside of `[...]`: an IPv6 address, optionally with a zone
/// (`%25zone` per RFC 6874, or the common `%zone`).
fn parse_ipv6_literal(literal: &str) -> Result<String, UrlError> {
    let (addr, zone) = match literal.split_once('%') {
        Some((a, z)) => (
            a,
            Some(z.strip_prefix("25").filter(|z| !z.is_empty()).unwrap_or(z)),
        ),
        None => (literal, None),
    };
    if addr.parse::<Ipv6Addr>().is_err() {
        return Err(UrlError::BadIpv6 {
            host: printable(literal),
        });
    }
    match zone {
        None => Ok(addr.to_string()),
        Some(z)
            if !z.is_empty()
                && z.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
        {
            Ok(format!("{addr}%{z}"))
        }
        Some(_) => Err(UrlError::BadIpv6 {
            host: printable(literal),
        }),
    }
}

/// A DNS name or IPv4 address (RFC 3986 reg-name, restricted to what a
/// resolver takes: letters, digits, '-', '.', '_').
fn parse_reg_name(host: &str) -> Result<String, UrlError> {
    let bad = |reason| UrlError::BadHost {
        host: printable(host),
        reason,
    };
    if host.is_empty() {
        return Err(UrlError::EmptyHost);
    }
    if host.len() > 253 {
        return Err(bad("longer than 253 characters"));
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        return Err(bad(
            "only letters, digits, '-', '.' and '_' are allowed (IPv6 goes in brackets)",
        ));
    }
    if host.starts_with('.') || host.contains("..") {
        return Err(bad("empty label"));
    }
    // Something that looks like a dotted quad must be a valid one.
    if host.split('.').count() == 4
        && host.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && host.parse::<Ipv4Addr>().is_err()
    {
        return Err(bad("not a valid IPv4 address"));
    }
    Ok(host.to_string())
}

/// The path after the authority: `""`, `<target>`, `<target>/` or
/// `<target>/<lun>`.
fn parse_path(path: &str) -> Result<(Option<String>, Option<u64>), UrlError> {
    if path.is_empty() {
        return Ok((None, None));
    }
    let (target, lun) = match path.split_once('/') {
        Some((t, l)) => (t, Some(l)),
        None => (path, None),
    };
    if target.is_empty() {
        return Err(UrlError::EmptyTarget);
    }
    let target = percent_decode(target)?;
    check_iscsi_name(&target)?;
    let lun = match lun {
        None | Some("") => None,
        Some(l) => {
            let (l, extra) = match l.split_once('/') {
                Some((l, e)) => (l, Some(e)),
                None => (l, None),
            };
            if let Some(e) = extra {
                return Err(UrlError::TrailingPath {
                    extra: printable(&format!("/{e}")),
                });
            }
            Some(parse_lun(l)?)
        }
    };
    Ok((Some(target), lun))
}

fn parse_lun(l: &str) -> Result<u64, UrlError> {
    let bad = || UrlError::BadLun { lun: printable(l) };
    // `lun1`, the name `rlun mount` gives the LUN's file, reads as LUN 1.
    let digits = l
        .strip_prefix("lun")
        .or_else(|| l.strip_prefix("LUN"))
        .unwrap_or(l);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits.parse::<u64>().map_err(|_| bad())
}

/// Strict percent-decoding (RFC 3986 §2.1) of the target segment.
fn percent_decode(s: &str) -> Result<String, UrlError> {
    if !s.contains('%') {
        return Ok(s.to_string());
    }
    let bad = || UrlError::BadPercentEscape { text: printable(s) };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hi = (hex[0] as char).to_digit(16).ok_or_else(bad)?;
            let lo = (hex[1] as char).to_digit(16).ok_or_else(bad)?;
            // hi and lo are below 16, so this fits in a byte.
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::BadName {
        name: printable(s),
        reason: "percent-escapes do not decode to UTF-8".to_string(),
    })
}

/// Checks the syntax of an iSCSI name (RFC 7143 §4.2.7):
///
/// - at most 223 bytes (§4.2.7.1);
/// - `iqn.yyyy-mm.reversed.domain[:unique]` (§4.2.7.3): a four-digit year, a
///   month `01`–`12`, a reversed domain of non-empty labels of letters,
///   digits and `-`, and after `:` a non-empty unique part;
/// - `eui.` and exactly 16 hex digits (§4.2.7.4);
/// - `naa.` and 16 or 32 hex digits (§4.2.7.5, from RFC 3980).
///
/// Characters: RFC 3722's profile leaves letters, digits, `-`, `.` and `:`.
/// We also accept upper case (targets compare names case-insensitively after
/// normalising, and some report upper-case names), `_` (tgtd and others
/// accept it in practice) and non-ASCII letters and digits (RFC 3722 allows
/// them). Spaces, control characters and other punctuation are rejected.
pub fn check_iscsi_name(name: &str) -> Result<(), UrlError> {
    let bad = |reason: &str| UrlError::BadName {
        name: printable(name),
        reason: reason.to_string(),
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_ISCSI_NAME_LEN {
        return Err(bad("longer than 223 bytes (RFC 7143 §4.2.7.1)"));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !(c.is_alphanumeric() || matches!(c, '-' | '.' | ':' | '_')))
    {
        return Err(bad(&format!(
            "character {c:?} is not allowed (letters, digits, '-', '.', ':', '_')"
        )));
    }
    let lower = name.to_ascii_lowercase();
    let is_hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(hex) = lower.strip_prefix("eui.") {
        if hex.len() == 16 && is_hex(hex) {
            return Ok(());
        }
        return Err(bad(
            "an eui. name is 'eui.' and 16 hex digits (RFC 7143 §4.2.7.4)",
        ));
    }
    if let Some(hex) = lower.strip_prefix("naa.") {
        if (hex.len() == 16 || hex.len() == 32) && is_hex(hex) {
            return Ok(());
        }
        return Err(bad(
            "a naa. name is 'naa.' and 16 or 32 hex digits (RFC 7143 §4.2.7.5)",
        ));
    }
    let Some(rest) = lower.strip_prefix("iqn.") else {
        return Err(bad(
            "expected iqn.yyyy-mm.reversed.domain[:id], eui.<16 hex> or naa.<16|32 hex> (RFC 7143 §4.2.7)",
        ));
    };
    check_iqn_body(rest).map_err(|r| bad(&format!("{r} (RFC 7143 §4.2.7.3)")))
}

/// The part of an `iqn.` name after the prefix.
fn check_iqn_body(rest: &str) -> Result<(), &'static str> {
    let b = rest.as_bytes();
    let date_ok = b.len() >= 7
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && matches!(rest[5..7].parse::<u8>(), Ok(1..=12));
    if !date_ok {
        return Err("an iqn. name needs a yyyy-mm date after 'iqn.'");
    }
    let Some(after_date) = rest[7..].strip_prefix('.') else {
        return Err("an iqn. name needs '.' and a reversed domain name after the date");
    };
    let (domain, unique) = match after_date.split_once(':') {
        Some((d, u)) => (d, Some(u)),
        None => (after_date, None),
    };
    if domain.is_empty()
        || domain
            .split('.')
            .any(|l| l.is_empty() || !l.chars().all(|c| c.is_alphanumeric() || c == '-'))
    {
        return Err(
            "the naming authority must be a reversed domain name (labels of letters, digits, '-')",
        );
    }
    if unique == Some("") {
        return Err("nothing after ':'");
    }
    Ok(())
}

fn reject_controls(s: &str, what: &'static str) -> Result<(), UrlError> {
    if s.chars().any(char::is_control) {
        Err(UrlError::ControlCharacter { what })
    } else {
        Ok(())
    }
}

/// A piece of user input made safe to show in a message: control
/// characters escaped, and cut to a sane length.
fn printable(s: &str) -> String {
    const MAX: usize = 256;
    let mut out = String::new();
    for c in s.chars().take(MAX) {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if s.chars().count() > MAX {
        out.push('…');
    }
    out
}

/// Drops anything up to an '@' so an error never shows a password.
fn redact_userinfo(s: &str) -> String {
    match s.split_once('@') {
        Some((_, rest)) => format!("…@{rest}"),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const IQN: &str = "iqn.2026-11.org.example:disk1";

    fn parse(s: &str) -> TargetUrl {
        TargetUrl::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn err(s: &str) -> UrlError {
        match TargetUrl::parse(s) {
            Ok(u) => panic!("{s:?} should fail, parsed as {u:?}"),
            Err(e) => e,
        }
    }

    // ---- accepted shapes ----

    #[test]
    fn full_url_yields_portal_target_and_lun() {
        let u = parse(&format!("iscsi://10.0.0.5/{IQN}/1"));
        assert_eq!(u.transport, TransportKind::Tcp);
        assert_eq!(u.portal, Portal::new("10.0.0.5", 3260));
        assert_eq!(u.target.as_deref(), Some(IQN));
        assert_eq!(u.lun, Some(1));
        assert_eq!(u.user, None);
        assert_eq!(u.password, None);
    }

    #[test]
    fn iser_scheme_selects_iser_transport() {
        let u = parse(&format!("iser://10.99.0.1:3261/{IQN}/0"));
        assert_eq!(u.transport, TransportKind::Iser);
        assert_eq!(u.portal.port, 3261);
        assert_eq!(u.lun, Some(0));
    }

    #[test]
    fn scheme_is_case_insensitive() {
        assert_eq!(
            parse(&format!("ISCSI://h/{IQN}/1")).transport,
            TransportKind::Tcp
        );
        assert_eq!(
            parse(&format!("IsEr://h/{IQN}/1")).transport,
            TransportKind::Iser
        );
    }

    #[test]
    fn url_without_lun_means_all_luns() {
        for s in [format!("iscsi://h/{IQN}"), format!("iscsi://h/{IQN}/")] {
            let u = parse(&s);
            assert_eq!(u.target.as_deref(), Some(IQN), "{s}");
            assert_eq!(u.lun, None, "{s}");
        }
    }

    #[test]
    fn portal_only_url_has_no_target() {
        for s in [
            "iscsi://h",
            "iscsi://h/",
            "iscsi://h:3261",
            "iscsi://h:3261/",
        ] {
            let u = parse(s);
            assert_eq!(u.portal.host, "h", "{s}");
            assert_eq!(u.target, None, "{s}");
            assert_eq!(u.lun, None, "{s}");
        }
        assert_eq!(parse("iscsi://h:3261/").portal.port, 3261);
    }

    #[test]
    fn bare_host_and_port_is_an_iscsi_portal() {
        let u = parse("storage.example.com:3261");
        assert_eq!(u.transport, TransportKind::Tcp);
        assert_eq!(u.portal, Portal::new("storage.example.com", 3261));
        assert_eq!(u.target, None);
        assert_eq!(parse("10.0.0.5").portal, Portal::new("10.0.0.5", 3260));
        assert_eq!(parse("[::1]:3262").portal, Portal::new("::1", 3262));
        assert_eq!(parse("[::1]").portal, Portal::new("::1", 3260));
    }

    #[test]
    fn bare_form_with_path_or_user_is_rejected_without_echoing_the_password() {
        let e = err("alice%hunter2hunter2@host");
        assert!(matches!(e, UrlError::NotAPortal { .. }), "{e:?}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(matches!(
            err(&format!("host/{IQN}/1")),
            UrlError::NotAPortal { .. }
        ));
    }

    #[test]
    fn scheme_without_slashes_is_reported_as_such() {
        assert_eq!(
            err("iscsi:host"),
            UrlError::MissingSlashes {
                scheme: "iscsi".into()
            }
        );
    }

    // ---- portals ----

    #[test]
    fn ipv6_literal_in_brackets_parses_and_displays_with_brackets() {
        let u = parse(&format!("iscsi://[2001:db8::5]:3261/{IQN}/2"));
        assert_eq!(u.portal.host, "2001:db8::5");
        assert_eq!(u.portal.port, 3261);
        assert_eq!(u.portal.to_string(), "[2001:db8::5]:3261");
        assert_eq!(
            u.portal.host_port(),
            ("2001:db8::5".to_string(), 3261),
            "host_port has no brackets, as lookup_host wants"
        );
    }

    #[test]
    fn ipv6_zone_accepts_rfc6874_and_plain_forms() {
        let a = Portal::parse("[fe80::1%25eth0]:3260").unwrap();
        let b = Portal::parse("[fe80::1%eth0]").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.host, "fe80::1%eth0");
        assert_eq!(a.to_string(), "[fe80::1%25eth0]:3260");
        assert_eq!(Portal::parse(&a.to_string()).unwrap(), a);
    }

    #[test]
    fn unbracketed_ipv6_is_rejected_with_a_hint() {
        let e = err("iscsi://fe80::1:3260/");
        assert!(matches!(e, UrlError::Ipv6NeedsBrackets { .. }), "{e:?}");
        assert!(e.to_string().contains("brackets"));
        assert!(matches!(
            err("::1"),
            UrlError::Ipv6NeedsBrackets { .. } | UrlError::EmptyHost
        ));
    }

    #[test]
    fn bad_ipv6_literals_are_rejected() {
        for s in [
            "iscsi://[::g]/",
            "iscsi://[1.2.3.4]/",
            "iscsi://[::1",
            "iscsi://[::1]x",
            "iscsi://[::1%]/",
            "iscsi://[::1%e/th]/",
            "iscsi://[]/",
        ] {
            let e = err(s);
            assert!(
                matches!(e, UrlError::BadIpv6 { .. } | UrlError::BadHost { .. }),
                "{s}: {e:?}"
            );
        }
    }

    #[test]
    fn port_must_be_1_to_65535() {
        assert_eq!(parse("iscsi://h:1/").portal.port, 1);
        assert_eq!(parse("iscsi://h:65535/").portal.port, 65535);
        for p in [
            "0",
            "65536",
            "99999999999999999999",
            "-1",
            "+5",
            "",
            "32a",
            " 1",
        ] {
            let e = err(&format!("iscsi://h:{p}/"));
            assert_eq!(e, UrlError::BadPort { port: p.into() }, "port {p:?}");
        }
    }

    #[test]
    fn empty_host_is_rejected() {
        for s in ["iscsi://", "iscsi:///", "iscsi://:3260/", "iscsi://alice@/"] {
            assert_eq!(err(s), UrlError::EmptyHost, "{s}");
        }
    }

    #[test]
    fn host_with_bad_characters_is_rejected_and_named() {
        let e = err("iscsi://ho st/");
        assert_eq!(
            e.to_string(),
            "bad host 'ho st': only letters, digits, '-', '.' and '_' are allowed (IPv6 goes in brackets)"
        );
        assert!(matches!(err("iscsi://a..b/"), UrlError::BadHost { .. }));
        assert!(matches!(
            err("iscsi://300.1.1.1/"),
            UrlError::BadHost { .. }
        ));
    }

    // ---- user information ----

    #[test]
    fn userinfo_splits_at_first_percent_like_libiscsi() {
        let u = parse(&format!("iscsi://alice%pa%41ss:w@h/{IQN}/1"));
        assert_eq!(u.user.as_deref(), Some("alice"));
        // No percent-decoding: libiscsi passes "pa%41ss:w" through as is.
        assert_eq!(u.password.as_ref().map(Secret::expose), Some("pa%41ss:w"));
    }

    #[test]
    fn userinfo_splits_at_colon_when_there_is_no_percent() {
        let u = parse(&format!("iscsi://alice:secret/with/slash@h/{IQN}/1"));
        assert_eq!(u.user.as_deref(), Some("alice"));
        assert_eq!(
            u.password.as_ref().map(Secret::expose),
            Some("secret/with/slash")
        );
        assert_eq!(u.target.as_deref(), Some(IQN));
    }

    #[test]
    fn user_without_password_leaves_password_unset() {
        for s in ["iscsi://alice@h/", "iscsi://alice%@h/", "iscsi://alice:@h/"] {
            let u = parse(s);
            assert_eq!(u.user.as_deref(), Some("alice"), "{s}");
            assert_eq!(u.password, None, "{s}");
        }
    }

    #[test]
    fn empty_userinfo_is_ignored() {
        let u = parse("iscsi://@h/");
        assert_eq!(u.user, None);
        assert_eq!(u.portal.host, "h");
    }

    #[test]
    fn password_without_user_is_rejected() {
        assert_eq!(err("iscsi://%secret@h/"), UrlError::PasswordWithoutUser);
        assert_eq!(err("iscsi://:secret@h/"), UrlError::PasswordWithoutUser);
    }

    #[test]
    fn control_characters_in_credentials_are_rejected_without_echo() {
        let e = err("iscsi://alice%sec\u{7}ret@h/");
        assert_eq!(
            e,
            UrlError::ControlCharacter {
                what: "URL password"
            }
        );
        assert!(!e.to_string().contains("sec"));
    }

    // ---- target names ----

    #[test]
    fn target_is_percent_decoded_like_libiscsi() {
        let u = parse("iscsi://h/iqn.2026-11.org.example%3Adisk1/3");
        assert_eq!(u.target.as_deref(), Some(IQN));
    }

    #[test]
    fn bad_percent_escape_in_target_is_rejected() {
        for t in [
            "iqn.2026-11.org.x%3",
            "iqn.2026-11.org.x%zz",
            "iqn.2026-11.org.x%",
        ] {
            let e = err(&format!("iscsi://h/{t}/1"));
            assert!(matches!(e, UrlError::BadPercentEscape { .. }), "{t}: {e:?}");
        }
        let e = err("iscsi://h/iqn.2026-11.org.x%ff/1");
        assert!(matches!(e, UrlError::BadName { .. }), "{e:?}");
    }

    #[test]
    fn valid_iscsi_names_pass() {
        for n in [
            "iqn.2026-11.org.example:disk1",
            "iqn.2001-04.com.example",
            "iqn.2001-04.com.example:storage:diskarrays-sn-a8675309",
            "iqn.2003-01.org.linux-iscsi.host.x8664:sn.abcdef",
            "IQN.2001-04.COM.Example:Disk_1",
            "eui.02004567A425678D",
            "naa.52004567BA64678D",
            "naa.62004567BA64678D0123456789ABCDEF",
        ] {
            assert_eq!(check_iscsi_name(n), Ok(()), "{n}");
        }
    }

    #[test]
    fn invalid_iscsi_names_fail_with_a_reason() {
        for (n, why) in [
            ("1", "expected iqn."),
            ("iqn.", "yyyy-mm"),
            ("iqn.26-11.org.x", "yyyy-mm"),
            ("iqn.2026-13.org.x", "yyyy-mm"),
            ("iqn.2026-00.org.x", "yyyy-mm"),
            ("iqn.2026-11", "reversed domain"),
            ("iqn.2026-11.", "reversed domain"),
            ("iqn.2026-11:disk", "reversed domain"),
            ("iqn.2026-11.org..x:d", "reversed domain"),
            ("iqn.2026-11.org.x:", "nothing after"),
            ("iqn.2026-11.org.x:a b", "character ' '"),
            ("iqn.2026-11.org.x:a/b", "character '/'"),
            ("eui.0200", "16 hex"),
            ("eui.02004567A425678G", "16 hex"),
            ("naa.52004567BA64678D00", "16 or 32 hex"),
        ] {
            match check_iscsi_name(n) {
                Err(e @ UrlError::BadName { .. }) => {
                    assert!(e.to_string().contains(why), "{n}: {e}")
                }
                other => panic!("{n}: expected BadName, got {other:?}"),
            }
        }
    }

    #[test]
    fn name_longer_than_223_bytes_is_rejected() {
        let ok = format!("iqn.2026-11.org.x:{}", "a".repeat(223 - 18));
        assert_eq!(ok.len(), 223);
        assert_eq!(check_iscsi_name(&ok), Ok(()));
        let long = format!("{ok}a");
        assert!(check_iscsi_name(&long)
            .unwrap_err()
            .to_string()
            .contains("223"));
    }

    #[test]
    fn swapped_target_and_lun_is_caught_by_name_check() {
        let e = err(&format!("iscsi://h/1/{IQN}"));
        assert!(
            matches!(e, UrlError::BadName { ref name, .. } if name == "1"),
            "{e:?}"
        );
    }

    // ---- LUNs ----

    #[test]
    fn lun_accepts_full_u64_range_in_decimal() {
        assert_eq!(parse(&format!("iscsi://h/{IQN}/0")).lun, Some(0));
        assert_eq!(parse(&format!("iscsi://h/{IQN}/007")).lun, Some(7));
        assert_eq!(
            parse(&format!("iscsi://h/{IQN}/18446744073709551615")).lun,
            Some(u64::MAX)
        );
    }

    #[test]
    fn bad_luns_are_rejected_and_named() {
        for l in ["18446744073709551616", "-1", "+1", "0x10", "1a", " 1", "١"] {
            let e = err(&format!("iscsi://h/{IQN}/{l}"));
            assert_eq!(e, UrlError::BadLun { lun: l.into() }, "{l}");
        }
        for l in ["lun", "lunx", "lun-1", "Lun1"] {
            assert!(
                matches!(
                    err(&format!("iscsi://h/{IQN}/{l}")),
                    UrlError::BadLun { .. }
                ),
                "{l}"
            );
        }
    }

    #[test]
    fn a_lun_named_like_its_mounted_file_is_accepted() {
        assert_eq!(parse(&format!("iscsi://h/{IQN}/lun1")).lun, Some(1));
        assert_eq!(parse(&format!("iscsi://h/{IQN}/LUN12")).lun, Some(12));
    }

    #[test]
    fn path_after_lun_is_rejected() {
        assert_eq!(
            err(&format!("iscsi://h/{IQN}/1/")),
            UrlError::TrailingPath { extra: "/".into() }
        );
        assert_eq!(
            err(&format!("iscsi://h/{IQN}/1/2")),
            UrlError::TrailingPath { extra: "/2".into() }
        );
    }

    #[test]
    fn empty_target_before_lun_is_rejected() {
        assert_eq!(err("iscsi://h//1"), UrlError::EmptyTarget);
    }

    // ---- schemes and query ----

    #[test]
    fn unsupported_scheme_is_named() {
        let e = err(&format!("http://h/{IQN}/1"));
        assert_eq!(
            e.to_string(),
            "unsupported URL scheme 'http'; expected iscsi:// or iser://"
        );
        assert_eq!(err(""), UrlError::Empty);
    }

    #[test]
    fn libiscsi_query_keys_are_understood() {
        let u = parse(&format!(
            "iscsi://alice%s1@h/{IQN}/1?target_user=tgt&target_password=s2&header_digest=crc32c&iser"
        ));
        assert_eq!(u.transport, TransportKind::Iser);
        assert_eq!(u.mutual_user.as_deref(), Some("tgt"));
        assert_eq!(u.mutual_password.as_ref().map(Secret::expose), Some("s2"));
        assert_eq!(u.header_digest, Some(DigestPref::Crc32c));
        assert_eq!(u.lun, Some(1));
    }

    #[test]
    fn unknown_query_key_is_rejected_and_named() {
        assert_eq!(
            err(&format!("iscsi://h/{IQN}/1?header_digets=none")),
            UrlError::UnknownQueryKey {
                key: "header_digets".into()
            }
        );
    }

    #[test]
    fn bad_query_values_are_rejected() {
        let e = err(&format!("iscsi://h/{IQN}/1?header_digest=md5"));
        assert!(matches!(e, UrlError::BadQueryValue { ref key, .. } if key == "header_digest"));
        let e = err(&format!("iscsi://h/{IQN}/1?target_user="));
        assert!(matches!(e, UrlError::BadQueryValue { ref key, .. } if key == "target_user"));
    }

    // ---- display and helpers ----

    #[test]
    fn display_never_shows_passwords() {
        let u = parse(&format!(
            "iscsi://alice%hunter2hunter2@h/{IQN}/4?target_user=t&target_password=s3cr3tsecret"
        ));
        let shown = u.to_string();
        assert_eq!(shown, format!("iscsi://alice@h:3260/{IQN}/4?target_user=t"));
        let debug = format!("{u:?}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("s3cr3t"),
            "{debug}"
        );
    }

    #[test]
    fn display_parses_back_to_the_same_url_minus_secrets() {
        let mut u = parse(&format!(
            "iser://bob%pw@[fe80::1%25eth0]:3262/{IQN}/9?header_digest=prefer-crc32c"
        ));
        let back = parse(&u.to_string());
        u.password = None;
        assert_eq!(back, u);
    }

    #[test]
    fn require_target_and_lun_explain_what_is_missing() {
        let portal = parse("iscsi://h");
        assert_eq!(
            portal.require_target().unwrap_err().to_string(),
            "URL iscsi://h:3260 names no target; expected iscsi://host/<iqn>/<lun>"
        );
        assert!(matches!(
            portal.require_lun(),
            Err(UrlError::NoTarget { .. })
        ));
        let all = parse(&format!("iscsi://h/{IQN}"));
        assert_eq!(all.require_target(), Ok(IQN));
        assert_eq!(
            all.require_lun().unwrap_err().to_string(),
            format!("URL iscsi://h:3260/{IQN} names no LUN; expected iscsi://host/<iqn>/<lun>")
        );
        assert_eq!(all.with_lun(5).require_lun(), Ok(5));
    }

    #[test]
    fn error_text_escapes_control_characters() {
        let e = err("iscsi://h\n/");
        assert!(e.to_string().contains("h\\n"), "{e}");
    }

    proptest! {
        #[test]
        fn parsing_random_strings_never_panics(s in any::<String>()) {
            let _ = TargetUrl::parse(&s);
            let _ = Portal::parse(&s);
            let _ = check_iscsi_name(&s);
        }

        #[test]
        fn parsing_url_shaped_strings_never_panics(
            scheme in prop::sample::select(vec!["iscsi://", "iser://", "ISCSI://", ""]),
            body in "[a-z0-9:/@%\\[\\]?&=.\\-_ \u{e9}]{0,40}",
        ) {
            let _ = TargetUrl::parse(&format!("{scheme}{body}"));
        }

        #[test]
        fn valid_urls_round_trip_through_display(
            iser in any::<bool>(),
            host in prop_oneof![
                "[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9-]{0,10}){0,3}",
                any::<std::net::Ipv4Addr>().prop_map(|a| a.to_string()),
                any::<std::net::Ipv6Addr>().prop_map(|a| a.to_string()),
            ],
            port in 1u16..,
            user in proptest::option::of("[a-zA-Z0-9._:-]{1,12}"),
            target in proptest::option::of("iqn\\.[0-9]{4}-(0[1-9]|1[0-2])\\.[a-z]{1,8}\\.[a-z]{1,8}(:[a-zA-Z0-9.:_-]{1,20})?"),
            lun in proptest::option::of(any::<u64>()),
        ) {
            let lun = if target.is_some() { lun } else { None };
            let u = TargetUrl {
                transport: if iser { TransportKind::Iser } else { TransportKind::Tcp },
                portal: Portal::new(host, port),
                target,
                lun,
                user,
                password: None,
                mutual_user: None,
                mutual_password: None,
                header_digest: None,
            };
            prop_assert_eq!(TargetUrl::parse(&u.to_string()), Ok(u));
        }
    }
}
