//! In-band data movement (iSCSI on TCP; RFC 7143 §11.7, §11.8): the read
//! data arrives in Data-In PDUs, strictly in order (DataPDUInOrder and
//! DataSequenceInOrder are Yes, §13.19, §13.20), and lands in the command's
//! read buffer — lent to the receive path so it reads each payload straight
//! into it ([`Lent`]), or copied from a PDU's data segment; the write data
//! leaves as immediate data in the command, unsolicited Data-Out up to
//! FirstBurstLength and, for each R2T, solicited Data-Out within
//! MaxBurstLength (§4.2.5.2), each PDU within the target's
//! MaxRecvDataSegmentLength.

use bytes::Bytes;

use super::api::{ProtocolError, TaskId, Transmit, TransmitKind};
use super::state::Connection;
use super::tasks::{CommandTask, ReadBuf};
use crate::iobuf::IoBuf;
use crate::proto::pdu::{Bhs, DataIn, DataOut, Pdu};

/// A Data-In payload on its way into a command's read buffer.
pub(super) enum Payload {
    /// In a PDU's data segment: copied into the buffer.
    Copy(Bytes),
    /// Already read into the buffer by the receive path.
    Placed(Lent),
}

/// Whether `h` with a `len`-byte payload is the next Data-In of in-band
/// command `c`, inside its read buffer (RFC 7143 §11.7).
fn check_data_in(c: &CommandTask, h: &DataIn, len: u32) -> Result<(), ProtocolError> {
    if c.direct {
        return Err(ProtocolError::DirectTaskData {
            what: "Data-In",
            itt: h.itt,
        });
    }
    if h.data_sn != c.next_data_sn {
        return Err(ProtocolError::DataSn {
            itt: h.itt,
            got: h.data_sn,
            expected: c.next_data_sn,
        });
    }
    let end = h.buffer_offset as u64 + len as u64;
    if end > c.read_len as u64 {
        return Err(ProtocolError::DataOverrun {
            itt: h.itt,
            offset: h.buffer_offset,
            len,
            expected: c.read_len,
        });
    }
    // rlun always offers DataPDUInOrder=Yes and DataSequenceInOrder=Yes,
    // which the OR rule makes the outcome whatever the target answers
    // (§13.19, §13.20): the Data-In PDUs of a read cover it in order, each
    // starting where the previous one ended. Anything else (a gap, an
    // overlap, a resend) would leave holes or stale bytes in the result,
    // so it ends the connection.
    if h.buffer_offset != c.received {
        return Err(ProtocolError::DataOffset {
            itt: h.itt,
            offset: h.buffer_offset,
            expected: c.received,
        });
    }
    if h.status_present && !h.final_ {
        return Err(ProtocolError::MalformedData {
            what: "Data-In with S bit but without F bit",
        });
    }
    Ok(())
}

/// The read buffer of one in-band command, lent to the receive path while
/// one Data-In payload is read straight into it
/// ([`Connection::lend_read_buffer`]). It holds the buffer itself, not a
/// reference: whatever happens to the command meanwhile (abort, timeout,
/// connection loss), the payload lands in memory no caller has, and
/// [`Connection::handle_placed`] gives it back to the command only if that
/// command still exists.
#[derive(Debug)]
pub struct Lent {
    itt: u32,
    task: TaskId,
    buf: IoBuf,
    offset: usize,
    len: usize,
}

impl Lent {
    /// The Initiator Task Tag of the command the buffer belongs to.
    pub fn itt(&self) -> u32 {
        self.itt
    }

    /// Where the payload goes: exactly its length, at its buffer offset.
    pub fn dest(&mut self) -> &mut [u8] {
        &mut self.buf[self.offset..self.offset + self.len]
    }

    /// The payload bytes (what [`Lent::dest`] received).
    pub fn payload(&self) -> &[u8] {
        &self.buf[self.offset..self.offset + self.len]
    }
}

