//! The model-based property test: random reads, writes, flushes,
//! discards and zeroing against a plain `Vec<u8>`, in every cache mode.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

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
