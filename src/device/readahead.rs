//! Sequential-stream detection for read-ahead.
//!
//! A small table remembers where the last few streams of reads ended. A read
//! that starts close to one of those ends (within [`TOLERANCE`], so slightly
//! reordered concurrent readers still count) continues that stream; any
//! other read replaces the least recently used entry and triggers nothing,
//! so random access issues no read-ahead at all. Once a stream has been
//! continued [`CONTINUATIONS`] times in a row (so that random reads landing
//! near each other by chance do not count), read-ahead keeps a window of
//! data in front of it: the first
//! window is `min` bytes, and each time the reader gets within half a window
//! of what has been read ahead, the next window is issued at twice the size,
//! up to `max` (the "async marker" of Linux's read-ahead, simplified).

/// How far from a stream's end a read may start and still continue it.
pub(crate) const TOLERANCE: u64 = 128 << 10;

/// Continuations before a stream is treated as sequential.
pub(crate) const CONTINUATIONS: u32 = 2;

/// Streams tracked at once.
pub(crate) const STREAMS: usize = 8;

#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// Byte after the furthest read of the stream.
    next: u64,
    /// Byte after the furthest read-ahead issued for it.
    ra_end: u64,
    /// Size of the last read-ahead window (0 before the first).
    window: u64,
    /// Reads that continued the stream.
    run: u32,
    last_use: u64,
    live: bool,
}

/// The stream table. Not thread-safe by itself; the device keeps it under a
/// mutex held only for [`Streams::on_read`].
#[derive(Debug)]
pub(crate) struct Streams {
    streams: [Stream; STREAMS],
    clock: u64,
    min: u64,
    max: u64,
    size: u64,
}

impl Streams {
    /// Windows grow from `min` to `max` bytes; nothing is read past `size`.
    pub(crate) fn new(min: u64, max: u64, size: u64) -> Streams {
        Streams {
            streams: [Stream::default(); STREAMS],
            clock: 0,
            min: min.max(1),
            max: max.max(min),
            size,
        }
    }

    /// Record a read of `len` bytes at `offset`; returns the byte range to
    /// read ahead now, if any.
    pub(crate) fn on_read(&mut self, offset: u64, len: u64) -> Option<(u64, u64)> {
        self.clock += 1;
        let end = offset.saturating_add(len);
        let matched = self.streams.iter_mut().find(|s| {
            s.live && offset.saturating_add(TOLERANCE) >= s.next && offset <= s.next + TOLERANCE
        });
        let Some(s) = matched else {
            let victim = self
                .streams
                .iter_mut()
                .min_by_key(|s| if s.live { s.last_use } else { 0 })
                .expect("the table is not empty");
            *victim = Stream {
                next: end,
                ra_end: end,
                window: 0,
                run: 0,
                last_use: self.clock,
                live: true,
            };
            return None;
        };
        s.last_use = self.clock;
        s.next = s.next.max(end);
        s.ra_end = s.ra_end.max(s.next);
        s.run = s.run.saturating_add(1);
        if s.run < CONTINUATIONS {
            return None;
        }
        if s.window != 0 && s.ra_end - s.next > s.window / 2 {
            return None;
        }
        s.window = if s.window == 0 {
            self.min
        } else {
            (s.window * 2).min(self.max)
        };
        let start = s.ra_end;
        let stop = start.saturating_add(s.window).min(self.size);
        if start >= stop {
            return None;
        }
        s.ra_end = stop;
        Some((start, stop))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    #[test]
    fn first_read_of_a_stream_reads_nothing_ahead() {
        let mut s = Streams::new(128 * K, 4096 * K, 1 << 40);
        assert_eq!(s.on_read(0, 4 * K), None);
    }

    #[test]
    fn sequential_reads_trigger_a_window_that_doubles_up_to_the_max() {
        let mut s = Streams::new(128 * K, 1024 * K, 1 << 40);
        s.on_read(0, 4 * K);
        assert_eq!(s.on_read(4 * K, 4 * K), None);
        assert_eq!(s.on_read(8 * K, 4 * K), Some((12 * K, 140 * K)));
        let mut windows = Vec::new();
        let mut pos = 12 * K;
        while pos < 8192 * K {
            if let Some((a, b)) = s.on_read(pos, 4 * K) {
                windows.push(b - a);
            }
            pos += 4 * K;
        }
        assert_eq!(&windows[..3], &[256 * K, 512 * K, 1024 * K]);
        assert!(windows[3..].iter().all(|&w| w == 1024 * K));
    }

    #[test]
    fn random_reads_never_trigger_read_ahead() {
        let mut s = Streams::new(128 * K, 4096 * K, 1 << 40);
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = (x % (1 << 40)) / 4096 * 4096;
            assert_eq!(s.on_read(off, 4 * K), None);
        }
    }

    #[test]
    fn several_interleaved_streams_are_each_detected() {
        let mut s = Streams::new(64 * K, 4096 * K, 1 << 40);
        let bases = [0u64, 1 << 30, 2 << 30, 3 << 30];
        for b in bases {
            assert_eq!(s.on_read(b, 4 * K), None);
        }
        for b in bases {
            assert_eq!(s.on_read(b + 4 * K, 4 * K), None);
        }
        for b in bases {
            assert_eq!(s.on_read(b + 8 * K, 4 * K), Some((b + 12 * K, b + 76 * K)));
        }
    }

    #[test]
    fn read_ahead_stops_at_the_end_of_the_device() {
        let mut s = Streams::new(128 * K, 4096 * K, 16 * K);
        s.on_read(0, 4 * K);
        s.on_read(4 * K, 4 * K);
        assert_eq!(s.on_read(8 * K, 4 * K), Some((12 * K, 16 * K)));
        assert_eq!(s.on_read(12 * K, 4 * K), None);
    }
}
