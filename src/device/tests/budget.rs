//! Devices sharing one cache budget: staying within it together, taking
//! memory from each other, its reserved arena, and the copy counters.

use std::time::Duration;

use bytes::Bytes;

use super::*;

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
