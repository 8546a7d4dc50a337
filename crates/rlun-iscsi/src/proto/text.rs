//! iSCSI text keys: the `key=value\0` data segments of Login and Text
//! PDUs (RFC 7143 §6.1, value types in §6.1 and §13).
//!
//! - [`parse_text`] splits one logical text data segment into ordered
//!   `(key, value)` pairs, checking the RFC limits;
//! - [`TextAccumulator`] joins the data segments of a PDU sequence sent with
//!   the C (continue) bit, where one pair may be split across PDUs
//!   (RFC 7143 §6.1 and the C bit of Text/Login PDUs, §11.10–§11.13), and
//!   parses as it goes;
//! - [`encode_text`] / [`encode_text_checked`] build a data segment;
//! - value helpers read and write the value types of §6.1: numbers
//!   ([`parse_number`]), booleans ([`parse_bool`]), lists ([`parse_list`]),
//!   binary values in `0x` hex or `0b` base64 ([`decode_binary`],
//!   [`encode_hex`], [`encode_base64`]).
//!
//! Decisions:
//!
//! - **Missing final NUL is tolerated.** RFC 7143 §6.1 says every pair,
//!   the last one included, is followed by a NUL; a last pair without it is
//!   still accepted, since it cannot be mistaken for anything else.
//! - **Empty entries are skipped.** Runs of NULs (some peers count their
//!   zero padding into the data segment length) produce no pairs.
//! - **Key names**: 1 to [`MAX_KEY_LEN`] bytes of letters, digits and
//!   `. - + @ _ #`, starting with a letter (the RFC's "standard-label",
//!   relaxed to allow `iSCSIProtocolLevel`'s lower-case start and `#` for
//!   `X#` public extension keys). Anything else is an error.
//! - **Values**: valid UTF-8 (aliases are UTF-8 text), no control
//!   characters, at most [`MAX_ENCODED_VALUE_LEN`] bytes as encoded. That
//!   bound fits the longest standard value, a 1024-byte CHAP binary value in
//!   hex; the tighter 255-byte limit for simple values (§6.1) depends on the
//!   key's type and is checked by the value helpers and the negotiator.
//! - Duplicate keys are returned as they come: whether a repeat is legal
//!   (`TargetAddress` in a SendTargets response) or a renegotiation error
//!   is for the caller to decide.

use thiserror::Error;

/// Longest key name in bytes (RFC 7143 §6.1, "standard-label").
pub const MAX_KEY_LEN: usize = 63;
/// Longest simple value, not counting its delimiter (RFC 7143 §6.1).
pub const MAX_VALUE_LEN: usize = 255;
/// Longest large binary value in bytes, decoded: CHAP_C and CHAP_R
/// (RFC 7143 §12.1.3).
pub const MAX_LARGE_BINARY_LEN: usize = 1024;
/// Longest value the parser accepts, as encoded on the wire: a
/// [`MAX_LARGE_BINARY_LEN`]-byte value in hex with its `0x` prefix.
pub const MAX_ENCODED_VALUE_LEN: usize = 2 + 2 * MAX_LARGE_BINARY_LEN;
/// Default cap on one logical text data segment collected by
/// [`TextAccumulator`]. RFC 7143 §6.1 requires accepting at least 8192
/// bytes (64 KiB with long authentication items); a SendTargets answer from
/// a large array can be bigger, so the default leaves room for that.
pub const DEFAULT_MAX_TEXT_LEN: usize = 1 << 20;

