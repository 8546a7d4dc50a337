//! The settings the command line and the config file share: one model,
//! one syntax, one set of rules, and the built-in defaults in one place.
//!
//! Each setting is taken from the first of these that gives it: the
//! command line, the target's `[targets.<name>]` entry, `[defaults]`, and
//! finally [`BUILT_IN`] ([`Settings::or`], [`Settings::resolve`]).
//! Values are written the same way everywhere: durations as `10s`,
//! `500ms`, `2m` ([`parse_duration`]), sizes as `4k`, `256M`
//! ([`parse_size`]); in the file as TOML strings (`connect_timeout =
//! "10s"`), where a bare integer means what a bare number means on the
//! command line (seconds, bytes). The command line's value parsers and the
//! file's deserializers ([`de`]) call the same functions, so a value is
//! refused (0 where it makes no sense, an out-of-range size) alike in both.

use std::time::Duration;

use serde::Deserialize;

use rlun_iscsi::proto::digest::DigestPref;

/// rlun's page cache mode (`--cache`, `cache = "…"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheChoice {
    /// Through LunDevice, but every I/O goes to the target.
    None,
    /// Reads cached; writes complete when the target has them.
    WriteThrough,
    /// Writes complete in memory and are written back later.
    WriteBack,
}

/// A switch (`on`/`off`; in the file also `true`/`false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}

/// How commands are spread over the paths of a LUN reached through
/// several portals (`--multipath-policy`, `multipath_policy = "…"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MultipathPolicy {
    /// One path at a time; another only when it fails.
    Failover,
    /// Every usable path of the best ALUA state in turn.
    RoundRobin,
    /// The usable path of the best ALUA state with the fewest commands in flight.
    QueueLength,
}

impl MultipathPolicy {
    pub fn name(self) -> &'static str {
        match self {
            MultipathPolicy::Failover => "failover",
            MultipathPolicy::RoundRobin => "round-robin",
            MultipathPolicy::QueueLength => "queue-length",
        }
    }
}

/// Where the paths of a target come from (`--multipath`, `multipath =
/// "…"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MultipathMode {
    /// The URL's portal and those given with --portal (or `portals`).
    Off,
    /// Also every portal SendTargets discovery reports for the target.
    Auto,
}

/// Whether the failover policy goes back to the preferred path when it
/// returns (`--failback`, `failback = "…"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Failback {
    /// As soon as the preferred path is usable again.
    Immediate,
    /// Only when the path in use fails.
    Manual,
}

/// How a write caught on a failed path is kept from landing after its
/// retry on another (`--path-fence`, `path_fence = "…"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathFence {
    /// LOGICAL UNIT RESET through a working path, then send it again
    /// there at once.
    LunReset,
    /// Wait out the path timeout, then send it again (dm-multipath's way).
    PathTimeout,
}

impl PathFence {
    pub fn name(self) -> &'static str {
        match self {
            PathFence::LunReset => "lun-reset",
            PathFence::PathTimeout => "path-timeout",
        }
    }
}

/// Every setting that the command line, a `[targets.<name>]` entry and
/// `[defaults]` can each give; `None` where that source leaves it unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub connect_timeout: Option<Duration>,
    pub login_timeout: Option<Duration>,
    pub replacement_timeout: Option<Duration>,
    pub nop_interval: Option<Duration>,
    pub nop_timeout: Option<Duration>,
    pub command_timeout: Option<Duration>,
    pub max_recv_segment: Option<u32>,
    pub header_digest: Option<DigestPref>,
    pub data_digest: Option<DigestPref>,
    pub cache: Option<CacheChoice>,
    pub cache_size: Option<u64>,
    pub readahead: Option<OnOff>,
    pub writeback_delay: Option<Duration>,
    pub stats_interval: Option<Duration>,
    pub multipath: Option<MultipathMode>,
    pub multipath_policy: Option<MultipathPolicy>,
    pub failback: Option<Failback>,
    pub path_check_interval: Option<Duration>,
    pub path_timeout: Option<Duration>,
    pub path_fence: Option<PathFence>,
}

