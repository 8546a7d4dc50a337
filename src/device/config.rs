//! [`CacheMode`] and [`DeviceConfig`]: how a `LunDevice` caches, and its
//! settings.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use super::budget::CacheBudget;
use super::error::DeviceError;

/// How `LunDevice` caches; see the `device` module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheMode {
    /// No cache: every read and write goes to the target.
    None,
    /// Reads are cached; writes complete when the target has them.
    #[default]
    WriteThrough,
    /// Writes complete in memory and are written back later.
    WriteBack,
}

impl CacheMode {
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::None => "none",
            CacheMode::WriteThrough => "write-through",
            CacheMode::WriteBack => "write-back",
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CacheMode {
    type Err = DeviceError;
    fn from_str(s: &str) -> Result<CacheMode, DeviceError> {
        match s {
            "none" => Ok(CacheMode::None),
            "write-through" | "writethrough" => Ok(CacheMode::WriteThrough),
            "write-back" | "writeback" => Ok(CacheMode::WriteBack),
            other => Err(DeviceError::Config(format!(
                "unknown cache mode {other:?} (none, write-through, write-back)"
            ))),
        }
    }
}

/// Settings of a `LunDevice`.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub mode: CacheMode,
    /// Cap on the cache's memory in bytes (default 256 MiB): the size of
    /// the private budget made when `budget` is `None`.
    pub cache_size: u64,
    /// The memory this device's cache shares with other devices (one per
    /// process: every LUN of a `mount`, `serve` or `attach`). `None`: a
    /// budget of `cache_size` for this device alone.
    pub budget: Option<CacheBudget>,
    /// Page size in bytes; `None` picks one (see the module docs). Must be a
    /// power of two, a multiple of the block size, at most 128 blocks.
    pub page_size: Option<u32>,
    /// Read ahead of sequential streams.
    pub readahead: bool,
    /// First read-ahead window in bytes (default 128 KiB).
    pub readahead_min: u64,
    /// Largest read-ahead window in bytes (default 4 MiB).
    pub readahead_max: u64,
    /// Reads at least this long that stream (see the module docs) bypass
    /// the cache when none of their pages is resident (default 128 KiB;
    /// 0: never).
    pub bypass_min: u64,
    /// Other bypass-sized reads of the stream that must be in flight for a
    /// read to bypass (default 1; 0: every sequential read of at least
    /// `bypass_min` bypasses).
    pub bypass_depth: u32,
    /// Longest time dirty data waits before the flusher writes it (default 1 s).
    pub writeback_delay: Duration,
    /// Write-back commands in flight at once (default 4).
    pub writeback_depth: usize,
    /// Log a `tracing::info!` line with the counters this often.
    pub stats_interval: Option<Duration>,
}

impl Default for DeviceConfig {
    fn default() -> DeviceConfig {
        DeviceConfig {
            mode: CacheMode::WriteThrough,
            cache_size: 256 << 20,
            budget: None,
            page_size: None,
            readahead: true,
            readahead_min: 128 << 10,
            readahead_max: 4 << 20,
            bypass_min: 128 << 10,
            bypass_depth: 1,
            writeback_delay: Duration::from_secs(1),
            writeback_depth: 4,
            stats_interval: None,
        }
    }
}
