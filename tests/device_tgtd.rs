//! `LunDevice` over a real `client::Lun` against a private tgtd: concurrent
//! overlapping readers and writers compared with the backing file,
//! read-ahead on sequential reads, and when write-back data reaches the file.

mod common;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{make_backing_file, pattern_bytes, Tgtd};
use rlun::client::{Lun, Target};
use rlun::device::{CacheBudget, CacheMode, DeviceConfig, LunDevice};
use rlun::session::SessionConfig;

const IQN: &str = "iqn.2026-11.org.example:device";
const MIB: u64 = 1 << 20;
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A tgtd with one file LUN of `size` bytes (pattern `seed`) as LUN 1.
fn tgtd_with_lun(dir: &Path, size: u64, seed: u64, readonly: bool) -> (Tgtd, std::path::PathBuf) {
    let file = make_backing_file(dir, size, seed);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let t = tgtd.add_target(IQN);
    let t = if readonly {
        t.lun_readonly(1, &file, 512)
    } else {
        t.lun_file(1, &file, 512)
    };
    t.create().expect("create target");
    (tgtd, file)
}

/// Run `body` on a two-thread runtime with a deadline.
fn run<F: Future<Output = ()>>(body: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            tokio::time::timeout(TEST_TIMEOUT, body)
                .await
                .expect("test finished in time")
        });
}

async fn open(tgtd: &Tgtd) -> (Target, Lun) {
    let mut cfg = SessionConfig::new(
        "127.0.0.1",
        tgtd.port(),
        "iqn.2026-11.org.example:device-test",
    );
    cfg.target_name = Some(IQN.to_string());
    let target = Target::login(cfg).await.expect("login");
    let lun = target.open_lun(1).await.expect("open LUN 1");
    (target, lun)
}

fn file_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let all = std::fs::read(path).expect("read backing file");
    all[offset as usize..offset as usize + len].to_vec()
}

/// 8 writers own interleaved 5-byte pieces of every 40-byte stripe (so all
/// share every block), 4 readers read overlapping ranges meanwhile; at the
/// end the device, and after flush the backing file, hold every update.
fn overlapping_writers_and_readers(mode: CacheMode) {
    const SIZE: u64 = 2 * MIB;
    const WRITERS: u64 = 8;
    const PIECE: u64 = 5;
    const STRIPE: u64 = PIECE * WRITERS;
    const REGION: u64 = 256 * 1024;
    const ROUNDS: u64 = 150;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, file) = tgtd_with_lun(dir.path(), SIZE, 11, false);
    run(async {
        let (target, lun) = open(&tgtd).await;
        let dev = Arc::new(
            LunDevice::new(
                lun,
                DeviceConfig {
                    mode,
                    cache_size: 4 * MIB,
                    writeback_delay: Duration::from_millis(20),
                    ..DeviceConfig::default()
                },
            )
            .expect("device"),
        );
        let initial = pattern_bytes(11, 0, SIZE as usize);
        let value = |w: u64, round: u64| ((w + 1) << 4 | (round % 15 + 1)) as u8;
        let place =
            |w: u64, round: u64| (round * 7 + w * 3) % (REGION / STRIPE) * STRIPE + w * PIECE;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let dev = dev.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let at = place(w, round);
                    dev.write_at(at, Bytes::from(vec![value(w, round); PIECE as usize]))
                        .await
                        .expect("write");
                }
            }));
        }
        for r in 0..4u64 {
            let dev = dev.clone();
            let initial = initial.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..60u64 {
                    let at = (r * 7919 + i * 4099) % (REGION - 9000);
                    let got = dev.read_at(at, 9000).await.expect("read");
                    for (k, &b) in got.iter().enumerate() {
                        let pos = at + k as u64;
                        let owner = pos % STRIPE / PIECE;
                        assert!(
                            b == initial[pos as usize] || b >> 4 == (owner + 1) as u8,
                            "byte {pos} = {b:#x} is neither the original nor its writer's"
                        );
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let mut want = initial.clone();
        for w in 0..WRITERS {
            for round in 0..ROUNDS {
                let at = place(w, round) as usize;
                want[at..at + PIECE as usize].fill(value(w, round));
            }
        }
        let got = dev.read_at(0, SIZE as usize).await.expect("read all");
        assert!(got == want, "{mode}: the device lost an update");
        dev.flush().await.expect("flush");
        assert!(
            file_bytes(&file, 0, SIZE as usize) == want,
            "{mode}: the backing file lost an update"
        );
        drop(dev);
        let _ = target.logout().await;
    });
}