/// The settings in effect: every one given by some source or built in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub connect_timeout: Duration,
    pub login_timeout: Duration,
    /// 0: no reconnecting.
    pub replacement_timeout: Duration,
    /// 0: no pings.
    pub nop_interval: Duration,
    pub nop_timeout: Duration,
    pub command_timeout: Duration,
    pub max_recv_segment: u32,
    /// `None`: the core's offer, None,CRC32C (None unless the target
    /// insists on CRC32C).
    pub header_digest: Option<DigestPref>,
    /// As `header_digest`.
    pub data_digest: Option<DigestPref>,
    /// `None`: the command's own default (see `--cache`).
    pub cache: Option<CacheChoice>,
    pub cache_size: u64,
    pub readahead: OnOff,
    pub writeback_delay: Duration,
    /// `None`: no periodic counters.
    pub stats_interval: Option<Duration>,
    pub multipath: MultipathMode,
    pub multipath_policy: MultipathPolicy,
    pub failback: Failback,
    pub path_check_interval: Duration,
    /// How long a lost path keeps its commands before they move to
    /// another path.
    pub path_timeout: Duration,
    pub path_fence: PathFence,
}

/// The built-in defaults, the one place they are written. The help texts
/// repeat them as "[default: …]" (a test holds them to these values).
pub const BUILT_IN: Effective = Effective {
    connect_timeout: Duration::from_secs(10),
    login_timeout: Duration::from_secs(15),
    replacement_timeout: Duration::from_secs(120),
    nop_interval: Duration::from_secs(5),
    nop_timeout: Duration::from_secs(10),
    command_timeout: Duration::from_secs(30),
    max_recv_segment: 256 << 10,
    header_digest: None,
    data_digest: None,
    cache: None,
    cache_size: 256 << 20,
    readahead: OnOff::On,
    writeback_delay: Duration::from_secs(1),
    stats_interval: None,
    multipath: MultipathMode::Off,
    multipath_policy: MultipathPolicy::Failover,
    failback: Failback::Immediate,
    path_check_interval: Duration::from_secs(5),
    path_timeout: Duration::from_secs(5),
    path_fence: PathFence::PathTimeout,
};

/// Worker threads of the async runtime when neither `--threads` nor
/// `[defaults] threads` says.
pub const DEFAULT_THREADS: usize = 1;

impl Settings {
    /// `self`, with every setting it leaves unset taken from `lower`.
    pub fn or(self, lower: &Settings) -> Settings {
        Settings {
            connect_timeout: self.connect_timeout.or(lower.connect_timeout),
            login_timeout: self.login_timeout.or(lower.login_timeout),
            replacement_timeout: self.replacement_timeout.or(lower.replacement_timeout),
            nop_interval: self.nop_interval.or(lower.nop_interval),
            nop_timeout: self.nop_timeout.or(lower.nop_timeout),
            command_timeout: self.command_timeout.or(lower.command_timeout),
            max_recv_segment: self.max_recv_segment.or(lower.max_recv_segment),
            header_digest: self.header_digest.or(lower.header_digest),
            data_digest: self.data_digest.or(lower.data_digest),
            cache: self.cache.or(lower.cache),
            cache_size: self.cache_size.or(lower.cache_size),
            readahead: self.readahead.or(lower.readahead),
            writeback_delay: self.writeback_delay.or(lower.writeback_delay),
            stats_interval: self.stats_interval.or(lower.stats_interval),
            multipath: self.multipath.or(lower.multipath),
            multipath_policy: self.multipath_policy.or(lower.multipath_policy),
            failback: self.failback.or(lower.failback),
            path_check_interval: self.path_check_interval.or(lower.path_check_interval),
            path_timeout: self.path_timeout.or(lower.path_timeout),
            path_fence: self.path_fence.or(lower.path_fence),
        }
    }

    /// The settings in effect: these, and [`BUILT_IN`] for the rest.
    pub fn resolve(&self) -> Effective {
        let b = BUILT_IN;
        Effective {
            connect_timeout: self.connect_timeout.unwrap_or(b.connect_timeout),
            login_timeout: self.login_timeout.unwrap_or(b.login_timeout),
            replacement_timeout: self.replacement_timeout.unwrap_or(b.replacement_timeout),
            nop_interval: self.nop_interval.unwrap_or(b.nop_interval),
            nop_timeout: self.nop_timeout.unwrap_or(b.nop_timeout),
            command_timeout: self.command_timeout.unwrap_or(b.command_timeout),
            max_recv_segment: self.max_recv_segment.unwrap_or(b.max_recv_segment),
            header_digest: self.header_digest.or(b.header_digest),
            data_digest: self.data_digest.or(b.data_digest),
            cache: self.cache.or(b.cache),
            cache_size: self.cache_size.unwrap_or(b.cache_size),
            readahead: self.readahead.unwrap_or(b.readahead),
            writeback_delay: self.writeback_delay.unwrap_or(b.writeback_delay),
            stats_interval: self.stats_interval.or(b.stats_interval),
            multipath: self.multipath.unwrap_or(b.multipath),
            multipath_policy: self.multipath_policy.unwrap_or(b.multipath_policy),
            failback: self.failback.unwrap_or(b.failback),
            path_check_interval: self.path_check_interval.unwrap_or(b.path_check_interval),
            path_timeout: self.path_timeout.unwrap_or(b.path_timeout),
            path_fence: self.path_fence.unwrap_or(b.path_fence),
        }
    }
}