/// Errors from reading or writing text keys and values.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TextError {
    #[error("text pair at byte {offset} has no '=' between key and value")]
    MissingEquals { offset: usize },
    #[error("text pair at byte {offset} has an empty key")]
    EmptyKey { offset: usize },
    #[error("text key at byte {offset} is {len} bytes long, over the {MAX_KEY_LEN}-byte limit")]
    KeyTooLong { offset: usize, len: usize },
    #[error("text key {key:?} contains the illegal byte {byte:#04x}")]
    IllegalKeyChar { key: String, byte: u8 },
    #[error("value of text key {key:?} is not valid UTF-8")]
    ValueNotUtf8 { key: String },
    #[error("value of text key {key:?} contains the control character {byte:#04x}")]
    IllegalValueChar { key: String, byte: u8 },
    #[error("value of text key {key:?} is {len} bytes long, over the {max}-byte limit")]
    ValueTooLong { key: String, len: usize, max: usize },
    #[error("text data is longer than the {limit}-byte limit")]
    TooLong { limit: usize },
    #[error("{value:?} is not a number (decimal, or hex with 0x) below 2^64")]
    BadNumber { value: String },
    #[error("{value:?} is not a boolean (Yes or No)")]
    BadBoolean { value: String },
    #[error("list {value:?} has an empty element or one over {MAX_VALUE_LEN} bytes")]
    BadList { value: String },
    #[error("{value:?} is not a binary value (0x hex or 0b base64): {reason}")]
    BadBinary { value: String, reason: &'static str },
    #[error("binary value is {len} bytes long, over the {max}-byte limit")]
    BinaryTooLong { len: usize, max: usize },
}

/// Parses one complete logical text data segment (RFC 7143 §6.1) into its
/// pairs, in order. See the module doc for what is accepted.
pub fn parse_text(data: &[u8]) -> Result<Vec<(String, String)>, TextError> {
    let mut pairs = Vec::new();
    let mut offset = 0;
    for entry in data.split(|&b| b == 0) {
        if !entry.is_empty() {
            pairs.push(parse_pair(entry, offset)?);
        }
        offset += entry.len() + 1;
    }
    Ok(pairs)
}

/// Encodes pairs as `key=value\0…` (every pair NUL-terminated, RFC 7143
/// §6.1). Does not validate: use it for keys and values this crate built
/// itself, and [`encode_text_checked`] for anything that came from outside
/// (configuration, a peer).
pub fn encode_text<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Vec<u8> {
    let len = pairs
        .iter()
        .map(|(k, v)| k.as_ref().len() + v.as_ref().len() + 2)
        .sum();
    let mut out = Vec::with_capacity(len);
    for (k, v) in pairs {
        out.extend_from_slice(k.as_ref().as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_ref().as_bytes());
        out.push(0);
    }
    out
}

/// Like [`encode_text`], but first checks every pair against the same rules
/// [`parse_text`] applies, so the peer can parse what we send.
pub fn encode_text_checked<K: AsRef<str>, V: AsRef<str>>(
    pairs: &[(K, V)],
) -> Result<Vec<u8>, TextError> {
    let mut offset = 0;
    for (k, v) in pairs {
        let (k, v) = (k.as_ref(), v.as_ref());
        check_key(k.as_bytes(), offset)?;
        check_value(k, v.as_bytes())?;
        offset += k.len() + v.len() + 2;
    }
    Ok(encode_text(pairs))
}

/// Collects the data segments of a Login/Text response sequence sent with
/// the C bit (RFC 7143 §6.1: together they form one logical text data
/// segment). A pair may be split anywhere, even inside its key.
///
/// Complete pairs are parsed as they arrive, so an invalid pair is reported
/// by the [`push`](Self::push) that completes it. Usage:
///
/// ```
/// use rlun_iscsi::proto::text::TextAccumulator;
/// let mut acc = TextAccumulator::new();
/// acc.push(b"TargetAlias=st").unwrap();        // PDU 1, C=1
/// acc.push(b"ore\0MaxBurstLength=").unwrap();  // PDU 2, C=1
/// acc.push(b"262144\0").unwrap();              // PDU 3, C=0
/// let pairs = acc.finish().unwrap();
/// assert_eq!(pairs[0], ("TargetAlias".into(), "store".into()));
/// assert_eq!(pairs[1], ("MaxBurstLength".into(), "262144".into()));
/// ```
#[derive(Debug, Clone)]
pub struct TextAccumulator {
    pairs: Vec<(String, String)>,
    /// Bytes of the pair not yet terminated by a NUL.
    partial: Vec<u8>,
    /// Bytes pushed so far.
    total: usize,
    limit: usize,
}

