//! Direct data movement (iSER, RFC 7145): on iSER the target moves SCSI
//! data itself, by RDMA Write into our read buffer and RDMA Read from our
//! write buffer. The core gives the transport each such command's buffers
//! with its SCSI Command PDU ([`DirectBuffers`]); the read buffer is
//! allocated whole before the command leaves and stays put until the task
//! ends, and the SCSI Response's residual says how much of it the target
//! placed (RFC 7143 §11.4.5). Immediate data and unsolicited Data-Out still
//! go as PDUs (`inband.rs`); a Data-In or R2T for such a task is a protocol
//! error (`receive.rs`, `inband.rs`).

use super::api::{CommandRequest, DirectBuffers, ReadRegion, WriteRegion};
use super::tasks::ReadBuf;
use crate::iobuf::IoBuf;
use crate::proto::pdu::Residual;

/// The read buffer of direct command `req` (tag `itt`) and, when the target
/// has anything to move, the buffers to hand the transport: the read
/// destination and the write data from `unsolicited_end`, the first byte
/// not sent as immediate or unsolicited data.
#[inline]
pub(super) fn command_buffers(
    itt: u32,
    req: &CommandRequest,
    unsolicited_end: u32,
) -> (ReadBuf, Option<DirectBuffers>) {
    let total = req.data_out.len() as u32;
    let mut read_buf = ReadBuf::InBand(IoBuf::empty());
    // The target places the read data itself, anywhere in the
    // buffer and in any order: it must exist whole, at an address
    // that stays put, before the command leaves.
    let read = (req.read_len > 0).then(|| {
        let mut b = IoBuf::with_len(req.read_len as usize);
        let region = ReadRegion {
            addr: b.as_mut_ptr() as usize,
            len: req.read_len,
        };
        read_buf = ReadBuf::Direct(b);
        region
    });
    let write = (unsolicited_end < total).then(|| WriteRegion {
        data: req.data_out.clone(),
        offset: unsolicited_end,
    });
    let buffers = (read.is_some() || write.is_some()).then_some(DirectBuffers { itt, read, write });
    (read_buf, buffers)
}

