//! What `rlun cp` tells the user while and after it copies: a redrawn bar
//! on a terminal, plain lines once a second when `--progress` asks for
//! progress on a pipe or a log file, and one summary line at the end. All
//! sizes and rates in binary units (KiB, MiB, GiB; MiB/s).

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;

use crate::service::human_size;

/// How progress is shown, decided from the flags and whether standard
/// error is a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Nothing (`--no-progress`, `-q`, or standard error is no terminal).
    Off,
    /// A bar redrawn in place (standard error is a terminal).
    Bar,
    /// One line a second (`--progress` with standard error no terminal).
    Lines,
}

impl ProgressMode {
    /// `-q` wins over everything, `--no-progress` over `--progress`; a
    /// terminal gets a bar unless told otherwise, anything else lines only
    /// when `--progress` asks.
    pub fn choose(quiet: bool, progress: bool, no_progress: bool, terminal: bool) -> Self {
        match (quiet || no_progress, terminal, progress) {
            (true, _, _) => ProgressMode::Off,
            (false, true, _) => ProgressMode::Bar,
            (false, false, true) => ProgressMode::Lines,
            (false, false, false) => ProgressMode::Off,
        }
    }
}

/// The progress display of one copy: told the position of the first byte
/// not yet copied after each chunk that lands.
pub struct Meter {
    bar: Option<ProgressBar>,
    ticker: Option<JoinHandle<()>>,
    done: Arc<AtomicU64>,
}

impl Meter {
    /// Start showing progress of a copy from byte `first` to `total` (`None`
    /// when the source is a stream of unknown length).
    pub fn start(mode: ProgressMode, first: u64, total: Option<u64>) -> Meter {
        let done = Arc::new(AtomicU64::new(first));
        let mut meter = Meter {
            bar: None,
            ticker: None,
            done: done.clone(),
        };
        match mode {
            ProgressMode::Off => {}
            ProgressMode::Bar => {
                let b = ProgressBar::new(total.unwrap_or(0));
                let template = match total {
                    Some(_) => "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
                    None => "{binary_bytes} {binary_bytes_per_sec}",
                };
                b.set_style(ProgressStyle::with_template(template).expect("static template"));
                b.set_position(first);
                b.reset_eta();
                meter.bar = Some(b);
            }
            ProgressMode::Lines => {
                meter.ticker = Some(tokio::spawn(print_lines(done, first, total)));
            }
        }
        meter
    }

    /// The copy has reached byte `done` (in order).
    pub fn set(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.set_position(done);
        }
    }

    /// Stop showing progress: the bar is erased, the lines stop.
    pub fn finish(self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if let Some(t) = &self.ticker {
            t.abort();
        }
    }
}

/// Once a second: `copying: 12.0 MiB of 64.0 MiB (18%), 11.9 MiB/s`, the
/// rate over the last second.
async fn print_lines(done: Arc<AtomicU64>, first: u64, total: Option<u64>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut last = (Instant::now(), first);
    loop {
        tick.tick().await;
        let (now, at) = (Instant::now(), done.load(Ordering::Relaxed));
        let rate = rate(at.saturating_sub(last.1), now - last.0);
        let line = progress_line(at, total, rate);
        // Standard error gone: nothing to tell, and nobody to tell it to.
        let _ = writeln!(std::io::stderr(), "{line}");
        last = (now, at);
    }
}

/// Bytes per second.
fn rate(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-6)
}

fn human_rate(bytes_per_s: f64) -> String {
    format!("{}/s", human_size(bytes_per_s as u64))
}

/// One progress line.
pub fn progress_line(at: u64, total: Option<u64>, bytes_per_s: f64) -> String {
    match total {
        Some(t) => {
            let pct = if t == 0 {
                100
            } else {
                at as u128 * 100 / t as u128
            };
            format!(
                "copying: {} of {} ({pct}%), {}",
                human_size(at),
                human_size(t),
                human_rate(bytes_per_s)
            )
        }
        None => format!("copying: {}, {}", human_size(at), human_rate(bytes_per_s)),
    }
}

/// The line printed after a successful copy of `bytes` bytes starting at
/// `offset`, `holes` of them zeros left as holes in the destination file.
pub fn summary(bytes: u64, offset: u64, holes: u64, elapsed: Duration) -> String {
    let from = if offset > 0 {
        format!(", from byte {offset} on")
    } else {
        String::new()
    };
    let holes = if holes > 0 {
        format!("; {} of zeros left as holes", human_size(holes))
    } else {
        String::new()
    };
    format!(
        "copied {} ({bytes} bytes{from}) in {:.2} s, {}{holes}",
        human_size(bytes),
        elapsed.as_secs_f64(),
        human_rate(rate(bytes, elapsed))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_beats_every_flag_and_a_pipe_gets_lines_only_when_asked() {
        use ProgressMode::*;
        assert_eq!(ProgressMode::choose(true, true, false, true), Off);
        assert_eq!(ProgressMode::choose(true, true, false, false), Off);
        assert_eq!(ProgressMode::choose(false, true, true, true), Off);
        assert_eq!(ProgressMode::choose(false, false, false, true), Bar);
        assert_eq!(ProgressMode::choose(false, true, false, true), Bar);
        assert_eq!(ProgressMode::choose(false, true, false, false), Lines);
        assert_eq!(ProgressMode::choose(false, false, false, false), Off);
    }

    #[test]
    fn lines_and_summary_speak_binary_units() {
        assert_eq!(
            progress_line(16 << 20, Some(64 << 20), 8.0 * (1 << 20) as f64),
            "copying: 16.0 MiB of 64.0 MiB (25%), 8.0 MiB/s"
        );
        assert_eq!(
            progress_line(1 << 30, None, 512.0),
            "copying: 1.0 GiB, 512 B/s"
        );
        assert_eq!(
            summary(64 << 20, 0, 0, Duration::from_millis(500)),
            "copied 64.0 MiB (67108864 bytes) in 0.50 s, 128.0 MiB/s"
        );
        assert_eq!(
            summary(32 << 20, 32 << 20, 16 << 20, Duration::from_secs(1)),
            "copied 32.0 MiB (33554432 bytes, from byte 33554432 on) in 1.00 s, 32.0 MiB/s; \
             16.0 MiB of zeros left as holes"
        );
    }
}