impl Default for TextAccumulator {
    fn default() -> Self {
        Self::new()
    }
}

impl TextAccumulator {
    /// An empty accumulator with the [`DEFAULT_MAX_TEXT_LEN`] cap.
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_MAX_TEXT_LEN)
    }

    /// An empty accumulator that refuses more than `limit` bytes in total.
    pub fn with_limit(limit: usize) -> Self {
        TextAccumulator {
            pairs: Vec::new(),
            partial: Vec::new(),
            total: 0,
            limit,
        }
    }

    /// Adds the data segment of the next PDU. Fails if the total goes over
    /// the limit or a pair completed by this data is invalid; after an error
    /// the accumulator should be dropped (the login or text exchange failed).
    pub fn push(&mut self, data: &[u8]) -> Result<(), TextError> {
        let new_total = self.total.saturating_add(data.len());
        if new_total > self.limit {
            return Err(TextError::TooLong { limit: self.limit });
        }
        let mut rest = data;
        let mut pos = self.total; // absolute offset of rest[0]
        while let Some(nul) = rest.iter().position(|&b| b == 0) {
            self.partial.extend_from_slice(&rest[..nul]);
            if !self.partial.is_empty() {
                let start = pos + nul - self.partial.len();
                let pair = parse_pair(&self.partial, start)?;
                self.pairs.push(pair);
                self.partial.clear();
            }
            rest = &rest[nul + 1..];
            pos += nul + 1;
        }
        self.partial.extend_from_slice(rest);
        self.total = new_total;
        // A pending pair longer than any valid pair can already be refused.
        if self.partial.len() > MAX_KEY_LEN + 1 + MAX_ENCODED_VALUE_LEN {
            let start = self.total - self.partial.len();
            return Err(parse_pair(&self.partial, start)
                .err()
                .unwrap_or(TextError::TooLong { limit: self.limit }));
        }
        Ok(())
    }

    /// Bytes pushed so far.
    pub fn len(&self) -> usize {
        self.total
    }

    /// True if nothing was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Ends the sequence (the PDU with C=0 was pushed) and returns all pairs
    /// in order. A last pair without its NUL is accepted (module doc).
    pub fn finish(mut self) -> Result<Vec<(String, String)>, TextError> {
        if !self.partial.is_empty() {
            let start = self.total - self.partial.len();
            let pair = parse_pair(&self.partial, start)?;
            self.pairs.push(pair);
        }
        Ok(self.pairs)
    }
}

/// Parses a number: a decimal-constant or a hex-constant (`0x`/`0X`)
/// below 2^64 (RFC 7143 §6.1 "numerical-value"). Leading zeros are accepted.
pub fn parse_number(value: &str) -> Result<u64, TextError> {
    let bad = || TextError::BadNumber {
        value: excerpt(value),
    };
    let (digits, radix) = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => (hex, 16),
        None => (value, 10),
    };
    // from_str_radix would also take a leading '+'; the RFC grammar does not.
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return Err(bad());
    }
    u64::from_str_radix(digits, radix).map_err(|_| bad())
}

/// Parses a boolean-value: exactly `Yes` or `No` (RFC 7143 §6.1; values
/// are case-sensitive).
pub fn parse_bool(value: &str) -> Result<bool, TextError> {
    match value {
        "Yes" => Ok(true),
        "No" => Ok(false),
        _ => Err(TextError::BadBoolean {
            value: excerpt(value),
        }),
    }
}

/// The boolean-value for `b`: `Yes` or `No`.
pub const fn bool_value(b: bool) -> &'static str {
    if b {
        "Yes"
    } else {
        "No"
    }
}

/// Splits a list-of-values at commas (RFC 7143 §6.1). Every element must be
/// non-empty and at most [`MAX_VALUE_LEN`] bytes.
pub fn parse_list(value: &str) -> Result<Vec<&str>, TextError> {
    let items: Vec<&str> = value.split(',').collect();
    if items
        .iter()
        .any(|i| i.is_empty() || i.len() > MAX_VALUE_LEN)
    {
        return Err(TextError::BadList {
            value: excerpt(value),
        });
    }
    Ok(items)
}