/// How many bytes of a `read_len`-byte direct read the target placed: it
/// wrote them without telling us how many, the residual says (RFC 7143
/// §11.4.5).
#[inline]
pub(super) fn placed_len(read_len: u32, residual: &Residual) -> u32 {
    if residual.underflow {
        read_len.saturating_sub(residual.count)
    } else {
        read_len
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use crate::testing::data_in;
    use bytes::Bytes;
    use std::time::Instant;

    #[test]
    fn direct_read_hands_the_transport_the_task_buffer_and_completes_from_the_response() {
        let mut s = connection(direct(), 10);
        s.submit(read(16384));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1, "only the command; no Data-In is expected");
        let Bhs::ScsiCommand(c) = &sent[0].pdu.bhs else {
            panic!("expected a SCSI Command")
        };
        assert!(c.read && !c.write && c.final_);
        assert_eq!(c.expected_data_transfer_length, 16384);
        let d = sent[0].direct.clone().expect("buffers for the transport");
        assert_eq!(d.itt, c.itt);
        assert_eq!(d.write, None);
        let region = d.read.expect("read destination");
        assert_eq!(region.len, 16384);
        // Other tasks come and go while the target writes into the buffer.
        s.submit(read(512));
        let other = itt_of(&drain(&mut s)[0]);
        s.handle_pdu(response(other, 1, 3, 40, 0), Instant::now())
            .unwrap();
        let _ = completed(&mut s);
        // The target placed 12288 bytes and says so with the residual.
        s.handle_pdu(response_with_underflow(c.itt, 2, 4096), Instant::now())
            .unwrap();
        let r = completed(&mut s);
        assert_eq!(r.status, 0);
        assert_eq!(r.data.len(), 12288, "residual applied");
        assert_eq!(
            r.data.as_ptr() as usize,
            region.addr,
            "the caller gets the very memory the transport registered"
        );
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn direct_read_larger_than_one_burst_is_one_command_and_one_response() {
        let mut s = connection(direct(), 10);
        s.submit(read(4 << 20));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1);
        let region = sent[0].direct.as_ref().unwrap().read.unwrap();
        assert_eq!(region.len, 4 << 20, "the whole read, not one burst");
        s.handle_pdu(response(itt_of(&sent[0].pdu), 1, 2, 40, 0), Instant::now())
            .unwrap();
        let r = completed(&mut s);
        assert_eq!(r.data.len(), 4 << 20);
        assert_eq!(r.data.as_ptr() as usize, region.addr);
        assert_eq!(s.copied_bytes(), 0, "direct: the core copies nothing");
    }

    #[test]
    fn direct_reads_and_writes_of_every_size_class_copy_nothing_in_the_core() {
        let mut s = connection(direct(), 10);
        for len in [512u32, 8192, 65536, 262144, 1 << 20] {
            s.submit(read(len));
            s.submit(write(vec![7u8; len as usize]));
            for t in transmits(&mut s) {
                if let Bhs::ScsiCommand(_) = t.pdu.bhs {
                    s.handle_pdu(response(itt_of(&t.pdu), 1, 2, 40, 0), Instant::now())
                        .unwrap();
                }
            }
            let a = completed(&mut s);
            let b = completed(&mut s);
            assert_eq!(
                a.data.len() + b.data.len(),
                len as usize,
                "one read, one write"
            );
        }
        assert_eq!(s.copied_bytes(), 0);
    }

    #[test]
    fn direct_write_that_fits_in_immediate_data_leaves_nothing_to_fetch() {
        let mut s = connection(direct(), 10);
        s.submit(write(vec![3u8; 4096]));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1);
        assert_eq!(&sent[0].pdu.data[..], &[3u8; 4096][..]);
        assert!(sent[0].direct.is_none(), "no RDMA Read needed");
        s.handle_pdu(response(itt_of(&sent[0].pdu), 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).data.len(), 0);
    }

    #[test]
    fn direct_write_names_the_first_byte_not_sent_as_immediate_data() {
        // ImmediateData=Yes, InitialR2T=Yes: 8192 bytes ride in the command,
        // the target fetches the rest from offset 8192.
        let mut s = connection(direct(), 10);
        let data = Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        s.submit(CommandRequest {
            data_out: data.clone(),
            ..write(Vec::new())
        });
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1, "no Data-Out: the rest moves by RDMA Read");
        let Bhs::ScsiCommand(c) = &sent[0].pdu.bhs else {
            panic!()
        };
        assert!(c.write && c.final_);
        assert_eq!(c.expected_data_transfer_length, 100_000);
        assert_eq!(&sent[0].pdu.data[..], &data[..8192]);
        let d = sent[0].direct.clone().unwrap();
        assert_eq!(d.read, None);
        let w = d.write.unwrap();
        assert_eq!(w.offset, 8192);
        assert_eq!(
            w.data.as_ptr(),
            data.as_ptr(),
            "the caller's bytes, not a copy"
        );
        assert_eq!(w.data.len(), 100_000);
        s.handle_pdu(response(c.itt, 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).status, 0);
    }

    #[test]
    fn direct_write_sends_unsolicited_data_out_then_leaves_the_rest_to_the_target() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..direct()
        };
        let mut s = connection(p, 10);
        s.submit(write((0..50000u32).map(|i| i as u8).collect()));
        let sent = transmits(&mut s);
        let pdus: Vec<Pdu> = sent.iter().map(|t| t.pdu.clone()).collect();
        let Bhs::ScsiCommand(c) = &pdus[0].bhs else {
            panic!()
        };
        assert!(!c.final_, "unsolicited Data-Out follows");
        assert_eq!(pdus[0].data.len(), 8192);
        assert_eq!(
            data_outs(&pdus),
            vec![
                (RESERVED_TAG, 0, 8192, 8192, false),
                (RESERVED_TAG, 1, 16384, 3616, true),
            ]
        );
        let w = sent[0].direct.clone().unwrap().write.unwrap();
        assert_eq!(w.offset, 20000, "first byte after FirstBurstLength");
        assert!(sent[1..].iter().all(|t| t.direct.is_none()));
    }

    #[test]
    fn direct_write_of_exactly_the_first_burst_needs_no_rdma_read() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..direct()
        };
        let mut s = connection(p, 10);
        s.submit(write(vec![1u8; 20000]));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 3, "command + two unsolicited Data-Out");
        assert!(sent.iter().all(|t| t.direct.is_none()));
    }

    #[test]
    fn data_in_for_a_direct_task_is_a_protocol_error() {
        let mut s = connection(direct(), 10);
        s.submit(read(8192));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 0, &[0u8; 512], false), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DirectTaskData {
                what: "Data-In",
                itt
            }
        );
    }

    #[test]
    fn data_in_with_status_for_a_direct_task_is_a_protocol_error() {
        let mut s = connection(direct(), 10);
        s.submit(read(512));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 0, &[0u8; 512], true), Instant::now())
            .unwrap_err();
        assert!(matches!(err, ProtocolError::DirectTaskData { .. }), "{err}");
        assert!(s.poll_event().is_none(), "the task did not complete");
    }

    #[test]
    fn r2t_for_a_direct_task_is_a_protocol_error() {
        let mut s = connection(direct(), 10);
        s.submit(write(vec![0u8; 100_000]));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(r2t(itt, 1, 8192, 8192), Instant::now())
            .unwrap_err();
        assert_eq!(err, ProtocolError::DirectTaskData { what: "R2T", itt });
        assert!(drain(&mut s).is_empty(), "no Data-Out answers it");
    }

    #[test]
    fn direct_task_aborted_by_lun_reset_completes_as_aborted() {
        // The buffer is released only when the task ends: here by a
        // completed LOGICAL UNIT RESET, after which the target will not
        // touch it again (RFC 7143 §4.2.3.3).
        let mut s = connection(direct(), 10);
        let id = s.submit(read(8192));
        let _ = drain(&mut s);
        let reset = s.lun_reset([0; 8]);
        let Bhs::TaskMgmtRequest(t) = &drain(&mut s)[0].bhs else {
            panic!("expected the reset request")
        };
        let tmf_itt = t.itt;
        assert_eq!(s.outstanding(), 2);
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt: tmf_itt,
                stat_sn: 1,
                exp_cmd_sn: 2,
                max_cmd_sn: 40,
            })),
            Instant::now(),
        )
        .unwrap();
        let events: Vec<Event> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(matches!(
            &events[0],
            Event::Command { id: got, result: Err(TaskError::Aborted) } if *got == id
        ));
        assert!(matches!(&events[1], Event::TaskMgmt { id: got, .. } if *got == reset));
        assert_eq!(s.outstanding(), 0);
    }
}