impl Connection {
    /// Data-Out PDUs for bytes `start..end` of `data`, each within
    /// MaxXmitDataSegmentLength, DataSN from 0, F on the last (§11.7).
    pub(super) fn queue_data_out(
        &mut self,
        itt: u32,
        lun: [u8; 8],
        ttt: u32,
        data: &Bytes,
        start: u32,
        end: u32,
    ) {
        let seg = self.params.max_xmit_data_segment_length.max(512);
        let mut offset = start;
        let mut data_sn = 0;
        while offset < end {
            let len = seg.min(end - offset);
            self.transmit.push_back(Transmit {
                pdu: Pdu::with_data(
                    Bhs::DataOut(DataOut {
                        final_: offset + len == end,
                        lun,
                        itt,
                        ttt,
                        exp_stat_sn: self.exp_stat_sn,
                        data_sn,
                        buffer_offset: offset,
                    }),
                    data.slice(offset as usize..(offset + len) as usize),
                ),
                kind: TransmitKind::DataOut,
                direct: None,
            });
            offset += len;
            data_sn += 1;
        }
    }

    /// Lend the read buffer of the command a Data-In header names, so the
    /// receive path can read the header's `len`-byte payload straight into
    /// it ([`Lent::dest`]) and then hand both back with
    /// [`Connection::handle_placed`]: no copy of the payload in user space.
    ///
    /// `None` when the header is anything but the next in-order Data-In of
    /// a live in-band read with room for `len` bytes at its offset (unknown
    /// or finished task, a direct task, wrong DataSN or offset, overrun,
    /// an S bit without F): the receive path then reads the payload into a
    /// PDU as usual and [`Connection::handle_pdu`] reports the violation
    /// without writing the payload anywhere.
    pub fn lend_read_buffer(&mut self, h: &DataIn, len: u32) -> Option<Lent> {
        if len == 0 {
            return None;
        }
        let task = self.tasks.get_mut(&h.itt)?;
        let id = task.id;
        let c = task.kind.command()?;
        if c.lent || check_data_in(c, h, len).is_err() {
            return None;
        }
        let ReadBuf::InBand(buf) = &mut c.read_buf else {
            return None;
        };
        let mut buf = std::mem::replace(buf, IoBuf::empty());
        if buf.len() < c.read_len as usize {
            // First Data-In of the command: the whole read length, once,
            // from the pool (see [`ReadBuf`]); heap memory past its cap.
            buf = self
                .read_pool
                .unwrap_or_else(crate::iobuf::read_pool)
                .alloc(c.read_len as usize);
        }
        c.lent = true;
        Some(Lent {
            itt: h.itt,
            task: id,
            buf,
            offset: h.buffer_offset as usize,
            len: len as usize,
        })
    }

