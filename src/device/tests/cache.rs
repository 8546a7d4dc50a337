//! The page cache: hits, read-ahead, the streaming bypass, write-through,
//! write-back and the flusher, the memory cap, discard and write zeroes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use rlun_iscsi::scsi::sense::errno;

// ---- the cache ------------------------------------------------------------------

#[tokio::test]
async fn cached_rereads_send_no_commands() {
    let d = device(
        MemBackend::from_data(512, pattern(4, 1 << 20)),
        cfg(CacheMode::WriteThrough),
    );
    d.read_at(0, 256 * 1024).await.unwrap();
    let before = d.backend().counts().reads;
    for _ in 0..10 {
        assert_eq!(
            d.read_at(4096, 100_000).await.unwrap(),
            pattern(4, 1 << 20)[4096..104_096]
        );
    }
    assert_eq!(d.backend().counts().reads, before);
    assert!(d.stats().hits >= 10 * 24);
}

#[tokio::test]
async fn read_now_answers_hits_at_once_with_the_newest_data_and_leaves_misses_to_read_wait() {
    let data = pattern(8, 1 << 20);
    let d = device(
        MemBackend::from_data(512, data.clone()),
        DeviceConfig {
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    );
    // Nothing resident: read_now sends nothing and hands the read on.
    let w = match d.read_now(64 * KIB, 4096) {
        ReadNow::Wait(w) => w,
        other => panic!("a miss was not handed on: {other:?}"),
    };
    assert_eq!(d.backend().counts().reads, 0);
    assert_eq!(
        d.read_wait(w).await.unwrap()[..],
        data[64 * KIB as usize..][..4096]
    );
    // Dirty, unflushed bytes inside a resident page: a hit that returns them.
    d.write_at(64 * KIB + 100, Bytes::from_static(b"newer"))
        .await
        .unwrap();
    let mut want = data[64 * KIB as usize..][..4096].to_vec();
    want[100..105].copy_from_slice(b"newer");
    let (reads, hits) = (d.backend().counts().reads, d.stats().hits);
    for _ in 0..3 {
        match d.read_now(64 * KIB, 4096) {
            ReadNow::Done(r) => assert!(r.unwrap()[..] == want[..]),
            other => panic!("a resident page was not a hit: {other:?}"),
        }
    }
    assert_eq!(d.stats().hits, hits + 3, "one hit per page read");
    assert_eq!(d.backend().counts().reads, reads, "hits send no command");
    // Partly resident: handed on, and the whole read is right.
    let w = match d.read_now(60 * KIB, 8192) {
        ReadNow::Wait(w) => w,
        other => panic!("a read with an absent page was not handed on: {other:?}"),
    };
    let got = d.read_wait(w).await.unwrap();
    assert!(got[..4096] == data[60 * KIB as usize..][..4096]);
    assert!(got[4096..] == want[..]);
    // Errors up front and empty reads complete at once too.
    assert!(matches!(
        d.read_now(1 << 20, 1),
        ReadNow::Done(Err(DeviceError::OutOfRange { .. }))
    ));
    assert!(matches!(d.read_now(0, 0), ReadNow::Done(Ok(b)) if b.is_empty()));
    assert!(d.backend().bytes_at(64 * KIB + 100, 5) != b"newer"[..]);
}

#[tokio::test]
async fn sequential_reads_are_read_ahead_and_random_reads_are_not() {
    let size = 64 << 20;
    let d = device(
        MemBackend::new(512, size / 512),
        cfg(CacheMode::WriteThrough),
    );
    for i in 0..512u64 {
        d.read_at(i * 4096, 4096).await.unwrap();
    }
    let s = d.stats();
    assert!(s.readahead_pages > 400, "{s:?}");
    assert!(s.readahead_hits > 400, "{s:?}");
    assert!(
        d.backend().counts().reads < 40,
        "{:?}",
        d.backend().counts()
    );

    let size = 256 << 20;
    let d = device(
        MemBackend::new(512, size / 512),
        cfg(CacheMode::WriteThrough),
    );
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..512 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        d.read_at(x % (size / 4096) * 4096, 4096).await.unwrap();
    }
    assert_eq!(d.stats().readahead_pages, 0);
}

#[tokio::test]
async fn readahead_off_reads_page_by_page() {
    let d = device(
        MemBackend::new(512, 8192),
        DeviceConfig {
            readahead: false,
            ..cfg(CacheMode::WriteThrough)
        },
    );
    for i in 0..64u64 {
        d.read_at(i * 4096, 4096).await.unwrap();
    }
    assert_eq!(d.backend().counts().reads, 64);
    assert_eq!(d.stats().readahead_pages, 0);
}

