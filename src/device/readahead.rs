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
//!
//! **Streaming readers bypass the cache.** The table also counts, per
//! stream, the *large* reads (at least the device's bypass size) in flight
//! ([`Streams::observe`] hands out a [`StreamToken`], [`Streams::done`]
//! takes it back; a [`LargeReadGuard`] returns it when the read ends). A large read that continues a sequential stream while another large
//! read of that stream is still in flight comes from a client that keeps
//! its own requests in flight far ahead (nbdcopy, qemu-img convert, the
//! kernel's read-ahead on `/dev/nbdN`; once seen, the stream stays marked
//! so): read-ahead cannot get in front of
//! it, and filling pages for data it reads once only costs two copies and
//! evicts what others re-read. Such reads are told to bypass the cache (the
//! device reads them straight from the target when none of their pages is
//! resident) and issue no read-ahead. A sequential reader that waits for
//! each read (queue depth 1) keeps read-ahead, which is what hides its
//! latency.

use std::sync::Mutex;

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
    /// Large reads of the stream in flight (tokens not yet returned).
    inflight: u32,
    /// A large read arrived while `depth` others were in flight: the
    /// client pipelines. Sticky, so a moment at queue depth 1 (a client
    /// ramping up, a pause) does not start read-ahead whose pages would
    /// then send the reads behind it through the cache.
    pipelined: bool,
    /// Tells this stream from an earlier one in the same slot.
    id: u64,
    last_use: u64,
    live: bool,
}

/// A large read in flight, counted against its stream until
/// [`Streams::done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamToken {
    slot: usize,
    id: u64,
}

/// What [`Streams::observe`] advises for one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Advice {
    /// Bytes to read ahead now.
    pub ahead: Option<(u64, u64)>,
    /// Read straight from the target, without filling pages.
    pub bypass: bool,
    /// Return with [`Streams::done`] when the read completes (large reads).
    pub token: Option<StreamToken>,
}

/// The stream table. Not thread-safe by itself; the device keeps it under a
/// mutex held only for [`Streams::observe`] and [`Streams::done`].
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
    #[cfg(test)]
    pub(crate) fn on_read(&mut self, offset: u64, len: u64) -> Option<(u64, u64)> {
        self.observe(offset, len, false, 0).ahead
    }

    /// Record a read of `len` bytes at `offset` and advise it. A `large`
    /// read gets a token (return it with [`Streams::done`]) and is told to
    /// bypass the cache when it continues a sequential stream that has had
    /// at least `depth` other large reads in flight when one arrived
    /// (`depth` 0: every large sequential read bypasses); a bypassing read
    /// issues no read-ahead.
    pub(crate) fn observe(&mut self, offset: u64, len: u64, large: bool, depth: u32) -> Advice {
        self.clock += 1;
        let end = offset.saturating_add(len);
        // One pass: the stream this read continues, or else the slot to
        // reuse (the first free one, or the least recently used).
        let (mut matched, mut victim, mut oldest) = (None, 0, u64::MAX);
        for (i, s) in self.streams.iter().enumerate() {
            if !s.live {
                if oldest != 0 {
                    (victim, oldest) = (i, 0);
                }
            } else if offset.saturating_add(TOLERANCE) >= s.next && offset <= s.next + TOLERANCE {
                matched = Some(i);
                break;
            } else if s.last_use < oldest {
                (victim, oldest) = (i, s.last_use);
            }
        }
        let Some(slot) = matched else {
            let slot = victim;
            self.streams[slot] = Stream {
                next: end,
                ra_end: end,
                window: 0,
                run: 0,
                inflight: large as u32,
                pipelined: large && depth == 0,
                id: self.clock,
                last_use: self.clock,
                live: true,
            };
            return Advice {
                token: large.then_some(StreamToken {
                    slot,
                    id: self.clock,
                }),
                ..Advice::default()
            };
        };
        let s = &mut self.streams[slot];
        s.last_use = self.clock;
        s.next = s.next.max(end);
        s.ra_end = s.ra_end.max(s.next);
        s.run = s.run.saturating_add(1);
        let mut advice = Advice::default();
        if large {
            s.pipelined |= s.inflight >= depth;
            advice.bypass = s.run >= CONTINUATIONS && s.pipelined;
            s.inflight += 1;
            advice.token = Some(StreamToken { slot, id: s.id });
        }
        if s.run < CONTINUATIONS || advice.bypass {
            return advice;
        }
        advice.ahead = self.window(slot);
        advice
    }

    /// A large read of [`Streams::observe`] completed (or was dropped).
    pub(crate) fn done(&mut self, t: StreamToken) {
        let s = &mut self.streams[t.slot];
        if s.live && s.id == t.id {
            s.inflight = s.inflight.saturating_sub(1);
        }
    }

    /// The next read-ahead window of stream `slot`, if it is due.
    fn window(&mut self, slot: usize) -> Option<(u64, u64)> {
        let s = &mut self.streams[slot];
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

/// A large read in flight on its stream: gives its [`StreamToken`] back to
/// the table ([`Streams::done`]) when dropped, whether the read completed,
/// failed or was abandoned by its caller.
pub(crate) struct LargeReadGuard<'a> {
    streams: &'a Mutex<Streams>,
    token: StreamToken,
}

