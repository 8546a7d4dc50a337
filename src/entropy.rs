//! Randomness the protocol core needs, drawn from the OS here and passed in
//! (the `proto` layer reads no randomness, clock or socket itself).

use rlun_iscsi::proto::chap::ChapNonce;

/// A random-type ISID (RFC 7143 §11.12.5): T=10b, then 22 random bits,
/// qualifier 0.
pub fn random_isid() -> [u8; 6] {
    let mut r = [0u8; 3];
    // Without randomness the ISID is still valid, merely less unique.
    let _ = getrandom::fill(&mut r);
    [0x80, r[0], r[1], r[2], 0, 0]
}

/// Our identifier and challenge for mutual CHAP. `None` when the OS has no
/// randomness to give: the login then refuses mutual CHAP rather than send
/// a predictable challenge.
pub fn chap_nonce() -> Option<ChapNonce> {
    let mut id = [0u8; 1];
    let mut challenge = [0u8; 16];
    getrandom::fill(&mut id).ok()?;
    getrandom::fill(&mut challenge).ok()?;
    Some(ChapNonce {
        id: id[0],
        challenge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isids_are_random_type_with_a_zero_qualifier() {
        let isid = random_isid();
        assert_eq!(isid[0], 0x80);
        assert_eq!(&isid[4..], &[0, 0]);
    }

    #[test]
    fn chap_nonces_are_fresh_each_time() {
        let a = chap_nonce().expect("the OS has randomness");
        let b = chap_nonce().expect("the OS has randomness");
        assert_ne!(a.challenge, b.challenge);
    }
}
