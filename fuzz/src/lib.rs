//! Helpers shared by rlun's fuzz targets: a cursor that turns fuzzer bytes
//! into choices, and the fix-ups that give a raw PDU a frame the codec
//! accepts (so the fuzzer spends its time past the length checks).

use rlun_iscsi::proto::pdu::{self, Digests, FrameLimits, BHS_LEN};

/// Reads choices from the fuzzer's bytes; runs out gracefully (zeros).
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    /// Exactly `N` bytes, zero-padded at the end of the input.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let src = self.bytes(N);
        out[..src.len()].copy_from_slice(src);
        out
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        self.bytes(self.data.len())
    }
}

/// Sets the 24-bit DataSegmentLength of a BHS.
pub fn set_data_len(bhs: &mut [u8; BHS_LEN], len: usize) {
    let len = (len as u32).min(pdu::MAX_DATA_SEGMENT);
    bhs[5] = (len >> 16) as u8;
    bhs[6] = (len >> 8) as u8;
    bhs[7] = len as u8;
}

/// Builds a complete, well-framed wire PDU from a BHS and data: AHS length
/// zeroed, DataSegmentLength set to the data's length, padding and correct
/// digests added. What the codec then decodes is the BHS fields alone.
pub fn frame(mut bhs: [u8; BHS_LEN], data: &[u8], digests: Digests) -> Vec<u8> {
    bhs[4] = 0;
    set_data_len(&mut bhs, data.len());
    let mut wire = bhs.to_vec();
    if digests.header {
        wire.extend_from_slice(&rlun_iscsi::proto::digest::header_digest(&wire).to_le_bytes());
    }
    if !data.is_empty() {
        wire.extend_from_slice(data);
        wire.resize(wire.len() + pdu::pad_len(data.len()), 0);
        if digests.data {
            let crc = rlun_iscsi::proto::digest::data_digest(data);
            wire.extend_from_slice(&crc.to_le_bytes());
        }
    }
    wire
}

/// Limits for receiving: the given digests and the largest segment size.
pub fn limits(digests: Digests, max_data_segment: u32) -> FrameLimits {
    FrameLimits {
        digests,
        max_data_segment,
    }
}