    pub(super) fn data_in(&mut self, h: DataIn, payload: Payload) -> Result<(), ProtocolError> {
        // Read buffers: a pool chunk (stale contents, see [`ReadBuf`]) or,
        // with the pool at its cap, zeroed heap memory; never waits.
        let pool = self.read_pool.unwrap_or_else(crate::iobuf::read_pool);
        self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
        if h.status_present {
            self.update_stat_sn(h.stat_sn);
        }
        let task = self.tasks.get_mut(&h.itt);
        let task_id = task.as_ref().map(|t| t.id);
        let Some(c) = task.and_then(|t| t.kind.command()) else {
            return Err(ProtocolError::UnknownTask {
                what: "Data-In",
                itt: h.itt,
            });
        };
        let len = match &payload {
            Payload::Copy(data) => data.len() as u32,
            Payload::Placed(lent) => {
                // The buffer lent for this header comes home, unless the
                // command it was lent by is gone (then it is dropped).
                if !c.lent || task_id != Some(lent.task) {
                    return Err(ProtocolError::UnknownTask {
                        what: "Data-In",
                        itt: h.itt,
                    });
                }
                lent.len as u32
            }
        };
        if let Payload::Placed(lent) = payload {
            c.read_buf = ReadBuf::InBand(lent.buf);
            c.lent = false;
            // Checked when the buffer was lent; nothing else ran between.
            debug_assert!(check_data_in(c, &h, len).is_ok());
        } else {
            if c.lent {
                // Cannot happen: the receive path hands back the buffer
                // before it reads the next PDU.
                return Err(ProtocolError::MalformedData {
                    what: "Data-In while the previous payload is still arriving",
                });
            }
            check_data_in(c, &h, len)?;
            if let (Payload::Copy(data), ReadBuf::InBand(buf)) = (&payload, &mut c.read_buf) {
                if len > 0 {
                    if buf.len() < c.read_len as usize {
                        *buf = pool.alloc(c.read_len as usize);
                    }
                    // The copy of a receive path that does not place
                    // payloads itself: into the caller's buffer.
                    let at = h.buffer_offset as usize;
                    buf[at..at + data.len()].copy_from_slice(data);
                    self.copied_bytes += u64::from(len);
                    self.copied_untaken += u64::from(len);
                }
            }
        }
        c.next_data_sn = c.next_data_sn.wrapping_add(1);
        c.received += len;
        if h.status_present {
            c.status_from_data_in = Some((h.status, h.residual));
            self.finish_command(h.itt, h.status, None, h.residual);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::iobuf::Pool;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use crate::testing::data_in;
    use bytes::Bytes;
    use std::time::Instant;

    #[test]
    fn data_in_pieces_are_reassembled_and_status_in_last_pdu_completes() {
        let mut s = connection(params(), 10);
        let id = s.submit(read(12));
        let itt = itt_of(&drain(&mut s)[0]);
        let now = Instant::now();
        s.handle_pdu(data_in(itt, 0, 0, b"abcd", false), now)
            .unwrap();
        s.handle_pdu(data_in(itt, 1, 4, b"efgh", false), now)
            .unwrap();
        assert!(s.poll_event().is_none());
        s.handle_pdu(data_in(itt, 2, 8, b"ijkl", true), now)
            .unwrap();
        match s.poll_event() {
            Some(Event::Command { id: got, result }) => {
                assert_eq!(got, id);
                let r = result.unwrap();
                assert_eq!(r.status, 0);
                assert_eq!(&r.data[..], b"abcdefghijkl");
            }
            other => panic!("expected completion, got {other:?}"),
        }
        assert_eq!(s.outstanding(), 0);
        assert_eq!(
            s.copied_bytes(),
            12,
            "a payload handed over in a PDU is copied once"
        );
    }

    #[test]
    fn data_in_with_wrong_data_sn_is_a_protocol_error() {
        let mut s = connection(params(), 10);
        s.submit(read(8));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 1, 0, b"abcd", false), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DataSn {
                itt,
                got: 1,
                expected: 0
            }
        );
    }