/// Defines a config-file table: the fields given, then every setting of
/// [`Settings`] under its file key, each read with the parser the command
/// line uses; and `settings()`, which gathers the latter.
macro_rules! settings_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$fmeta:meta])* pub $field:ident : $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
            #[serde(default, deserialize_with = "crate::config::settings::de::timeout")]
            pub connect_timeout: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::timeout")]
            pub login_timeout: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::duration")]
            pub replacement_timeout: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::duration")]
            pub nop_interval: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::timeout")]
            pub nop_timeout: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::timeout")]
            pub command_timeout: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::segment_size")]
            pub max_recv_segment: Option<u32>,
            pub header_digest: Option<rlun_iscsi::proto::digest::DigestPref>,
            pub data_digest: Option<rlun_iscsi::proto::digest::DigestPref>,
            pub cache: Option<crate::config::settings::CacheChoice>,
            #[serde(default, deserialize_with = "crate::config::settings::de::cache_size")]
            pub cache_size: Option<u64>,
            #[serde(default, deserialize_with = "crate::config::settings::de::on_off")]
            pub readahead: Option<crate::config::settings::OnOff>,
            #[serde(default, deserialize_with = "crate::config::settings::de::duration")]
            pub writeback_delay: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::timeout")]
            pub stats_interval: Option<std::time::Duration>,
            pub multipath: Option<crate::config::settings::MultipathMode>,
            pub multipath_policy: Option<crate::config::settings::MultipathPolicy>,
            pub failback: Option<crate::config::settings::Failback>,
            #[serde(default, deserialize_with = "crate::config::settings::de::timeout")]
            pub path_check_interval: Option<std::time::Duration>,
            #[serde(default, deserialize_with = "crate::config::settings::de::timeout")]
            pub path_timeout: Option<std::time::Duration>,
            pub path_fence: Option<crate::config::settings::PathFence>,
        }

        impl $name {
            /// The settings this table gives.
            pub fn settings(&self) -> crate::config::settings::Settings {
                crate::config::settings::Settings {
                    connect_timeout: self.connect_timeout,
                    login_timeout: self.login_timeout,
                    replacement_timeout: self.replacement_timeout,
                    nop_interval: self.nop_interval,
                    nop_timeout: self.nop_timeout,
                    command_timeout: self.command_timeout,
                    max_recv_segment: self.max_recv_segment,
                    header_digest: self.header_digest,
                    data_digest: self.data_digest,
                    cache: self.cache,
                    cache_size: self.cache_size,
                    readahead: self.readahead,
                    writeback_delay: self.writeback_delay,
                    stats_interval: self.stats_interval,
                    multipath: self.multipath,
                    multipath_policy: self.multipath_policy,
                    failback: self.failback,
                    path_check_interval: self.path_check_interval,
                    path_timeout: self.path_timeout,
                    path_fence: self.path_fence,
                }
            }
        }
    };
}
pub(crate) use settings_table;

/// The file keys of the settings every table takes (for help texts and
/// their tests).
pub const SETTING_KEYS: [&str; 20] = [
    "connect_timeout",
    "login_timeout",
    "replacement_timeout",
    "nop_interval",
    "nop_timeout",
    "command_timeout",
    "max_recv_segment",
    "header_digest",
    "data_digest",
    "cache",
    "cache_size",
    "readahead",
    "writeback_delay",
    "stats_interval",
    "multipath",
    "multipath_policy",
    "failback",
    "path_check_interval",
    "path_timeout",
    "path_fence",
];

