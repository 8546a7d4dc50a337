//! Where log messages go (`--log-format`): text or JSON lines on stderr,
//! or the systemd journal with structured fields.
//!
//! `auto` (the default) is text, except when systemd connected stderr to
//! the journal: systemd then sets `JOURNAL_STREAM=DEV:INODE` to the
//! device and inode of that stream (systemd.exec(5)), and rlun logs to
//! journald natively (its datagram socket) when stderr still is that
//! stream — a child whose stderr was redirected elsewhere inherits the
//! variable but not the stream, and keeps writing text.
//!
//! In the journal, each entry carries, besides MESSAGE and PRIORITY
//! (error 3, warn 4, info 5, debug 6, trace 7), the event's own fields
//! upper-cased with the `RLUN_` prefix (`lun` → `RLUN_LUN`, `error` →
//! `RLUN_ERROR`), and once a serving command knows them ([`set_serving`])
//! `RLUN_TARGET` (the target's IQN) and `RLUN_PORTAL` (host:port) on every
//! entry. The prefix keeps them apart from journald's own fields: the
//! unprefixed `TARGET` is the tracing target (the Rust module), which
//! tracing-journald always sends.
//!
//! When the journal's socket cannot be reached, rlun logs text to stderr:
//! silently for `auto`, with one warning for an explicit `journal`.

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Text, or journal when stderr is systemd's journal stream.
    Auto,
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
    /// Native journald entries with structured fields.
    Journal,
}

/// Where the log messages went, as [`init`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Text,
    Json,
    Journal,
}

/// The prefix of rlun's own fields in the journal (`RLUN_LUN`…).
pub const FIELD_PREFIX: &str = "RLUN";

type JournalLayer = reload::Layer<
    Option<tracing_journald::Layer>,
    tracing_subscriber::layer::Layered<EnvFilter, Registry>,
>;
type JournalHandle = reload::Handle<
    Option<tracing_journald::Layer>,
    tracing_subscriber::layer::Layered<EnvFilter, Registry>,
>;

/// The journal layer, to add the serving fields to once they are known.
static JOURNAL: OnceLock<JournalHandle> = OnceLock::new();

/// Whether `JOURNAL_STREAM`'s value names the stream `(dev, ino)`.
pub fn journal_stream_matches(value: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = value.trim().split_once(':') else {
        return false;
    };
    matches!((d.parse::<u64>(), i.parse::<u64>()), (Ok(d), Ok(i)) if (d, i) == (dev, ino))
}

/// Whether systemd connected this process's stderr to the journal.
pub fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::MetadataExt as _;
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(meta) = std::fs::File::from(fd).metadata() else {
        return false;
    };
    journal_stream_matches(&value.to_string_lossy(), meta.dev(), meta.ino())
}

/// Set up the global subscriber for `format` with `filter`; returns where
/// the messages go.
pub fn init(format: LogFormat, filter: EnvFilter) -> Sink {
    let journal = match format {
        LogFormat::Journal => Some(true),
        LogFormat::Auto if stderr_is_journal() => Some(false),
        _ => None,
    };
    let mut unreachable = None;
    if let Some(explicit) = journal {
        match tracing_journald::Layer::new() {
            Ok(layer) => {
                let layer = layer.with_field_prefix(Some(FIELD_PREFIX.into()));
                let (layer, handle): (JournalLayer, _) = reload::Layer::new(Some(layer));
                tracing_subscriber::registry()
                    .with(filter)
                    .with(layer)
                    .init();
                let _ = JOURNAL.set(handle);
                return Sink::Journal;
            }
            Err(e) if explicit => unreachable = Some(e),
            Err(_) => {}
        }
    }
    let stderr_tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let sink = if format == LogFormat::Json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_current_span(false)
            .init();
        Sink::Json
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            // Colour only on a terminal: not in log files, pipes or the journal.
            .with_ansi(stderr_tty)
            .with_target(false)
            .init();
        Sink::Text
    };
    if let Some(e) = unreachable {
        tracing::warn!(
            error = %e,
            "cannot reach the systemd journal (/run/systemd/journal/socket); logging to stderr as text"
        );
    }
    sink
}

/// Add the target's IQN and portal to every journal entry from now on
/// (`RLUN_TARGET`, `RLUN_PORTAL`): a serving command serves one target.
/// Does nothing unless logging goes to the journal; the first call wins.
pub fn set_serving(target: &str, portal: &str) {
    static ONCE: OnceLock<()> = OnceLock::new();
    let Some(handle) = JOURNAL.get() else {
        return;
    };
    if ONCE.set(()).is_err() {
        return;
    }
    let _ = handle.modify(|slot| {
        if let Some(layer) = slot.take() {
            *slot = Some(layer.with_custom_fields([
                (format!("{FIELD_PREFIX}_TARGET"), target),
                (format!("{FIELD_PREFIX}_PORTAL"), portal),
            ]));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_must_name_this_stream() {
        assert!(journal_stream_matches("8:1234", 8, 1234));
        assert!(journal_stream_matches("8:1234\n", 8, 1234));
        // Another stream: a child whose stderr was redirected.
        assert!(!journal_stream_matches("8:1234", 8, 1235));
        assert!(!journal_stream_matches("9:1234", 8, 1234));
        for bad in ["", "8", "8:", ":1234", "x:1", "8:1234:5", "-8:1234"] {
            assert!(!journal_stream_matches(bad, 8, 1234), "{bad:?}");
        }
    }
}