    #[test]
    fn data_in_past_the_buffer_is_a_protocol_error() {
        let mut s = connection(params(), 10);
        s.submit(read(4));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 2, b"abcd", true), Instant::now())
            .unwrap_err();
        assert!(matches!(err, ProtocolError::DataOverrun { .. }));
    }

    #[test]
    fn data_in_out_of_order_or_with_a_gap_is_a_protocol_error() {
        // A gap: the first Data-In starts at 4 instead of 0. Accepting it
        // would complete the read with zeros where bytes 0..4 belong.
        let mut s = connection(params(), 10);
        s.submit(read(8));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 4, b"efgh", true), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DataOffset {
                itt,
                offset: 4,
                expected: 0
            }
        );

        // An overlap: the second Data-In goes back to offset 0.
        let mut s = connection(params(), 10);
        s.submit(read(8));
        let itt = itt_of(&drain(&mut s)[0]);
        s.handle_pdu(data_in(itt, 0, 0, b"abcd", false), Instant::now())
            .unwrap();
        let err = s
            .handle_pdu(data_in(itt, 1, 0, b"abcd", true), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DataOffset {
                itt,
                offset: 0,
                expected: 4
            }
        );
        assert!(s.poll_event().is_none(), "the read must not complete");
    }

    #[test]
    fn data_in_for_unknown_task_is_a_protocol_error() {
        let mut s = connection(params(), 10);
        let err = s
            .handle_pdu(data_in(99, 0, 0, b"abcd", true), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::UnknownTask {
                what: "Data-In",
                itt: 99
            }
        );
    }

    #[test]
    fn write_with_immediate_data_and_initial_r2t_sends_first_segment_in_the_command() {
        let mut s = connection(params(), 10);
        s.submit(write(vec![1u8; 20000]));
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        let Bhs::ScsiCommand(c) = &sent[0].bhs else {
            panic!()
        };
        assert!(c.write && c.final_);
        assert_eq!(c.expected_data_transfer_length, 20000);
        assert_eq!(sent[0].data.len(), 8192, "immediate data within MaxXmitDSL");
    }

    #[test]
    fn unsolicited_data_out_fills_first_burst_when_initial_r2t_is_no() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..params()
        };
        let mut s = connection(p, 10);
        s.submit(write((0..50000u32).map(|i| i as u8).collect()));
        let sent = drain(&mut s);
        let Bhs::ScsiCommand(c) = &sent[0].bhs else {
            panic!()
        };
        assert!(!c.final_, "unsolicited Data-Out follows");
        assert_eq!(sent[0].data.len(), 8192);
        assert_eq!(
            data_outs(&sent),
            vec![
                (RESERVED_TAG, 0, 8192, 8192, false),
                (RESERVED_TAG, 1, 16384, 3616, true),
            ]
        );
    }

    #[test]
    fn r2t_is_answered_with_data_out_sequence_within_segment_size() {
        let p = FeatureParams {
            immediate_data: false,
            max_xmit_data_segment_length: 4096,
            ..params()
        };
        let mut s = connection(p, 10);
        let data: Vec<u8> = (0..10000u32).map(|i| (i * 7) as u8).collect();
        let id = s.submit(write(data.clone()));
        let sent = drain(&mut s);
        assert_eq!(sent[0].data.len(), 0);
        let itt = itt_of(&sent[0]);
        let r2t = |ttt, r2t_sn, offset, len| {
            Pdu::new(Bhs::R2t(R2t {
                lun: [0; 8],
                itt,
                ttt,
                stat_sn: 1,
                exp_cmd_sn: 2,
                max_cmd_sn: 10,
                r2t_sn,
                buffer_offset: offset,
                desired_length: len,
            }))
        };
        let now = Instant::now();
        s.handle_pdu(r2t(0x11, 0, 0, 6000), now).unwrap();
        s.handle_pdu(r2t(0x12, 1, 6000, 4000), now).unwrap();
        let outs = drain(&mut s);
        assert_eq!(
            data_outs(&outs),
            vec![
                (0x11, 0, 0, 4096, false),
                (0x11, 1, 4096, 1904, true),
                (0x12, 0, 6000, 4000, true),
            ]
        );
        let mut rebuilt = vec![0u8; 10000];
        for p in &outs {
            if let Bhs::DataOut(d) = &p.bhs {
                let o = d.buffer_offset as usize;
                rebuilt[o..o + p.data.len()].copy_from_slice(&p.data);
            }
        }
        assert_eq!(rebuilt, data);
        s.handle_pdu(response(itt, 1, 2, 10, 0), now).unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == id)
        );
    }

    #[test]
    fn r2t_beyond_the_write_is_a_protocol_error() {
        let mut s = connection(params(), 10);
        s.submit(write(vec![0; 1000]));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(
                Pdu::new(Bhs::R2t(R2t {
                    lun: [0; 8],
                    itt,
                    ttt: 1,
                    stat_sn: 1,
                    exp_cmd_sn: 2,
                    max_cmd_sn: 10,
                    r2t_sn: 0,
                    buffer_offset: 512,
                    desired_length: 1024,
                })),
                Instant::now(),
            )
            .unwrap_err();
        assert!(matches!(err, ProtocolError::BadR2t { .. }));
    }

    #[test]
    fn in_band_read_buffers_return_to_the_pool_when_commands_complete_in_place_or_copied() {
        let pool = private_pool();
        let mut s = pooled_connection(pool);
        let (_, copied) = sent_read(&mut s, 8192);
        let (_, placed) = sent_read(&mut s, 8192);
        assert_eq!(pool.in_use(), 0, "nothing is taken before data arrives");
        s.handle_pdu(data_in(copied, 0, 0, &[1; 8192], true), Instant::now())
            .unwrap();
        let pdu = data_in(placed, 0, 0, &[], true);
        place(&mut s, pdu, &[2; 8192]).unwrap();
        let (a, b) = (completed(&mut s), completed(&mut s));
        assert_eq!(pool.in_use(), 2 * 8192, "the callers hold both buffers");
        assert!(a.data.iter().all(|&x| x == 1) && b.data.iter().all(|&x| x == 2));
        drop((a, b));
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn in_band_read_buffers_return_to_the_pool_when_commands_fail_are_aborted_or_the_core_goes() {
        let pool = private_pool();
        let now = Instant::now();

        // A protocol error mid-read, then the connection is given up.
        let mut s = pooled_connection(pool);
        let (_, itt) = sent_read(&mut s, 8192);
        s.handle_pdu(data_in(itt, 0, 0, &[1; 4096], false), now)
            .unwrap();
        assert_eq!(pool.in_use(), 8192);
        assert!(s
            .handle_pdu(data_in(itt, 7, 4096, &[1; 4096], true), now)
            .is_err());
        s.fail_all("connection lost");
        assert!(matches!(
            s.poll_event(),
            Some(Event::Command { result: Err(_), .. })
        ));
        assert_eq!(pool.in_use(), 0, "fail_all");

        // Aborted (ABORT TASK answered) with part of its data in.
        let (victim, itt) = sent_read(&mut s, 8192);
        s.handle_pdu(data_in(itt, 0, 0, &[1; 4096], false), now)
            .unwrap();
        s.abort_task(victim);
        let Bhs::TaskMgmtRequest(t) = &drain(&mut s)[0].bhs else {
            panic!("no TMF sent")
        };
        let tmf_itt = t.itt;
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt: tmf_itt,
                stat_sn: 1,
                exp_cmd_sn: 3,
                max_cmd_sn: 40,
            })),
            now,
        )
        .unwrap();
        while s.poll_event().is_some() {}
        assert_eq!(pool.in_use(), 0, "abort");

        // The payload of a command given up while it arrives: the lent
        // buffer is dropped when it comes back.
        let (_, itt) = sent_read(&mut s, 8192);
        let h = data_in(itt, 0, 0, &[], true);
        let Bhs::DataIn(d) = &h.bhs else {
            unreachable!()
        };
        let lent = s.lend_read_buffer(d, 8192).expect("lent");
        s.fail_all("timed out");
        while s.poll_event().is_some() {}
        assert_eq!(pool.in_use(), 8192, "the reader still holds it");
        assert!(s.handle_placed(Pdu::new(h.bhs), lent, now).is_err());
        assert_eq!(pool.in_use(), 0, "late payload");

        // Reconnect: the old core is dropped with reads half done, one of
        // them with its buffer lent to the old connection's reader.
        let (_, a) = sent_read(&mut s, 8192);
        let (_, b) = sent_read(&mut s, 16384);
        s.handle_pdu(data_in(a, 0, 0, &[1; 4096], false), now)
            .unwrap();
        let h = data_in(b, 0, 0, &[], false);
        let Bhs::DataIn(d) = &h.bhs else {
            unreachable!()
        };
        let lent = s.lend_read_buffer(d, 4096).expect("lent");
        assert_eq!(pool.in_use(), 8192 + 16384);
        drop(s);
        drop(lent);
        assert_eq!(pool.in_use(), 0, "core and reader dropped");
    }

    #[test]
    fn a_short_in_band_read_never_hands_out_stale_pool_bytes() {
        let pool = private_pool();
        // A chunk full of another read's bytes, back in the pool.
        let mut dirty = pool.alloc(8192);
        dirty.fill(0xee);
        let dirty_addr = dirty.as_ptr() as usize;
        drop(dirty);
        for (placed, underflow) in [(false, true), (true, true), (false, false), (true, false)] {
            let mut s = pooled_connection(pool);
            let (_, itt) = sent_read(&mut s, 8192);
            // 3000 bytes and the status: the target sent less than asked,
            // with or without saying so in the residual.
            let mut last = data_in(itt, 0, 0, &[], true);
            if let Bhs::DataIn(d) = &mut last.bhs {
                d.residual = Residual {
                    underflow,
                    overflow: false,
                    count: if underflow { 8192 - 3000 } else { 0 },
                };
            }
            if placed {
                place(&mut s, last, &[7; 3000]).unwrap();
            } else {
                last.data = Bytes::from(vec![7; 3000]);
                s.handle_pdu(last, Instant::now()).unwrap();
            }
            let r = completed(&mut s);
            assert_eq!(
                r.data.as_ptr() as usize,
                dirty_addr,
                "the dirty chunk was reused"
            );
            assert_eq!(r.data.len(), 3000, "only what the target sent");
            assert!(r.data.iter().all(|&x| x == 7), "{placed} {underflow}");
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn reads_past_the_pool_cap_get_heap_buffers_and_never_wait() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(crate::iobuf::ARENA_LEN)));
        let mut s = pooled_connection(pool);
        let mut held = Vec::new();
        // 40 reads of 128 KiB: the 4 MiB cap holds 32 of them.
        for i in 0..40u8 {
            let (_, itt) = sent_read(&mut s, 128 << 10);
            s.handle_pdu(
                data_in(itt, 0, 0, &vec![i; 128 << 10], true),
                Instant::now(),
            )
            .unwrap();
            let r = completed(&mut s);
            assert!(r.data.iter().all(|&x| x == i));
            held.push(r);
        }
        assert_eq!(pool.in_use(), 32 * (128 << 10));
        drop(held);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn in_band_transmits_never_carry_buffers() {
        let mut s = connection(params(), 10);
        s.submit(read(65536));
        s.submit(write(vec![7u8; 100_000]));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 2);
        assert!(sent.iter().all(|t| t.direct.is_none()));
    }

    #[test]
    fn in_band_read_larger_than_one_burst_is_reassembled_across_sequences() {
        // 600000 bytes > MaxBurstLength 262144: the target sends three
        // Data-In sequences (F at each end), DataSN running on.
        let mut s = connection(params(), 10);
        s.submit(read(600_000));
        let itt = itt_of(&drain(&mut s)[0]);
        let pattern: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        let now = Instant::now();
        let mut data_sn = 0;
        for (burst_start, burst_end) in [(0, 262_144), (262_144, 524_288), (524_288, 600_000)] {
            let mut off = burst_start;
            while off < burst_end {
                let end = (off + 65_536).min(burst_end);
                let mut pdu = data_in(
                    itt,
                    data_sn,
                    off,
                    &pattern[off as usize..end as usize],
                    false,
                );
                if let Bhs::DataIn(d) = &mut pdu.bhs {
                    d.final_ = end == burst_end;
                    d.status_present = end == 600_000;
                }
                s.handle_pdu(pdu, now).unwrap();
                data_sn += 1;
                off = end;
            }
        }
        let r = completed(&mut s);
        assert_eq!(r.data.len(), 600_000);
        assert!(r.data[..] == pattern[..], "data reassembled in order");
    }

    #[test]
    fn in_band_write_that_fits_in_immediate_data_is_one_pdu() {
        let mut s = connection(params(), 10);
        s.submit(write(vec![9u8; 4096]));
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        let Bhs::ScsiCommand(c) = &sent[0].bhs else {
            panic!("expected a SCSI Command, got {:?}", sent[0].bhs)
        };
        assert!(c.write && c.final_);
        assert_eq!(&sent[0].data[..], &[9u8; 4096][..]);
        s.handle_pdu(response(c.itt, 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).status, 0);
    }

    #[test]
    fn in_band_write_sends_immediate_unsolicited_then_solicited_data() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..params()
        };
        let mut s = connection(p, 10);
        let data: Vec<u8> = (0..50000u32).map(|i| i as u8).collect();
        s.submit(write(data.clone()));
        let sent = drain(&mut s);
        let itt = itt_of(&sent[0]);
        let mut got = vec![0u8; 50000];
        got[..8192].copy_from_slice(&sent[0].data);
        for p in &sent[1..] {
            let Bhs::DataOut(d) = &p.bhs else { panic!() };
            got[d.buffer_offset as usize..][..p.data.len()].copy_from_slice(&p.data);
        }
        s.handle_pdu(r2t(itt, 0x77, 20000, 30000), Instant::now())
            .unwrap();
        for p in drain(&mut s) {
            let Bhs::DataOut(d) = &p.bhs else { panic!() };
            assert_eq!(d.ttt, 0x77);
            got[d.buffer_offset as usize..][..p.data.len()].copy_from_slice(&p.data);
        }
        assert!(
            got == data,
            "immediate + unsolicited + solicited cover the write"
        );
        s.handle_pdu(response(itt, 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).status, 0);
    }
}