/// Parse durations like `10s`, `500ms`, `2m`, `1h`, or plain seconds `10`.
/// 0 is allowed (where a setting gives it a meaning: "off").
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {t:?}: expected e.g. 10s, 500ms, 2m"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        u => return Err(format!("invalid duration unit {u:?} in {t:?}")),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("duration {t:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration that must be more than 0: a timeout of 0 would give up at
/// once, an interval of 0 would never rest.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{:?} is too short: must be more than 0", s.trim()));
    }
    Ok(d)
}

/// Parse sizes like `4096`, `4k`, `128K`, `1M`, `2g`, `1MiB` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "invalid size {t:?}: expected a number like 4k or 1M"
        ));
    }
    let n: u64 = num.parse().map_err(|_| format!("invalid size {t:?}"))?;
    let mult: u64 = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => return Err(format!("invalid size unit {u:?} in {t:?} (use k, M, G, T)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {t:?} is too large"))
}

/// The smallest cache: room for a few pages and the I/O in flight.
pub const MIN_CACHE_SIZE: u64 = 1 << 20;

/// `cache_size`: a size of at least [`MIN_CACHE_SIZE`].
pub fn parse_cache_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n < MIN_CACHE_SIZE {
        return Err(format!("{:?} is too small: at least 1M", s.trim()));
    }
    Ok(n)
}

/// `max_recv_segment`: MaxRecvDataSegmentLength's range, 512 to 16M-1
/// (RFC 7143 §13.12).
pub fn parse_segment_size(s: &str) -> Result<u32, String> {
    let n = parse_size(s)?;
    if !(512..=0xff_ffff).contains(&n) {
        return Err(format!(
            "{:?} is outside 512..16777215 (RFC 7143 §13.12)",
            s.trim()
        ));
    }
    Ok(n as u32)
}

/// Most worker threads `--threads` takes.
pub const MAX_THREADS: usize = 1024;

/// `threads`: 1 to [`MAX_THREADS`].
pub fn parse_threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{:?} is not a number of threads from 1 to {MAX_THREADS}",
            s.trim()
        )),
    }
}

/// `on` or `off`.
pub fn parse_on_off(s: &str) -> Result<OnOff, String> {
    match s.trim() {
        "on" => Ok(OnOff::On),
        "off" => Ok(OnOff::Off),
        t => Err(format!("{t:?} is neither on nor off")),
    }
}

/// How the config file's values are read: strings through the command
/// line's parsers, integers as the command line's bare numbers.
pub mod de {
    use super::*;
    use serde::de::{Error, Unexpected, Visitor};
    use serde::Deserializer;

    /// A value of the file as the text the command line would take.
    struct Text {
        expecting: &'static str,
        bool_as_switch: bool,
    }

    impl Visitor<'_> for Text {
        type Value = String;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.expecting)
        }

        fn visit_str<E: Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }

        fn visit_u64<E: Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }

        fn visit_i64<E: Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }

        fn visit_bool<E: Error>(self, v: bool) -> Result<String, E> {
            if self.bool_as_switch {
                Ok(if v { "on" } else { "off" }.to_string())
            } else {
                Err(E::invalid_type(Unexpected::Bool(v), &self))
            }
        }
    }

    fn parsed<'de, D: Deserializer<'de>, T>(
        d: D,
        expecting: &'static str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, D::Error> {
        let text = d.deserialize_any(Text {
            expecting,
            bool_as_switch: false,
        })?;
        parse(&text).map(Some).map_err(D::Error::custom)
    }

    const DURATION: &str = "a duration such as \"10s\", \"500ms\" or \"2m\"";

    /// A duration, 0 allowed.
    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        parsed(d, DURATION, parse_duration)
    }

    /// A duration of more than 0.
    pub fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        parsed(d, DURATION, parse_timeout)
    }

    /// `max_recv_segment`.
    pub fn segment_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        parsed(d, "a size such as \"256k\"", parse_segment_size)
    }

    /// `cache_size`.
    pub fn cache_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        parsed(d, "a size such as \"256M\"", parse_cache_size)
    }

    /// `threads`.
    pub fn threads<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
        parsed(d, "a number of threads", parse_threads)
    }

    /// `on`/`off`, or a boolean.
    pub fn on_off<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OnOff>, D::Error> {
        let text = d.deserialize_any(Text {
            expecting: "\"on\" or \"off\"",
            bool_as_switch: true,
        })?;
        parse_on_off(&text).map(Some).map_err(D::Error::custom)
    }
}