#[test]
fn overlapping_writers_and_readers_lose_nothing_without_cache() {
    overlapping_writers_and_readers(CacheMode::None);
}

#[test]
fn overlapping_writers_and_readers_lose_nothing_with_write_through() {
    overlapping_writers_and_readers(CacheMode::WriteThrough);
}

#[test]
fn overlapping_writers_and_readers_lose_nothing_with_write_back() {
    overlapping_writers_and_readers(CacheMode::WriteBack);
}

#[test]
fn sequential_reads_are_read_ahead_and_match_the_file() {
    const SIZE: u64 = 16 * MIB;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _file) = tgtd_with_lun(dir.path(), SIZE, 22, false);
    run(async {
        let mut results = Vec::new();
        for readahead in [true, false] {
            let (target, lun) = open(&tgtd).await;
            let dev = LunDevice::new(
                lun,
                DeviceConfig {
                    readahead,
                    ..DeviceConfig::default()
                },
            )
            .expect("device");
            let mut pos = 0;
            while pos < 8 * MIB {
                let got = dev.read_at(pos, 4096).await.expect("read");
                assert!(got[..] == pattern_bytes(22, pos, 4096)[..], "data at {pos}");
                pos += 4096;
            }
            results.push(dev.stats());
            drop(dev);
            let _ = target.logout().await;
        }
        let (with, without) = (results[0], results[1]);
        assert!(with.readahead_pages >= 1900, "{with:?}");
        assert!(with.readahead_hits >= 1900, "{with:?}");
        assert!(with.read_commands < 100, "{with:?}");
        assert_eq!(without.readahead_pages, 0, "{without:?}");
        assert_eq!(without.read_commands, 2048, "{without:?}");
    });
}

#[test]
fn write_back_reaches_the_file_on_flush_and_not_before() {
    const SIZE: u64 = 4 * MIB;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, file) = tgtd_with_lun(dir.path(), SIZE, 33, false);
    run(async {
        let (target, lun) = open(&tgtd).await;
        let dev = LunDevice::new(
            lun,
            DeviceConfig {
                mode: CacheMode::WriteBack,
                writeback_delay: Duration::from_secs(3600),
                ..DeviceConfig::default()
            },
        )
        .expect("device");
        let data: Vec<u8> = (0..MIB as usize).map(|i| (i % 253) as u8).collect();
        for k in 0..256u64 {
            let part = &data[(k * 4096) as usize..((k + 1) * 4096) as usize];
            dev.write_at(MIB + k * 4096, Bytes::copy_from_slice(part))
                .await
                .expect("write");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            file_bytes(&file, MIB, MIB as usize) == pattern_bytes(33, MIB, MIB as usize),
            "with a one-hour delay nothing reaches the file before flush"
        );
        assert_eq!(dev.stats().dirty_bytes, MIB);
        dev.flush().await.expect("flush");
        assert!(
            file_bytes(&file, MIB, MIB as usize) == data,
            "flushed data is in the file"
        );
        let s = dev.stats();
        assert_eq!(s.dirty_bytes, 0);
        assert!(s.writebacks <= 4, "256 neighbouring pages coalesced: {s:?}");

        // A FUA write is in the file when it completes.
        dev.write_at_fua(100, Bytes::from_static(b"forced unit access"))
            .await
            .expect("FUA write");
        assert_eq!(&file_bytes(&file, 100, 18)[..], b"forced unit access");
        drop(dev);
        let _ = target.logout().await;
    });
}

#[test]
fn writes_to_a_read_only_lun_fail_with_erofs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _file) = tgtd_with_lun(dir.path(), MIB, 44, true);
    run(async {
        let (target, lun) = open(&tgtd).await;
        let dev = LunDevice::new(lun, DeviceConfig::default()).expect("device");
        assert!(dev.read_only());
        let e = dev.write_at(0, Bytes::from_static(b"x")).await.unwrap_err();
        assert_eq!(e.to_errno(), 30, "EROFS: {e}");
        assert!(dev.read_at(0, 4096).await.unwrap()[..] == pattern_bytes(44, 0, 4096)[..]);
        drop(dev);
        let _ = target.logout().await;
    });
}