/// Reads of a client that keeps many 256 KiB reads in flight, each
/// continuing the one before (nbdcopy's pattern).
async fn pipelined_stream(d: &Arc<LunDevice<MemBackend>>, start: u64, n: u64) -> Vec<Bytes> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let d = d.clone();
            tokio::spawn(async move { d.read_at(start + i * 256 * KIB, 256 << 10).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap().unwrap());
    }
    out
}

#[tokio::test]
async fn pipelined_streaming_reads_bypass_the_cache_and_fill_no_pages() {
    let data = pattern(5, 8 << 20);
    let d = Arc::new(device(
        MemBackend::from_data(512, data.clone()).with_latency(Duration::from_millis(5)),
        cfg(CacheMode::WriteThrough),
    ));
    let got = pipelined_stream(&d, 0, 16).await;
    for (i, b) in got.iter().enumerate() {
        let at = i * (256 << 10);
        assert!(b[..] == data[at..at + (256 << 10)], "read {i}");
    }
    let s = d.stats();
    // The first two start the stream through the cache; the rest bypass.
    assert_eq!(s.bypassed_reads, 14, "{s:?}");
    assert_eq!(s.readahead_pages, 0, "{s:?}");
    assert!(s.cached_bytes <= 2 * (256 << 10) + 128 * 256, "{s:?}");
    assert_eq!(d.backend().counts().reads, 16);
}

