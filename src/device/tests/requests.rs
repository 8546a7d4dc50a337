//! Construction and errors, splitting into commands, single flight, and
//! overlapping unaligned writers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use rlun_iscsi::scsi::sense::errno;

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
async fn a_read_of_the_maximum_transfer_is_one_command_and_one_block_more_is_two_in_order() {
    let data = pattern(5, 256 * 1024);
    let d = device(
        MemBackend::from_data(512, data.clone()).with_max_transfer(64 * KIB),
        cfg(CacheMode::None),
    );
    let got = d.read_at(4096, 64 * 1024).await.unwrap();
    assert_eq!(&got[..], &data[4096..4096 + 64 * 1024]);
    assert_eq!(d.backend().counts().reads, 1);
    let got = d.read_at(4096, 64 * 1024 + 512).await.unwrap();
    assert_eq!(&got[..], &data[4096..4096 + 64 * 1024 + 512]);
    assert_eq!(d.backend().counts().reads, 3);
    // Unaligned inside: the blocks under the range, sliced.
    let got = d.read_at(4100, 64 * 1024).await.unwrap();
    assert_eq!(&got[..], &data[4100..4100 + 64 * 1024]);
    assert_eq!(d.backend().counts().reads, 5);
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