/// Issue #3's fault case at the device layer: a long write-back workload and
/// a long read while tgtd is killed and started again. Every call succeeds
/// (the session reconnects underneath) and the data is exact.
#[test]
fn device_io_survives_tgtd_killed_and_restarted() {
    const SIZE: u64 = 32 * MIB;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, file) = tgtd_with_lun(dir.path(), SIZE, 31, false);
    let tgtd = std::sync::Mutex::new(tgtd);
    let new_data = pattern_bytes(32, 0, SIZE as usize);
    run(async {
        let port = tgtd.lock().unwrap().port();
        let (target, lun) = {
            let mut cfg =
                SessionConfig::new("127.0.0.1", port, "iqn.2026-11.org.example:device-test");
            cfg.target_name = Some(IQN.to_string());
            cfg.nop_interval = Some(Duration::from_secs(1));
            cfg.nop_timeout = Duration::from_secs(2);
            cfg.login_timeout = Duration::from_secs(3);
            let target = Target::login(cfg).await.expect("login");
            let lun = target.open_lun(1).await.expect("open LUN 1");
            (target, lun)
        };
        let dev = Arc::new(
            LunDevice::new(
                lun,
                DeviceConfig {
                    mode: CacheMode::WriteBack,
                    cache_size: 8 * MIB,
                    writeback_delay: Duration::from_millis(50),
                    ..DeviceConfig::default()
                },
            )
            .expect("device"),
        );
        // Writer: 64 KiB writes through write-back, flushed at the end.
        let writer = {
            let dev = dev.clone();
            let data = Bytes::from(new_data.clone());
            tokio::spawn(async move {
                for off in (0..SIZE).step_by(64 * 1024) {
                    let chunk = data.slice(off as usize..(off + 64 * 1024) as usize);
                    dev.write_at(off, chunk)
                        .await
                        .expect("write survives the restart");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                dev.flush().await.expect("flush survives the restart");
            })
        };
        // The fault, in the middle of the writes.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!writer.is_finished(), "writes finished before the fault");
        {
            let mut t = tgtd.lock().unwrap();
            t.kill();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        tgtd.lock().unwrap().restart().expect("restart tgtd");
        writer.await.expect("writer task");
        assert!(
            target.session().reconnects() >= 1,
            "the session reconnected"
        );

        // Read everything back, uncached, across a second restart.
        dev.drop_clean_pages();
        let reader = {
            let dev = dev.clone();
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(SIZE as usize);
                for off in (0..SIZE).step_by(128 * 1024) {
                    out.extend_from_slice(
                        &dev.read_at(off, 128 * 1024).await.expect("read survives"),
                    );
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                out
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!reader.is_finished(), "reads finished before the fault");
        {
            let mut t = tgtd.lock().unwrap();
            t.kill();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        tgtd.lock().unwrap().restart().expect("restart tgtd");
        let read_back = reader.await.expect("reader task");
        assert!(
            read_back == new_data,
            "data read back after the restarts equals what was written"
        );
        let _ = target.logout().await;
    });
    assert!(
        std::fs::read(&file).unwrap() == new_data,
        "backing file holds every write"
    );
}

/// What tgtd (1.0.85) reports in MODE SENSE: DPOFUA set, so durable writes
/// carry FUA there. The other path — no DPOFUA, as LIO's fileio LUNs report
/// without a write cache, which refuse the FUA bit — is WRITE followed by
/// SYNCHRONIZE CACHE of the range; it is forced here on the same tgtd LUN
/// so that both command sequences run against a real target, through the
/// client and through the device's write-back FUA path, and the data lands.
#[test]
fn durable_writes_follow_the_dpofua_bit_tgtd_reports() {
    const SIZE: u64 = 2 * MIB;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, file) = tgtd_with_lun(dir.path(), SIZE, 55, false);
    run(async {
        let (target, mut lun) = open(&tgtd).await;
        let ms = lun.mode_sense().await.expect("MODE SENSE");
        assert!(ms.dpofua, "tgtd reports DPOFUA: {ms:?}");
        assert!(lun.dpofua(), "the LUN keeps what MODE SENSE said");
        lun.write(8, Bytes::from(vec![0xa5; 4096]), true)
            .await
            .expect("WRITE with FUA");
        assert!(file_bytes(&file, 8 * 512, 4096) == vec![0xa5; 4096]);

        lun.assume_no_dpofua();
        assert!(!lun.dpofua());
        lun.write(64, Bytes::from(vec![0x5a; 8192]), true)
            .await
            .expect("WRITE + SYNCHRONIZE CACHE of the range");
        assert!(file_bytes(&file, 64 * 512, 8192) == vec![0x5a; 8192]);
        // The device's FUA path (write-back mode) goes through the same call.
        let dev = LunDevice::new(
            lun,
            DeviceConfig {
                mode: CacheMode::WriteBack,
                writeback_delay: Duration::from_secs(3600),
                ..DeviceConfig::default()
            },
        )
        .expect("device");
        dev.write_at_fua(MIB + 100, Bytes::from_static(b"synchronized range"))
            .await
            .expect("device FUA write without DPOFUA");
        assert_eq!(&file_bytes(&file, MIB + 100, 18)[..], b"synchronized range");
        assert_eq!(
            dev.stats().dirty_bytes,
            0,
            "the FUA write left nothing dirty"
        );
        drop(dev);
        let _ = target.logout().await;
    });
}

/// Four LUNs of one target behind one 4 MiB budget (as `rlun mount` and
/// `rlun serve` open them): every LUN read whole, 8 times the budget in
/// all, through write-through and write-back caches; the data matches the
/// files and the cache's memory stays within the one budget, not four.
#[test]
fn luns_of_one_process_share_one_cache_budget() {
    const SIZE: u64 = 8 * MIB;
    const LUNS: u32 = 4;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let mut t = tgtd.add_target(IQN);
    for n in 1..=LUNS {
        let sub = dir.path().join(format!("lun{n}"));
        std::fs::create_dir(&sub).expect("mkdir");
        let file = make_backing_file(&sub, SIZE, 100 + n as u64);
        t = t.lun_file(n, &file, 512);
    }
    t.create().expect("create target");
    run(async {
        let (target, _) = open(&tgtd).await;
        let budget = CacheBudget::new(4 * MIB);
        let mut devs = Vec::new();
        for n in 1..=LUNS {
            let lun = target.open_lun(n as u64).await.expect("open LUN");
            let mode = if n % 2 == 0 {
                CacheMode::WriteBack
            } else {
                CacheMode::WriteThrough
            };
            let cfg = DeviceConfig {
                mode,
                cache_size: 4 * MIB,
                budget: Some(budget.clone()),
                ..DeviceConfig::default()
            };
            devs.push(Arc::new(LunDevice::new(lun, cfg).expect("device")));
        }
        let reserved = budget.reserved_bytes();
        assert!(
            reserved > 0 && reserved <= 4 * MIB,
            "reserved {reserved} bytes once for all LUNs"
        );
        let mut peak = 0;
        let mut tasks = Vec::new();
        for (i, dev) in devs.iter().enumerate() {
            let dev = dev.clone();
            let seed = 101 + i as u64;
            tasks.push(tokio::spawn(async move {
                let mut pos = 0;
                while pos < SIZE {
                    let got = dev.read_at(pos, 128 << 10).await.expect("read");
                    assert!(
                        got[..] == pattern_bytes(seed, pos, 128 << 10)[..],
                        "LUN {} data at {pos}",
                        i + 1
                    );
                    pos += 128 << 10;
                }
            }));
        }
        for t in tasks {
            while !t.is_finished() {
                peak = peak.max(budget.charged());
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            t.await.expect("reader");
        }
        let sum: u64 = devs.iter().map(|d| d.stats().cached_bytes).sum();
        assert!(peak <= 4 * MIB && sum <= 4 * MIB, "peak {peak}, now {sum}");
        assert!(sum > MIB, "the LUNs used the budget: {sum}");
        assert_eq!(budget.reserved_bytes(), reserved, "never grown");
        let evicted: u64 = devs.iter().map(|d| d.stats().evictions).sum();
        assert!(evicted > 0);
        for d in devs {
            Arc::try_unwrap(d)
                .ok()
                .expect("only owner")
                .close()
                .await
                .expect("close");
        }
        let _ = target.logout().await;
    });
}

/// `LunQueue` (batched completions) with 16 commands in flight from one
/// task: every write and every read completes exactly once under its tag,
/// and the data read back is what was written, block by block.
#[test]
fn lun_queue_completes_every_command_exactly_once_with_its_data() {
    const SIZE: u64 = 4 * MIB;
    const BLOCKS: u64 = 256;
    const QD: u64 = 16;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, file) = tgtd_with_lun(dir.path(), SIZE, 11, false);
    run(async {
        let (target, lun) = open(&tgtd).await;
        let bs = lun.block_size() as u64;
        // Block i gets the pattern of seed 77 at its offset.
        let block = |i: u64| Bytes::from(pattern_bytes(77, i * bs, bs as usize));
        let mut q = lun.queue();
        let mut seen = vec![0u32; BLOCKS as usize];
        let mut next = 0u64;
        let mut out = Vec::new();
        // Writes: tag = block number.
        while next < QD {
            q.write(next, block(next), next).expect("submit write");
            next += 1;
        }
        while q.in_flight() > 0 {
            q.completions(&mut out).await;
            assert!(!out.is_empty(), "completions returned with nothing");
            for (tag, r) in out.drain(..) {
                let data = r.unwrap_or_else(|e| panic!("write {tag}: {e}"));
                assert!(data.is_empty());
                seen[tag as usize] += 1;
                if next < BLOCKS {
                    q.write(next, block(next), next).expect("submit write");
                    next += 1;
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "each write once: {seen:?}");
        // Reads, in reverse order, tag = block number + 1000.
        let mut seen = vec![0u32; BLOCKS as usize];
        let mut left: Vec<u64> = (0..BLOCKS).collect();
        for _ in 0..QD {
            let b = left.pop().expect("block");
            q.read(b, 1, b + 1000).expect("submit read");
        }
        while q.in_flight() > 0 {
            q.completions(&mut out).await;
            for (tag, r) in out.drain(..) {
                let b = tag - 1000;
                let data = r.unwrap_or_else(|e| panic!("read {b}: {e}"));
                assert_eq!(data, block(b), "block {b} reads back as written");
                seen[b as usize] += 1;
                if let Some(b) = left.pop() {
                    q.read(b, 1, b + 1000).expect("submit read");
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "each read once: {seen:?}");
        // Nothing in flight: returns at once.
        q.completions(&mut out).await;
        assert!(out.is_empty());
        // A read past the end is refused at submission.
        assert!(q.read(lun.blocks(), 1, 0).is_err());
        target.logout().await.expect("logout");
    });
    let on_disk = std::fs::read(&file).expect("read backing file");
    let bs = 512usize;
    for i in 0..BLOCKS as usize {
        assert_eq!(
            on_disk[i * bs..(i + 1) * bs],
            pattern_bytes(77, (i * bs) as u64, bs)[..],
            "block {i} on disk"
        );
    }
}

/// A queue whose commands can no longer reach a session (it logged out)
/// completes each of them once, as closed; a queue dropped with commands
/// in flight leaves the session working.
#[test]
fn lun_queue_commands_fail_as_closed_after_logout_and_a_dropped_queue_harms_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _file) = tgtd_with_lun(dir.path(), 4 * MIB, 12, false);
    run(async {
        let (target, lun) = open(&tgtd).await;
        // Dropped with 32 reads in flight.
        let mut q = lun.queue();
        for i in 0..32 {
            q.read(i * 8, 8, i).expect("submit");
        }
        drop(q);
        let data = lun.read(0, 8).await.expect("the session still reads");
        assert_eq!(data.len(), 4096);

        let mut q = lun.queue();
        target.logout().await.expect("logout");
        // The driver is gone (or going): each command completes once, closed.
        for i in 0..4 {
            q.read(i, 1, i).expect("submit");
        }
        let mut out = Vec::new();
        while q.in_flight() > 0 {
            q.completions(&mut out).await;
        }
        let mut tags: Vec<u64> = out
            .iter()
            .map(|(tag, r)| {
                match r {
                    Err(rlun::client::ClientError::Session(e)) => {
                        assert!(e.is_connection_lost(), "{tag}: {e}")
                    }
                    other => panic!("{tag}: expected a closed session, got {other:?}"),
                }
                *tag
            })
            .collect();
        tags.sort();
        assert_eq!(tags, vec![0, 1, 2, 3]);
    });
}