#[tokio::test]
async fn a_streaming_read_still_sees_dirty_write_back_data() {
    let data = pattern(6, 8 << 20);
    let d = Arc::new(device(
        MemBackend::from_data(512, data.clone()).with_latency(Duration::from_millis(5)),
        DeviceConfig {
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    ));
    // Dirty, unflushed data inside the 9th and 13th reads of the stream
    // (one partial block, one whole page).
    d.write_at(8 * 256 * KIB + 1000, Bytes::from_static(b"newer"))
        .await
        .unwrap();
    d.write_at(12 * 256 * KIB + 8192, Bytes::from(vec![0xab; 4096]))
        .await
        .unwrap();
    assert!(d.stats().dirty_bytes > 0);
    let got = pipelined_stream(&d, 0, 16).await;
    let mut want = data.clone();
    want[(8 * 256 * KIB + 1000) as usize..][..5].copy_from_slice(b"newer");
    want[(12 * 256 * KIB + 8192) as usize..][..4096].fill(0xab);
    for (i, b) in got.iter().enumerate() {
        let at = i * (256 << 10);
        assert!(b[..] == want[at..at + (256 << 10)], "read {i}");
    }
    let s = d.stats();
    assert!(s.bypassed_reads >= 10, "the others bypassed: {s:?}");
    assert!(
        s.bypassed_reads <= 12,
        "not the two with dirty pages: {s:?}"
    );
    assert!(d.backend().bytes_at(8 * 256 * KIB + 1000, 5) != b"newer"[..]);
}

#[tokio::test]
async fn a_sequential_reader_at_queue_depth_one_is_read_ahead_not_bypassed() {
    let d = device(
        MemBackend::new(512, (16 << 20) / 512),
        cfg(CacheMode::WriteThrough),
    );
    for i in 0..32u64 {
        d.read_at(i * 256 * KIB, 256 << 10).await.unwrap();
    }
    let s = d.stats();
    assert_eq!(s.bypassed_reads, 0, "{s:?}");
    assert!(s.readahead_pages > 0 && s.readahead_hits > 0, "{s:?}");
}

#[tokio::test]
async fn write_through_updates_resident_pages() {
    let d = device(MemBackend::new(512, 64), cfg(CacheMode::WriteThrough));
    d.read_at(0, 8192).await.unwrap();
    d.write_at(10, Bytes::from_static(b"hello")).await.unwrap();
    let reads = d.backend().counts().reads;
    assert_eq!(&d.read_at(8, 9).await.unwrap()[..], b"\0\0hello\0\0");
    assert_eq!(d.backend().counts().reads, reads, "served from the cache");
    assert_eq!(&d.backend().bytes_at(10, 5)[..], b"hello");
}

#[tokio::test]
async fn write_back_holds_data_until_flush_then_writes_and_syncs() {
    let d = device(
        MemBackend::new(512, 4096),
        DeviceConfig {
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    );
    let data = pattern(5, 64 * 1024);
    for i in 0..16 {
        let part = data[i * 4096..(i + 1) * 4096].to_vec();
        d.write_at(4096 + i as u64 * 4096, Bytes::from(part))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        d.backend().counts().writes,
        0,
        "nothing written before flush"
    );
    assert_eq!(d.stats().dirty_bytes, 64 * 1024);
    assert!(
        d.read_at(4096, 64 * 1024).await.unwrap() == data,
        "reads see dirty data"
    );
    d.flush().await.unwrap();
    let c = d.backend().counts();
    assert_eq!(
        c.writes, 1,
        "16 neighbouring pages coalesced into one WRITE"
    );
    assert_eq!(c.flushes, 1);
    assert!(d.backend().bytes_at(4096, 64 * 1024) == data);
    let s = d.stats();
    assert_eq!((s.dirty_bytes, s.flushes, s.writebacks), (0, 1, 1));
}

#[tokio::test]
async fn the_flusher_writes_dirty_data_after_the_delay() {
    let d = device(
        MemBackend::new(512, 4096),
        DeviceConfig {
            writeback_delay: Duration::from_millis(50),
            ..cfg(CacheMode::WriteBack)
        },
    );
    d.write_at(0, Bytes::from(vec![9u8; 8192])).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while d.backend().counts().writes == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(d.backend().bytes_at(0, 8192), vec![9u8; 8192]);
    assert_eq!(d.stats().dirty_bytes, 0);
    assert_eq!(
        d.backend().counts().flushes,
        0,
        "no SYNCHRONIZE CACHE without flush"
    );
}

#[tokio::test]
async fn fua_write_in_write_back_mode_reaches_the_target_before_completing() {
    let d = device(
        MemBackend::new(512, 4096),
        DeviceConfig {
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    );
    d.write_at(0, Bytes::from(vec![1u8; 4096])).await.unwrap();
    d.write_at_fua(100, Bytes::from(vec![2u8; 300]))
        .await
        .unwrap();
    let mut want = vec![1u8; 512];
    want[100..400].fill(2);
    assert!(
        d.backend().bytes_at(0, 512) == want,
        "block 0 is on the target"
    );
    assert!(
        d.backend().bytes_at(512, 3584) == vec![0u8; 3584],
        "the rest is not"
    );
    let c = d.backend().counts();
    assert_eq!((c.writes, c.fua_writes), (1, 1), "{c:?}");
    assert_eq!(
        d.stats().dirty_bytes,
        3584,
        "block 0 is clean, the rest dirty"
    );
}

#[tokio::test]
async fn without_a_cache_read_now_sends_a_one_command_read_and_hands_larger_ones_on() {
    let data = pattern(8, 4 << 20);
    let d = device(
        MemBackend::from_data(512, data.clone()),
        cfg(CacheMode::None),
    );
    // Unaligned, inside one command: sent, and the future is its bytes.
    let sent = match d.read_now(1000, 5000) {
        ReadNow::Sent(s) => s,
        other => panic!("not sent: {other:?}"),
    };
    assert_eq!(sent.await.unwrap()[..], data[1000..6000]);
    assert_eq!(d.backend().counts().reads, 1);
    assert_eq!(d.stats().bytes_read, 11 * 512, "whole blocks, counted once");
    // More than one command carries (1 MiB here): handed on, and split.
    match d.read_now(0, (1 << 20) + 512) {
        ReadNow::Wait(w) => assert_eq!(d.read_wait(w).await.unwrap()[..], data[..(1 << 20) + 512]),
        other => panic!("not handed on: {other:?}"),
    }
    assert_eq!(d.backend().counts().reads, 3);
    // A failure is the read's error, with its range.
    d.backend().fail_next(MemOp::Read, 1, errno::EIO);
    let sent = match d.read_now(4096, 512) {
        ReadNow::Sent(s) => s,
        other => panic!("not sent: {other:?}"),
    };
    let e = sent.await.unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::Io {
                offset: 4096,
                len: 512,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.to_errno(), errno::EIO);
}

#[tokio::test]
async fn fua_write_without_cache_sets_fua() {
    let d = device(MemBackend::new(512, 64), cfg(CacheMode::None));
    d.write_at_fua(0, Bytes::from(vec![1u8; 512]))
        .await
        .unwrap();
    assert_eq!(d.backend().counts().fua_writes, 1);
}

#[tokio::test]
async fn failed_write_back_keeps_data_dirty_and_flush_reports_eio() {
    let d = device(
        MemBackend::new(512, 64),
        DeviceConfig {
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    );
    d.write_at(512, Bytes::from(vec![7u8; 1000])).await.unwrap();
    d.backend().fail_next(MemOp::Write, 1, errno::EIO);
    let e = d.flush().await.unwrap_err();
    assert!(matches!(e, DeviceError::Io { op: Op::Flush, .. }));
    assert_eq!(e.to_errno(), errno::EIO);
    assert!(d.stats().dirty_bytes > 0);
    d.flush().await.unwrap();
    assert_eq!(d.backend().bytes_at(512, 1000), vec![7u8; 1000]);
    assert_eq!(d.stats().dirty_bytes, 0);
}

#[tokio::test]
async fn memory_stays_within_the_cap_and_writers_wait_for_the_flusher() {
    let cache_size = 256 * KIB;
    let d = Arc::new(device(
        MemBackend::new(512, (8 << 20) / 512).with_latency(Duration::from_millis(1)),
        DeviceConfig {
            cache_size,
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    ));
    let watcher = {
        let d = d.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            for _ in 0..2000 {
                peak = peak.max(d.stats().cached_bytes);
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            peak
        })
    };
    let data = pattern(6, 4 << 20);
    for (i, chunk) in data.chunks(64 * 1024).enumerate() {
        d.write_at(i as u64 * 64 * 1024, Bytes::copy_from_slice(chunk))
            .await
            .unwrap();
        assert!(d.stats().cached_bytes <= cache_size);
    }
    d.flush().await.unwrap();
    assert!(d.backend().bytes_at(0, 4 << 20) == data);
    assert!(d.read_at(0, 4 << 20).await.unwrap() == data);
    watcher.abort();
    let _ = watcher.await;
    let s = d.stats();
    assert!(s.cached_bytes <= cache_size * 7 / 8, "{s:?}");
    assert!(s.evictions > 0);
}

#[tokio::test]
async fn discard_drops_cached_blocks_and_unmaps_whole_blocks_only() {
    let d = device(
        MemBackend::from_data(512, vec![0xaa; 8192]),
        DeviceConfig {
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    );
    d.read_at(0, 8192).await.unwrap();
    d.write_at(1024, Bytes::from(vec![0xbb; 512]))
        .await
        .unwrap();
    d.discard(700, 2000).await.unwrap(); // whole blocks 2..5
    let log = d.backend().log();
    let unmap = log.iter().find(|c| c.op == MemOp::Unmap).unwrap();
    assert_eq!((unmap.lba, unmap.blocks), (2, 3));
    let got = d.read_at(0, 8192).await.unwrap();
    assert!(
        got[1024..2560].iter().all(|&b| b == 0),
        "discarded blocks read as the target has them"
    );
    assert!(got[..1024].iter().all(|&b| b == 0xaa));
    assert!(got[2560..].iter().all(|&b| b == 0xaa));
    assert_eq!(d.stats().dirty_bytes, 0, "the dirty block was discarded");
}

#[tokio::test]
async fn write_zeroes_zeroes_exactly_the_range_in_cache_and_target() {
    for mode in [
        CacheMode::None,
        CacheMode::WriteThrough,
        CacheMode::WriteBack,
    ] {
        let d = device(MemBackend::from_data(512, vec![0xcc; 8192]), cfg(mode));
        d.read_at(0, 8192).await.unwrap();
        d.write_zeroes(100, 3000).await.unwrap();
        let mut want = vec![0xccu8; 8192];
        want[100..3100].fill(0);
        assert!(d.read_at(0, 8192).await.unwrap() == want, "{mode}");
        d.flush().await.unwrap();
        assert!(d.backend().snapshot() == want, "{mode}");
        assert_eq!(d.backend().counts().write_zeroes, 1, "{mode}");
    }
}

#[tokio::test]
async fn read_ahead_evicted_unread_counts_as_wasted() {
    let d = device(
        MemBackend::new(512, (64 << 20) / 512),
        cfg(CacheMode::WriteThrough),
    );
    for i in 0..256u64 {
        d.read_at(i * 4096, 4096).await.unwrap();
    }
    // Let the last read-ahead land (the memory backend answers at once).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = d.stats();
    assert_eq!(
        before.readahead_wasted, 0,
        "nothing evicted yet: {before:?}"
    );

    d.drop_clean_pages();

    let after = d.stats();
    assert!(
        after.readahead_pages > after.readahead_hits,
        "read-ahead ran past the reads: {after:?}"
    );
    assert_eq!(
        after.readahead_wasted,
        after.readahead_pages - after.readahead_hits,
        "every page read ahead and not read was dropped unread: {after:?}"
    );
}

#[tokio::test]
async fn dirty_age_is_the_age_of_the_oldest_dirty_page() {
    let d = device(
        MemBackend::new(512, 2048),
        DeviceConfig {
            writeback_delay: Duration::from_secs(3600),
            ..cfg(CacheMode::WriteBack)
        },
    );
    assert_eq!(d.stats().dirty_age_ms, 0);
    d.write_at(0, Bytes::from(vec![1u8; 4096])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.write_at(512 * KIB, Bytes::from(vec![2u8; 4096]))
        .await
        .unwrap();

    let s = d.stats();
    assert!(
        s.dirty_age_ms >= 300,
        "the first page's age, not the second's: {s:?}"
    );
    assert_eq!(s.dirty_bytes, 8192);
    d.flush().await.unwrap();
    assert_eq!(d.stats().dirty_age_ms, 0, "nothing dirty after flush");
}