impl<'a> LargeReadGuard<'a> {
    /// Hold `token` (from [`Streams::observe`] on `streams`) until dropped.
    #[inline]
    pub(crate) fn new(streams: &'a Mutex<Streams>, token: StreamToken) -> LargeReadGuard<'a> {
        LargeReadGuard { streams, token }
    }
}

impl Drop for LargeReadGuard<'_> {
    fn drop(&mut self) {
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .done(self.token);
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

    #[test]
    fn pipelined_large_sequential_reads_bypass_and_read_nothing_ahead() {
        let mut s = Streams::new(128 * K, 4096 * K, 1 << 40);
        let mut tokens = Vec::new();
        let mut advice = Vec::new();
        // A client with many 256 KiB reads in flight at once.
        for i in 0..8 {
            let a = s.observe(i * 256 * K, 256 * K, true, 1);
            tokens.push(a.token.expect("large reads are counted"));
            advice.push(a);
        }
        assert!(!advice[0].bypass && !advice[1].bypass, "not a stream yet");
        assert!(advice[2..].iter().all(|a| a.bypass && a.ahead.is_none()));
        for t in tokens {
            s.done(t);
        }
    }

    #[test]
    fn a_large_sequential_reader_at_queue_depth_one_keeps_read_ahead() {
        let mut s = Streams::new(128 * K, 4096 * K, 1 << 40);
        let mut ahead = 0;
        for i in 0..16 {
            let a = s.observe(i * 256 * K, 256 * K, true, 1);
            assert!(!a.bypass, "read {i} waited for the one before");
            ahead += a.ahead.is_some() as u32;
            s.done(a.token.expect("large"));
        }
        assert!(ahead > 0);
    }

    #[test]
    fn small_reads_get_no_token_and_never_bypass() {
        let mut s = Streams::new(128 * K, 4096 * K, 1 << 40);
        for i in 0..64 {
            let a = s.observe(i * 4 * K, 4 * K, false, 0);
            assert!(!a.bypass && a.token.is_none());
        }
    }

    #[test]
    fn a_token_of_a_replaced_stream_does_not_touch_its_successor() {
        let mut s = Streams::new(128 * K, 4096 * K, 1 << 40);
        let old = s.observe(0, 256 * K, true, 1).token.unwrap();
        // Fill the table's other slots; the next new stream takes the
        // least recently used one: the first stream's.
        for i in 1..STREAMS as u64 {
            s.observe(i << 32, 256 * K, true, 1);
        }
        let base = 1u64 << 39;
        let a = s.observe(base, 256 * K, true, 1);
        let b = s.observe(base + 256 * K, 256 * K, true, 1);
        s.done(old);
        // The successor still counts its two reads in flight.
        assert!(s.observe(base + 512 * K, 256 * K, true, 2).bypass);
        let _ = (a, b);
    }

    #[test]
    fn a_stream_once_pipelined_keeps_bypassing_at_a_moment_of_queue_depth_one() {
        let mut s = Streams::new(128 * K, 4096 * K, 1 << 40);
        let t0 = s.observe(0, 256 * K, true, 1).token.unwrap();
        let t1 = s.observe(256 * K, 256 * K, true, 1).token.unwrap();
        s.done(t0);
        s.done(t1);
        // Nothing in flight now, but the stream was seen pipelining.
        let a = s.observe(512 * K, 256 * K, true, 1);
        assert!(a.bypass && a.ahead.is_none());
    }

    #[test]
    fn a_large_read_guard_counts_its_read_until_dropped() {
        let streams = Mutex::new(Streams::new(128 * K, 4096 * K, 1 << 40));
        let observe = |i: u64| {
            streams
                .lock()
                .unwrap()
                .observe(i * 256 * K, 256 * K, true, 1)
        };
        // Each read's guard drops before the next read: queue depth one.
        for i in 0..4 {
            let a = observe(i);
            let _guard = LargeReadGuard::new(&streams, a.token.expect("large"));
            assert!(!a.bypass, "read {i}: the one before was returned");
        }
        // A guard kept alive keeps its read in flight: the next one pipelines.
        let a = observe(4);
        let _held = LargeReadGuard::new(&streams, a.token.expect("large"));
        assert!(!a.bypass);
        assert!(observe(5).bypass);
    }
}
