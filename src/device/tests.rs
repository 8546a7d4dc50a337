//! Behaviour tests of `LunDevice` against `MemBackend`, a model-based
//! property test of the cache against a plain `Vec<u8>`, and concurrency
//! tests of overlapping unaligned writers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use rlun_iscsi::scsi::sense::errno;

const KIB: u64 = 1024;

fn cfg(mode: CacheMode) -> DeviceConfig {
    DeviceConfig {
        mode,
        ..DeviceConfig::default()
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

fn device(mem: MemBackend, c: DeviceConfig) -> LunDevice<MemBackend> {
    LunDevice::new(mem, c).expect("valid configuration")
}

// ---- construction and errors ------------------------------------------------

#[test]
fn creating_a_device_outside_a_runtime_fails_with_no_runtime() {
    let r = LunDevice::new(MemBackend::new(512, 64), DeviceConfig::default());
    assert!(matches!(r, Err(DeviceError::NoRuntime)));
}

#[tokio::test]
async fn default_page_size_is_4k_or_the_granularity_up_to_64k() {
    let d = device(MemBackend::new(512, 1024), DeviceConfig::default());
    assert_eq!(d.page_size(), 4096);
    let d = device(MemBackend::new(4096, 1024), DeviceConfig::default());
    assert_eq!(d.page_size(), 4096);
    let d = device(
        MemBackend::new(512, 1024).with_optimal(16 * 1024, 0),
        DeviceConfig::default(),
    );
    assert_eq!(d.page_size(), 16 * 1024);
    let d = device(
        MemBackend::new(512, 1024).with_optimal(1 << 20, 0),
        DeviceConfig::default(),
    );
    assert_eq!(
        d.page_size(),
        4096,
        "a 1 MiB granularity would make pages too big"
    );
}

#[tokio::test]
async fn bad_page_size_and_tiny_cache_are_config_errors() {
    let mut c = DeviceConfig {
        page_size: Some(3000),
        ..DeviceConfig::default()
    };
    let e = LunDevice::new(MemBackend::new(512, 64), c.clone())
        .err()
        .unwrap();
    assert_eq!(e.to_errno(), errno::EINVAL);
    c.page_size = None;
    c.cache_size = 8 * KIB;
    assert!(matches!(
        LunDevice::new(MemBackend::new(512, 64), c),
        Err(DeviceError::Config(_))
    ));
}

#[tokio::test]
async fn writes_to_a_read_only_lun_fail_with_erofs_before_reaching_the_target() {
    for mode in [
        CacheMode::None,
        CacheMode::WriteThrough,
        CacheMode::WriteBack,
    ] {
        let d = device(MemBackend::new(512, 64).read_only(true), cfg(mode));
        let e = d.write_at(100, Bytes::from_static(b"x")).await.unwrap_err();
        assert!(matches!(
            e,
            DeviceError::ReadOnly {
                op: Op::Write,
                offset: 100,
                len: 1
            }
        ));
        assert_eq!(e.to_errno(), errno::EROFS);
        assert_eq!(
            d.discard(0, 4096).await.unwrap_err().to_errno(),
            errno::EROFS
        );
        assert_eq!(
            d.write_zeroes(0, 1).await.unwrap_err().to_errno(),
            errno::EROFS
        );
        assert!(d.read_at(0, 512).await.is_ok(), "reads still work");
        assert_eq!(d.backend().counts().writes, 0);
    }
}

#[tokio::test]
async fn requests_past_the_end_fail_with_einval_and_context() {
    let d = device(MemBackend::new(512, 8), cfg(CacheMode::WriteThrough));
    let e = d.read_at(4000, 100).await.unwrap_err();
    assert_eq!(e.to_errno(), errno::EINVAL);
    assert_eq!(
        e.to_string(),
        "read of 100 bytes at offset 4000 is outside the device (4096 bytes)"
    );
    assert!(d.read_at(u64::MAX, 1).await.is_err());
    assert!(d.read_at(4096, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn backend_errors_keep_their_errno_and_the_next_read_retries() {
    let d = device(MemBackend::new(512, 64), cfg(CacheMode::WriteThrough));
    d.backend().fail_next(MemOp::Read, 1, errno::ENOSPC);
    let e = d.read_at(0, 10).await.unwrap_err();
    assert!(matches!(
        e,
        DeviceError::Io {
            op: Op::Read,
            offset: 0,
            len: 10,
            ..
        }
    ));
    assert_eq!(e.to_errno(), errno::ENOSPC);
    assert_eq!(d.read_at(0, 10).await.unwrap(), vec![0u8; 10]);
}

// ---- splitting and concurrency ---------------------------------------------

#[tokio::test]
async fn a_large_read_is_split_into_commands_that_are_all_in_flight_at_once() {
    let mem = MemBackend::new(512, 4096)
        .with_max_transfer(64 * KIB)
        .with_latency(Duration::from_millis(20));
    let d = device(mem, cfg(CacheMode::None));
    let data = d.read_at(0, 1 << 20).await.unwrap();
    assert_eq!(data.len(), 1 << 20);
    let c = d.backend().counts();
    assert_eq!(c.reads, 16);
    assert_eq!(c.max_in_flight, 16);
}

#[tokio::test]
async fn a_large_write_is_split_into_concurrent_commands() {
    let mem = MemBackend::new(512, 4096)
        .with_max_transfer(128 * KIB)
        .with_latency(Duration::from_millis(20));
    let d = device(mem, cfg(CacheMode::WriteThrough));
    let data = pattern(3, 1 << 20);
    d.write_at(0, Bytes::from(data.clone())).await.unwrap();
    let c = d.backend().counts();
    assert_eq!((c.writes, c.max_in_flight), (8, 8));
    assert!(d.backend().bytes_at(0, 1 << 20) == data);
}

#[tokio::test]
async fn an_unaligned_write_reads_and_rewrites_only_its_edge_blocks() {
    let d = device(
        MemBackend::from_data(512, pattern(1, 8192)),
        cfg(CacheMode::None),
    );
    d.write_at(1000, Bytes::from(vec![0xee; 2000]))
        .await
        .unwrap();
    let log = d.backend().log();
    let reads: Vec<_> = log.iter().filter(|c| c.op == MemOp::Read).collect();
    assert_eq!(reads.len(), 2, "one read per partial edge block: {log:?}");
    let writes: Vec<_> = log.iter().filter(|c| c.op == MemOp::Write).collect();
    assert_eq!((writes[0].lba, writes[0].blocks), (1, 5));
    let mut want = pattern(1, 8192);
    want[1000..3000].fill(0xee);
    assert!(d.backend().snapshot() == want);
}

#[tokio::test]
async fn concurrent_readers_of_a_missing_page_share_one_fetch() {
    let mem =
        MemBackend::from_data(512, pattern(2, 64 * 1024)).with_latency(Duration::from_millis(30));
    let d = Arc::new(device(
        mem,
        DeviceConfig {
            readahead: false,
            ..cfg(CacheMode::WriteThrough)
        },
    ));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let d = d.clone();
            tokio::spawn(async move { d.read_at(8192 + i * 100, 100).await.unwrap() })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let off = 8192 + i * 100;
        assert_eq!(t.await.unwrap(), pattern(2, 64 * 1024)[off..off + 100]);
    }
    assert_eq!(d.backend().counts().reads, 1);
    let s = d.stats();
    assert_eq!(s.hits + s.misses, 16);
}

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
        ReadNow::Done(r) => panic!("a miss completed at once: {r:?}"),
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
            ReadNow::Wait(_) => panic!("a resident page was not a hit"),
        }
    }
    assert_eq!(d.stats().hits, hits + 3, "one hit per page read");
    assert_eq!(d.backend().counts().reads, reads, "hits send no command");
    // Partly resident: handed on, and the whole read is right.
    let w = match d.read_now(60 * KIB, 8192) {
        ReadNow::Wait(w) => w,
        ReadNow::Done(_) => panic!("a read with an absent page completed at once"),
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

// ---- concurrency ---------------------------------------------------------------

/// Writer `w` of `n` owns bytes `w*3..w*3+3` of every `3*n`-byte stripe, so
/// all writers share every block but never a byte.
async fn overlapping_writers(mode: CacheMode, block: u32) {
    const WRITERS: u64 = 12;
    const STRIPE: u64 = 3 * WRITERS;
    let size = 64 * 1024u64;
    let d = Arc::new(device(
        MemBackend::from_data(block, vec![0; size as usize])
            .with_max_transfer(8 * 1024)
            .with_latency(Duration::from_micros(200)),
        DeviceConfig {
            cache_size: 96 * KIB,
            page_size: Some(block.max(1024)),
            writeback_delay: Duration::from_millis(2),
            ..cfg(mode)
        },
    ));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let d = d.clone();
            tokio::spawn(async move {
                let mut stripe = w * 7 % (size / STRIPE);
                for round in 0..60u64 {
                    stripe = (stripe + 13) % (size / STRIPE);
                    let at = stripe * STRIPE + w * 3;
                    let v = (w as u8) << 4 | (round % 16) as u8;
                    d.write_at(at, Bytes::from(vec![v; 3])).await.unwrap();
                    if round % 7 == 0 {
                        let got = d.read_at(at, 3).await.unwrap();
                        assert_eq!(&got[..], &[v; 3], "writer {w} reads its own write");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    d.flush().await.unwrap();
    // Replay every writer's sequence to compute the final owner bytes.
    let mut want = vec![0u8; size as usize];
    for w in 0..WRITERS {
        let mut stripe = w * 7 % (size / STRIPE);
        for round in 0..60u64 {
            stripe = (stripe + 13) % (size / STRIPE);
            let at = (stripe * STRIPE + w * 3) as usize;
            want[at..at + 3].fill((w as u8) << 4 | (round % 16) as u8);
        }
    }
    assert!(
        d.backend().snapshot() == want,
        "{mode}: target lost an update"
    );
    assert!(
        d.read_at(0, size as usize).await.unwrap() == want,
        "{mode}: cache lost an update"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_unaligned_writers_lose_nothing_without_cache() {
    overlapping_writers(CacheMode::None, 512).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_unaligned_writers_lose_nothing_with_write_through() {
    overlapping_writers(CacheMode::WriteThrough, 512).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_unaligned_writers_lose_nothing_with_write_back() {
    overlapping_writers(CacheMode::WriteBack, 512).await;
    overlapping_writers(CacheMode::WriteBack, 4096).await;
}

// ---- model-based property test ---------------------------------------------

#[derive(Debug, Clone)]
enum Act {
    Read(u64, usize),
    Write(u64, usize, u64, bool),
    Discard(u64, u64),
    Zero(u64, u64),
    Flush,
    Evict,
}

const MODEL_SIZE: u64 = 48 * 1024;

fn act() -> impl Strategy<Value = Act> {
    let span = (0..MODEL_SIZE).prop_flat_map(|off| (Just(off), 0..=(MODEL_SIZE - off).min(9000)));
    prop_oneof![
        4 => span.clone().prop_map(|(o, l)| Act::Read(o, l as usize)),
        2 => (0..MODEL_SIZE / 512).prop_flat_map(|b| {
            let off = b * 512;
            (Just(off), 1..=(MODEL_SIZE - off).min(8192) / 512)
        }).prop_map(|(o, n)| Act::Read(o, n as usize * 512)),
        4 => (span.clone(), any::<u64>(), proptest::bool::weighted(0.1))
            .prop_map(|((o, l), s, fua)| Act::Write(o, l as usize, s, fua)),
        2 => ((0..MODEL_SIZE / 512), 1u64..12, any::<u64>()).prop_map(|(b, n, s)| {
            let n = n.min(MODEL_SIZE / 512 - b);
            Act::Write(b * 512, (n * 512) as usize, s, false)
        }),
        1 => span.clone().prop_map(|(o, l)| Act::Discard(o, l)),
        1 => span.prop_map(|(o, l)| Act::Zero(o, l)),
        1 => Just(Act::Flush),
        1 => Just(Act::Evict),
    ]
}

fn run_model(mode: CacheMode, page: u32, cache_size: u64, short_delay: bool, acts: &[Act]) {
    run_model_with(mode, page, cache_size, short_delay, false, acts)
}

/// `bypass`: every sequential read of at least 1 KiB whose pages are not
/// resident bypasses the cache (depth 0), so the model checks that path.
fn run_model_with(
    mode: CacheMode,
    page: u32,
    cache_size: u64,
    short_delay: bool,
    bypass: bool,
    acts: &[Act],
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let initial = pattern(99, MODEL_SIZE as usize);
        let d = device(
            MemBackend::from_data(512, initial.clone()).with_max_transfer(4096),
            DeviceConfig {
                mode,
                cache_size,
                page_size: Some(page),
                readahead_min: 2048,
                readahead_max: 8192,
                bypass_min: if bypass { 1024 } else { 128 * KIB },
                bypass_depth: if bypass { 0 } else { 1 },
                writeback_delay: if short_delay {
                    Duration::from_millis(1)
                } else {
                    Duration::from_secs(3600)
                },
                ..DeviceConfig::default()
            },
        );
        let mut model = initial;
        for (step, a) in acts.iter().enumerate() {
            match a {
                Act::Read(o, l) => {
                    let got = d.read_at(*o, *l).await.unwrap();
                    assert!(
                        got[..] == model[*o as usize..*o as usize + l],
                        "step {step}: {a:?}"
                    );
                }
                Act::Write(o, l, s, fua) => {
                    let data = pattern(*s, *l);
                    if *fua {
                        d.write_at_fua(*o, Bytes::from(data.clone())).await.unwrap();
                        let target = d.backend().bytes_at(*o, *l);
                        assert!(target == data, "step {step}: FUA data on the target");
                    } else {
                        d.write_at(*o, Bytes::from(data.clone())).await.unwrap();
                    }
                    model[*o as usize..*o as usize + l].copy_from_slice(&data);
                }
                Act::Discard(o, l) => {
                    d.discard(*o, *l).await.unwrap();
                    let (b0, b1) = (o.div_ceil(512), (o + l) / 512);
                    if b0 < b1 {
                        model[(b0 * 512) as usize..(b1 * 512) as usize].fill(0);
                    }
                }
                Act::Zero(o, l) => {
                    d.write_zeroes(*o, *l).await.unwrap();
                    model[*o as usize..(*o + *l) as usize].fill(0);
                }
                Act::Flush => {
                    d.flush().await.unwrap();
                    assert!(
                        d.backend().snapshot() == model,
                        "step {step}: target differs after flush"
                    );
                    assert_eq!(d.stats().dirty_bytes, 0);
                }
                Act::Evict => {
                    d.drop_clean_pages();
                }
            }
            let s = d.stats();
            assert!(s.cached_bytes <= cache_size, "step {step}: {s:?}");
            if mode != CacheMode::WriteBack {
                assert_eq!(s.dirty_bytes, 0);
            }
        }
        d.flush().await.unwrap();
        assert!(
            d.backend().snapshot() == model,
            "target differs after the final flush"
        );
        let all = d.read_at(0, MODEL_SIZE as usize).await.unwrap();
        assert!(all == model, "final read differs");
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn model_no_cache(acts in proptest::collection::vec(act(), 1..40)) {
        run_model(CacheMode::None, 1024, 64 * KIB, false, &acts);
    }

    #[test]
    fn model_write_through(
        acts in proptest::collection::vec(act(), 1..40),
        page in prop_oneof![Just(512u32), Just(1024), Just(4096)],
        small in any::<bool>(),
    ) {
        let cache = if small { 12 * page as u64 + 4096 } else { 256 * KIB };
        run_model(CacheMode::WriteThrough, page, cache, false, &acts);
    }

    #[test]
    fn model_write_through_with_bypass(
        acts in proptest::collection::vec(act(), 1..40),
        page in prop_oneof![Just(512u32), Just(4096)],
    ) {
        run_model_with(CacheMode::WriteThrough, page, 256 * KIB, false, true, &acts);
    }

    #[test]
    fn model_write_back_with_bypass(
        acts in proptest::collection::vec(act(), 1..40),
        page in prop_oneof![Just(512u32), Just(4096)],
        short_delay in any::<bool>(),
    ) {
        run_model_with(CacheMode::WriteBack, page, 256 * KIB, short_delay, true, &acts);
    }

    #[test]
    fn model_write_back(
        acts in proptest::collection::vec(act(), 1..40),
        page in prop_oneof![Just(512u32), Just(1024), Just(4096)],
        small in any::<bool>(),
        short_delay in any::<bool>(),
    ) {
        let cache = if small { 12 * page as u64 + 4096 } else { 256 * KIB };
        run_model(CacheMode::WriteBack, page, cache, short_delay, &acts);
    }
}

// ---- the shared budget and its arena ------------------------------------------

/// Page chunks of `d` that lie in `budget`'s reserved arenas, and all pages.
fn pages_in_arena(
    d: &LunDevice<MemBackend>,
    arenas: &[rlun_iscsi::iobuf::Arena],
) -> (usize, usize) {
    let pages = d.inner.cache.present(0, u64::MAX);
    let inside = pages
        .iter()
        .filter(|p| {
            let s = p.lock();
            let (a, n) = (s.buf.as_ptr() as usize, s.buf.len());
            n == d.page_size() as usize
                && a % 4096 == 0
                && arenas
                    .iter()
                    .any(|r| r.addr <= a && a + n <= r.addr + r.len)
        })
        .count();
    (inside, pages.len())
}

#[tokio::test]
async fn devices_sharing_a_budget_stay_within_it_together() {
    let budget = CacheBudget::new(1 << 20);
    let pages_share = budget.inner.pages;
    let devs: Vec<_> = (0..4)
        .map(|i| {
            device(
                MemBackend::from_data(512, pattern(i, 2 << 20)),
                DeviceConfig {
                    budget: Some(budget.clone()),
                    readahead: false,
                    ..cfg(CacheMode::WriteThrough)
                },
            )
        })
        .collect();
    // Each device alone reads twice what the whole budget holds, one after
    // the other (the earlier ones idle meanwhile).
    for (i, d) in devs.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        for k in 0..32u64 {
            let at = k * (64 << 10);
            let got = d.read_at(at, 64 << 10).await.unwrap();
            assert_eq!(got, &pattern(i as u64, 2 << 20)[at as usize..][..64 << 10]);
        }
    }
    let sum: u64 = devs.iter().map(|d| d.stats().cached_bytes).sum();
    assert!(sum <= pages_share, "{sum} > {pages_share}: per-LUN budgets");
    assert_eq!(sum, budget.charged());
    assert!(devs.iter().all(|d| d.stats().cache_size == 1 << 20));
    // The last device took memory from the idle others: they were evicted.
    assert!(devs[0].stats().evictions > 0);
    assert!(
        devs[3].stats().cached_bytes > pages_share / 2,
        "{:?}",
        devs[3].stats()
    );
    // Reserved once, never grown, and every page a chunk of it.
    let reserved = budget.reserved_bytes();
    assert!(reserved >= pages_share && reserved < pages_share + (4 << 20));
    let arenas = budget.inner.arenas();
    for d in &devs {
        let (inside, all) = pages_in_arena(d, &arenas);
        assert_eq!(inside, all, "a page buffer outside the budget's arena");
    }
}

#[tokio::test]
async fn a_device_gets_memory_from_another_devices_clean_pages() {
    let budget = CacheBudget::new(512 << 10);
    let mk = |seed| {
        device(
            MemBackend::from_data(512, pattern(seed, 1 << 20)),
            DeviceConfig {
                budget: Some(budget.clone()),
                readahead: false,
                ..cfg(CacheMode::WriteBack)
            },
        )
    };
    let (a, b) = (mk(1), mk(2));
    // `a` fills the whole budget with clean pages.
    a.read_at(0, 1 << 20).await.unwrap();
    assert!(budget.charged() + 8192 > budget.inner.pages);
    // `b` still gets pages: writes complete in memory (write-back).
    let data = Bytes::from(vec![0x5a; 128 << 10]);
    tokio::time::timeout(Duration::from_secs(10), b.write_at(0, data.clone()))
        .await
        .expect("b is not starved by a's clean pages")
        .unwrap();
    assert_eq!(b.read_at(0, 128 << 10).await.unwrap(), data);
    assert!(b.stats().cached_bytes >= 128 << 10);
    assert!(budget.charged() <= budget.inner.pages);
}

#[tokio::test]
async fn pages_return_to_the_arena_and_exhaustion_evicts_instead_of_allocating() {
    let budget = CacheBudget::new(2 << 20);
    {
        let d = device(
            MemBackend::from_data(4096, pattern(3, 16 << 20)),
            DeviceConfig {
                budget: Some(budget.clone()),
                ..cfg(CacheMode::WriteBack)
            },
        );
        let reserved = budget.reserved_bytes();
        assert!(reserved > 0, "reserved when the device starts");
        for k in 0..16u64 {
            d.write_at(k << 20, Bytes::from(vec![k as u8; 1 << 20]))
                .await
                .unwrap();
            d.read_at(((k * 5) % 16) << 20, 256 << 10).await.unwrap();
        }
        d.flush().await.unwrap();
        assert_eq!(budget.reserved_bytes(), reserved, "the arena never grows");
        assert!(budget.pages_in_use() <= reserved);
        assert!(d.stats().evictions > 0);
        assert!(budget.charged() <= budget.inner.pages);
        d.close().await.unwrap();
    }
    // Let the device's tasks see the drop.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(budget.charged(), 0);
    assert_eq!(budget.pages_in_use(), 0, "every page chunk went back");
}

#[tokio::test]
async fn cache_copies_are_counted_apart_from_network_copies() {
    let d = device(
        MemBackend::from_data(512, pattern(9, 1 << 20)),
        cfg(CacheMode::WriteThrough),
    );
    let before = crate::stats::DataPathStats::now();
    d.read_at(0, 64 << 10).await.unwrap();
    d.read_at(0, 64 << 10).await.unwrap();
    let after = crate::stats::DataPathStats::now().since(&before);
    // The miss: the fill of the pages (64 KiB; its reply is the fetched
    // data itself, not a copy of the pages); the hit: a reply copied out of
    // the pages. Other tests count concurrently: at least ours.
    assert!(after.cache_copied_bytes >= 2 * (64 << 10), "{after:?}");
}
