//! Text keys (`proto::text`): the `key=value\0` segments of Login and Text
//! PDUs and the value types read from them.
//!
//! Input: a byte saying into how many PDUs the segment is cut, the cut
//! points, then the segment. Checks that the accumulator (segment split
//! over continued PDUs) agrees with a one-piece parse, that whatever parses
//! encodes and parses back unchanged, and that every value helper either
//! fails cleanly or round-trips.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rlun_iscsi::proto::text::{self, TextAccumulator};
use rlun_fuzz::Input;

fn values(v: &str) {
    if let Ok(n) = text::parse_number(v) {
        assert_eq!(text::parse_number(&n.to_string()), Ok(n));
    }
    if let Ok(b) = text::parse_bool(v) {
        assert_eq!(text::parse_bool(text::bool_value(b)), Ok(b));
    }
    if let Ok(items) = text::parse_list(v) {
        assert_eq!(text::join_list(&items), v);
    }
    match text::decode_binary(v, text::MAX_LARGE_BINARY_LEN) {
        Ok(bytes) => {
            let max = text::MAX_LARGE_BINARY_LEN;
            assert_eq!(
                text::decode_binary(&text::encode_hex(&bytes), max),
                Ok(bytes.clone())
            );
            assert_eq!(
                text::decode_binary(&text::encode_base64(&bytes), max),
                Ok(bytes)
            );
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let pieces = usize::from(input.u8() % 8);
    let mut cuts: Vec<usize> = (0..pieces).map(|_| usize::from(input.u16())).collect();
    let segment = input.rest();
    cuts.iter_mut().for_each(|c| *c %= segment.len() + 1);
    cuts.sort_unstable();

    let whole = text::parse_text(segment);

    let mut acc = TextAccumulator::new();
    let mut at = 0;
    let mut pushed = Ok(());
    for &cut in cuts.iter().chain(std::iter::once(&segment.len())) {
        pushed = acc.push(&segment[at..cut]);
        at = cut;
        if pushed.is_err() {
            break;
        }
    }
    let joined = pushed.and_then(|()| acc.finish());
    match (&whole, &joined) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "accumulated pairs differ from a one-piece parse"),
        (Err(_), Err(_)) => {}
        _ => panic!("accumulator and one-piece parse disagree: {whole:?} vs {joined:?}"),
    }

    match whole {
        Ok(pairs) => {
            let wire = text::encode_text_checked(&pairs).expect("parsed pairs re-encode");
            assert_eq!(text::parse_text(&wire).as_ref(), Ok(&pairs));
            for (_, v) in &pairs {
                values(v);
            }
        }
        Err(e) => {
            let _ = e.to_string();
            if let Ok(s) = std::str::from_utf8(segment) {
                values(s);
            }
        }
    }
});