/// Joins values into a list-of-values.
pub fn join_list<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.as_ref());
    }
    out
}

/// Decodes a binary value given as a hex-constant (`0x`/`0X`) or a
/// base64-constant (`0b`/`0B`, RFC 4648 alphabet, padding optional),
/// RFC 7143 §6.1. An odd number of hex digits has an implied leading zero
/// nibble (`0x123` is `[0x01, 0x23]`). Decimal constants, which the RFC
/// also allows for binary values of at most 64 bits, are not accepted:
/// every binary key this crate reads (CHAP_C, CHAP_R) is a large binary
/// value, for which only hex and base64 are defined. `max_len` bounds the
/// decoded length.
pub fn decode_binary(value: &str, max_len: usize) -> Result<Vec<u8>, TextError> {
    let bad = |reason| TextError::BadBinary {
        value: excerpt(value),
        reason,
    };
    let (prefix, body) = match value.get(..2) {
        Some(p) => (p, &value[2..]),
        None => return Err(bad("missing 0x or 0b prefix")),
    };
    let bytes = match prefix {
        "0x" | "0X" => decode_hex(body).ok_or_else(|| bad("invalid hex digits"))?,
        "0b" | "0B" => decode_base64(body).map_err(bad)?,
        _ => return Err(bad("missing 0x or 0b prefix")),
    };
    if bytes.len() > max_len {
        return Err(TextError::BinaryTooLong {
            len: bytes.len(),
            max: max_len,
        });
    }
    Ok(bytes)
}

/// Encodes bytes as a hex-constant: `0x` followed by two lower-case digits
/// per byte.
pub fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 + 2 * bytes.len());
    out.push_str("0x");
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

/// Encodes bytes as a base64-constant: `0b` followed by RFC 4648 base64 with
/// `=` padding.
pub fn encode_base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len().div_ceil(3) * 4);
    out.push_str("0b");
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextets = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, s) in sextets.iter().enumerate() {
            if i <= chunk.len() {
                out.push(BASE64_ALPHABET[*s as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_digit(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

fn decode_base64(body: &str) -> Result<Vec<u8>, &'static str> {
    let bytes = body.as_bytes();
    let data = bytes
        .strip_suffix(b"==")
        .or_else(|| bytes.strip_suffix(b"="))
        .unwrap_or(bytes);
    let padded = data.len() != bytes.len();
    if data.is_empty() {
        return Err("no base64 digits");
    }
    if data.len() % 4 == 1 {
        return Err("base64 length leaves a lone digit");
    }
    if padded && !bytes.len().is_multiple_of(4) {
        return Err("base64 padding does not complete a group");
    }
    let mut out = Vec::with_capacity(data.len() / 4 * 3 + 2);
    for group in data.chunks(4) {
        let mut n: u32 = 0;
        for &c in group {
            n = (n << 6) | base64_digit(c).ok_or("invalid base64 digit")?;
        }
        // Left-align a short final group to 24 bits.
        n <<= 6 * (4 - group.len() as u32);
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..group.len() - 1]);
    }
    Ok(out)
}

fn decode_hex(body: &str) -> Option<Vec<u8>> {
    let digits = body.as_bytes();
    if digits.is_empty() {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(digits.len().div_ceil(2));
    let (head, rest) = if digits.len() % 2 == 1 {
        (Some(digits[0]), &digits[1..])
    } else {
        (None, digits)
    };
    if let Some(h) = head {
        out.push(nibble(h)?);
    }
    for pair in rest.chunks_exact(2) {
        out.push((nibble(pair[0])? << 4) | nibble(pair[1])?);
    }
    Some(out)
}

fn parse_pair(entry: &[u8], offset: usize) -> Result<(String, String), TextError> {
    let eq = entry
        .iter()
        .position(|&b| b == b'=')
        .ok_or(TextError::MissingEquals { offset })?;
    let (key, value) = (&entry[..eq], &entry[eq + 1..]);
    check_key(key, offset)?;
    // check_key accepted only ASCII.
    let key = String::from_utf8_lossy(key).into_owned();
    check_value(&key, value)?;
    let value = String::from_utf8(value.to_vec())
        .map_err(|_| TextError::ValueNotUtf8 { key: key.clone() })?;
    Ok((key, value))
}

fn check_key(key: &[u8], offset: usize) -> Result<(), TextError> {
    if key.is_empty() {
        return Err(TextError::EmptyKey { offset });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(TextError::KeyTooLong {
            offset,
            len: key.len(),
        });
    }
    let legal =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'@' | b'_' | b'#');
    let bad = key
        .iter()
        .enumerate()
        .find(|&(i, &b)| !legal(b) || (i == 0 && !b.is_ascii_alphabetic()));
    if let Some((_, &byte)) = bad {
        return Err(TextError::IllegalKeyChar {
            key: excerpt(&String::from_utf8_lossy(key)),
            byte,
        });
    }
    Ok(())
}

fn check_value(key: &str, value: &[u8]) -> Result<(), TextError> {
    if value.len() > MAX_ENCODED_VALUE_LEN {
        return Err(TextError::ValueTooLong {
            key: key.to_owned(),
            len: value.len(),
            max: MAX_ENCODED_VALUE_LEN,
        });
    }
    if std::str::from_utf8(value).is_err() {
        return Err(TextError::ValueNotUtf8 {
            key: key.to_owned(),
        });
    }
    if let Some(&byte) = value.iter().find(|&&b| b < 0x20 || b == 0x7f) {
        return Err(TextError::IllegalValueChar {
            key: key.to_owned(),
            byte,
        });
    }
    Ok(())
}

/// At most 64 characters of `s`, for error messages.
pub(crate) fn excerpt(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn login_response_segment_parses_in_order() {
        // Arrange: a tgtd-style operational-stage login response.
        let data = b"TargetPortalGroupTag=1\0HeaderDigest=None\0MaxBurstLength=262144\0";
        // Act
        let parsed = parse_text(data).unwrap();
        // Assert
        assert_eq!(
            parsed,
            pairs(&[
                ("TargetPortalGroupTag", "1"),
                ("HeaderDigest", "None"),
                ("MaxBurstLength", "262144"),
            ])
        );
    }

    #[test]
    fn missing_final_nul_is_tolerated() {
        let parsed = parse_text(b"A=1\0B=2").unwrap();
        assert_eq!(parsed, pairs(&[("A", "1"), ("B", "2")]));
    }

    #[test]
    fn empty_entries_and_trailing_nuls_are_skipped() {
        let parsed = parse_text(b"\0A=1\0\0\0B=2\0\0\0").unwrap();
        assert_eq!(parsed, pairs(&[("A", "1"), ("B", "2")]));
        assert_eq!(parse_text(b"").unwrap(), vec![]);
    }

    #[test]
    fn value_may_contain_equals_and_be_empty() {
        // The key ends at the first '='; the value is everything after it.
        let parsed = parse_text(b"CHAP_C=0bAAA=\0InitiatorAlias=\0").unwrap();
        assert_eq!(
            parsed,
            pairs(&[("CHAP_C", "0bAAA="), ("InitiatorAlias", "")])
        );
    }

    #[test]
    fn utf8_alias_is_accepted() {
        let parsed = parse_text("TargetAlias=Speicher Süd\0".as_bytes()).unwrap();
        assert_eq!(parsed[0].1, "Speicher Süd");
    }

    #[test]
    fn pair_without_equals_is_rejected_with_its_offset() {
        let err = parse_text(b"A=1\0garbage\0").unwrap_err();
        assert_eq!(err, TextError::MissingEquals { offset: 4 });
    }

    #[test]
    fn key_over_63_bytes_is_rejected() {
        let key = "K".repeat(64);
        let data = format!("{key}=1\0");
        let err = parse_text(data.as_bytes()).unwrap_err();
        assert_eq!(err, TextError::KeyTooLong { offset: 0, len: 64 });
        // 63 bytes is fine.
        let ok = format!("{}=1\0", "K".repeat(63));
        assert!(parse_text(ok.as_bytes()).is_ok());
    }

    #[test]
    fn key_with_illegal_characters_is_rejected() {
        assert_eq!(
            parse_text(b"=1\0").unwrap_err(),
            TextError::EmptyKey { offset: 0 }
        );
        assert!(matches!(
            parse_text(b"Bad Key=1\0").unwrap_err(),
            TextError::IllegalKeyChar { byte: b' ', .. }
        ));
        assert!(matches!(
            parse_text(b"1Key=1\0").unwrap_err(),
            TextError::IllegalKeyChar { byte: b'1', .. }
        ));
        assert!(matches!(
            parse_text(b"K\xffey=1\0").unwrap_err(),
            TextError::IllegalKeyChar { byte: 0xff, .. }
        ));
        // Extension and RFC 7144 keys are legal names.
        assert!(parse_text(b"X-com.example.Foo=1\0X#Bar=2\0iSCSIProtocolLevel=1\0").is_ok());
    }

    #[test]
    fn value_that_is_not_utf8_or_has_control_chars_is_rejected() {
        assert_eq!(
            parse_text(b"TargetAlias=\xc3\x28\0").unwrap_err(),
            TextError::ValueNotUtf8 {
                key: "TargetAlias".into()
            }
        );
        assert_eq!(
            parse_text(b"TargetAlias=a\tb\0").unwrap_err(),
            TextError::IllegalValueChar {
                key: "TargetAlias".into(),
                byte: b'\t'
            }
        );
    }

    #[test]
    fn value_over_encoded_limit_is_rejected() {
        // Arrange: the longest hex CHAP_C (1024 bytes) is fine, one more digit is not.
        let ok = format!("CHAP_C=0x{}\0", "ab".repeat(1024));
        let too_long = format!("CHAP_C=0x{}0\0", "ab".repeat(1024));
        // Act / Assert
        assert!(parse_text(ok.as_bytes()).is_ok());
        assert_eq!(
            parse_text(too_long.as_bytes()).unwrap_err(),
            TextError::ValueTooLong {
                key: "CHAP_C".into(),
                len: MAX_ENCODED_VALUE_LEN + 1,
                max: MAX_ENCODED_VALUE_LEN
            }
        );
    }

    #[test]
    fn encode_terminates_every_pair_with_nul() {
        let data = encode_text(&[
            ("InitiatorName", "iqn.2026-11.org.example:init"),
            ("SessionType", "Normal"),
        ]);
        assert_eq!(
            data,
            b"InitiatorName=iqn.2026-11.org.example:init\0SessionType=Normal\0".to_vec()
        );
        assert_eq!(encode_text::<&str, &str>(&[]), Vec::<u8>::new());
    }

    #[test]
    fn checked_encode_refuses_what_the_peer_could_not_parse() {
        assert!(encode_text_checked(&[("InitiatorAlias", "a\0b")]).is_err());
        assert!(encode_text_checked(&[("Bad=Key", "x")]).is_err());
        assert_eq!(
            encode_text_checked(&[("A", "b")]).unwrap(),
            b"A=b\0".to_vec()
        );
    }

    #[test]
    fn accumulator_joins_pair_split_inside_key_and_value() {
        // Arrange: "MaxBurstLength=262144" split in the key, then in the value.
        let mut acc = TextAccumulator::new();
        // Act
        acc.push(b"HeaderDigest=None\0MaxBur").unwrap();
        acc.push(b"stLength=26").unwrap();
        acc.push(b"2144\0").unwrap();
        // Assert
        assert_eq!(acc.len(), 40);
        assert_eq!(
            acc.finish().unwrap(),
            pairs(&[("HeaderDigest", "None"), ("MaxBurstLength", "262144")])
        );
    }

    #[test]
    fn accumulator_reports_bad_pair_on_the_push_that_completes_it() {
        let mut acc = TextAccumulator::new();
        acc.push(b"A=1\0bro").unwrap();
        let err = acc.push(b"ken\0").unwrap_err();
        assert_eq!(err, TextError::MissingEquals { offset: 4 });
    }

    #[test]
    fn accumulator_refuses_more_than_its_limit() {
        let mut acc = TextAccumulator::with_limit(8);
        acc.push(b"A=1\0").unwrap();
        assert_eq!(
            acc.push(b"B=22\0").unwrap_err(),
            TextError::TooLong { limit: 8 }
        );
    }

    #[test]
    fn accumulator_refuses_an_endless_unterminated_pair_early() {
        let mut acc = TextAccumulator::new();
        let chunk = vec![b'a'; 1000];
        let mut result = Ok(());
        for _ in 0..4 {
            result = acc.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(TextError::MissingEquals { offset: 0 }));
        assert!(acc.len() <= 3000);
    }

    #[test]
    fn accumulator_accepts_missing_final_nul_at_finish() {
        let mut acc = TextAccumulator::default();
        acc.push(b"A=1\0B=").unwrap();
        acc.push(b"2").unwrap();
        assert_eq!(acc.finish().unwrap(), pairs(&[("A", "1"), ("B", "2")]));
        assert!(TextAccumulator::new().finish().unwrap().is_empty());
    }

    #[test]
    fn numbers_parse_in_decimal_and_hex() {
        assert_eq!(parse_number("0"), Ok(0));
        assert_eq!(parse_number("262144"), Ok(262_144));
        assert_eq!(parse_number("0x40000"), Ok(262_144));
        assert_eq!(parse_number("0XfFfF"), Ok(0xffff));
        assert_eq!(parse_number("08192"), Ok(8192));
        assert_eq!(parse_number("18446744073709551615"), Ok(u64::MAX));
        for bad in [
            "",
            "0x",
            "+1",
            "-1",
            "1 ",
            "12a",
            "0x1g",
            "18446744073709551616",
            "0x1ffffffffffffffff",
            "Yes",
        ] {
            assert!(
                matches!(parse_number(bad), Err(TextError::BadNumber { .. })),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn booleans_are_case_sensitive_yes_and_no() {
        assert_eq!(parse_bool("Yes"), Ok(true));
        assert_eq!(parse_bool("No"), Ok(false));
        assert!(parse_bool("yes").is_err());
        assert!(parse_bool("").is_err());
        assert_eq!(bool_value(true), "Yes");
        assert_eq!(bool_value(false), "No");
    }

    #[test]
    fn lists_split_at_commas_and_refuse_empty_elements() {
        assert_eq!(parse_list("CRC32C,None"), Ok(vec!["CRC32C", "None"]));
        assert_eq!(parse_list("None"), Ok(vec!["None"]));
        assert!(parse_list("CRC32C,,None").is_err());
        assert!(parse_list("").is_err());
        assert!(parse_list(&"a".repeat(256)).is_err());
        assert_eq!(join_list(&["CRC32C", "None"]), "CRC32C,None");
        assert_eq!(join_list::<&str>(&[]), "");
    }

    #[test]
    fn hex_binary_values_decode_with_implied_leading_nibble() {
        assert_eq!(decode_binary("0x0102ff", 16), Ok(vec![0x01, 0x02, 0xff]));
        assert_eq!(decode_binary("0X123", 16), Ok(vec![0x01, 0x23]));
        assert_eq!(decode_binary("0xAbCd", 16), Ok(vec![0xab, 0xcd]));
        assert!(decode_binary("0x", 16).is_err());
        assert!(decode_binary("0x12 3", 16).is_err());
        assert!(decode_binary("1234", 16).is_err());
        assert!(decode_binary("0", 16).is_err());
        assert_eq!(encode_hex(&[0x01, 0xab]), "0x01ab");
    }

    #[test]
    fn base64_binary_values_follow_rfc4648() {
        // RFC 4648 §10 test vectors, with the iSCSI "0b" prefix.
        let vectors: [(&[u8], &str); 7] = [
            (b"", "0b"),
            (b"f", "0bZg=="),
            (b"fo", "0bZm8="),
            (b"foo", "0bZm9v"),
            (b"foob", "0bZm9vYg=="),
            (b"fooba", "0bZm9vYmE="),
            (b"foobar", "0bZm9vYmFy"),
        ];
        for (raw, encoded) in vectors {
            assert_eq!(encode_base64(raw), encoded);
            if !raw.is_empty() {
                assert_eq!(decode_binary(encoded, 16).unwrap(), raw, "{encoded}");
            }
        }
        // Padding is optional; "0B" works like "0b".
        assert_eq!(decode_binary("0BZm9vYg", 16).unwrap(), b"foob");
        assert_eq!(decode_binary("0b+/+/", 16).unwrap(), vec![0xfb, 0xff, 0xbf]);
    }

    #[test]
    fn malformed_base64_is_rejected() {
        for bad in [
            "0b", "0b=", "0bZ", "0bZm9vY", "0bZm=9v", "0bZm9v!", "0bZg=", "0bZ===",
        ] {
            assert!(
                matches!(decode_binary(bad, 64), Err(TextError::BadBinary { .. })),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn binary_value_over_max_len_is_rejected() {
        assert_eq!(
            decode_binary("0x010203", 2),
            Err(TextError::BinaryTooLong { len: 3, max: 2 })
        );
    }

    #[test]
    fn error_messages_truncate_long_values() {
        let long = "z".repeat(500);
        let msg = parse_number(&long).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
    }

    fn valid_key() -> impl Strategy<Value = String> {
        "[A-Za-z][A-Za-z0-9.+@_#-]{0,62}"
    }

    fn valid_value() -> impl Strategy<Value = String> {
        // Printable text, including non-ASCII and '='.
        "[ -~äöü€]{0,40}"
    }

    proptest! {
        #[test]
        fn parse_text_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_text(&data);
        }

        #[test]
        fn parse_text_never_panics_on_near_valid_text(
            data in "([A-Za-z=,\\x00\\xff0-9]{0,20}\\x00){0,10}"
        ) {
            let _ = parse_text(data.as_bytes());
        }

        #[test]
        fn accumulator_never_panics_and_agrees_with_parse_text(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
            cuts.sort_unstable();
            let mut acc = TextAccumulator::new();
            let mut last = 0;
            let mut pushed = Ok(());
            for cut in cuts.into_iter().chain([data.len()]) {
                pushed = acc.push(&data[last..cut]);
                last = cut;
                if pushed.is_err() {
                    break;
                }
            }
            let whole = parse_text(&data);
            match pushed {
                Ok(()) => prop_assert_eq!(acc.finish(), whole),
                Err(e) => prop_assert_eq!(Err(e), whole),
            }
        }

        #[test]
        fn encoded_pairs_parse_back_unchanged(
            list in proptest::collection::vec((valid_key(), valid_value()), 0..8),
            split in any::<usize>(),
        ) {
            let data = encode_text_checked(&list).unwrap();
            prop_assert_eq!(parse_text(&data).unwrap(), list.clone());
            let split = split % (data.len() + 1);
            let mut acc = TextAccumulator::new();
            acc.push(&data[..split]).unwrap();
            acc.push(&data[split..]).unwrap();
            prop_assert_eq!(acc.finish().unwrap(), list);
        }

        #[test]
        fn binary_values_round_trip(bytes in proptest::collection::vec(any::<u8>(), 1..100)) {
            prop_assert_eq!(decode_binary(&encode_hex(&bytes), 100).unwrap(), bytes.clone());
            prop_assert_eq!(decode_binary(&encode_base64(&bytes), 100).unwrap(), bytes);
        }

        #[test]
        fn value_helpers_never_panic(s in "\\PC{0,40}") {
            let _ = parse_number(&s);
            let _ = parse_bool(&s);
            let _ = parse_list(&s);
            let _ = decode_binary(&s, 1024);
        }

        #[test]
        fn numbers_round_trip(n in any::<u64>()) {
            prop_assert_eq!(parse_number(&n.to_string()), Ok(n));
            prop_assert_eq!(parse_number(&format!("{n:#x}")), Ok(n));
        }
    }
}
