//! Everything the target sends enters here (RFC 7143 §11): each PDU
//! updates the command window and ExpStatSN, then goes to the task its ITT
//! names — Data-In and R2T to in-band data movement (`inband.rs`), a SCSI
//! Response completes its command (§11.4), NOP-In answers a ping or asks
//! for one (§11.19), Text Responses are gathered across continuations
//! (§11.11), task management and logout responses end their requests
//! (§11.6, §11.15), an Asynchronous Message is reported (§11.9) and a
//! Reject fails the task whose header it carries (§11.17). Afterwards the
//! requests the window now admits go out.

use std::time::Instant;

use super::api::{
    Event, ProtocolError, TaskError, TmfOutcome, MAX_TEXT_RESPONSES, MAX_TEXT_RESPONSE_BYTES,
};
use super::inband::{Lent, Payload};
use super::state::Connection;
use super::tasks::TaskKind;
use crate::proto::pdu::{tmf, Bhs, NopOut, Pdu, TextRequest, RESERVED_TAG};

impl Connection {
    /// A Data-In whose payload the receive path read into the buffer
    /// [`Connection::lend_read_buffer`] lent it (`pdu` carries the header and
    /// no data). The buffer goes back to its command, then the header is
    /// processed like any Data-In. Should the command be gone meanwhile,
    /// the buffer is dropped here: it never reaches a caller.
    pub fn handle_placed(
        &mut self,
        pdu: Pdu,
        lent: Lent,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        self.last_heard = Some(now);
        let result = match pdu.bhs {
            Bhs::DataIn(h) => self.data_in(h, Payload::Placed(lent)),
            other => Err(ProtocolError::UnexpectedPdu(other.opcode().name())),
        };
        self.pump();
        result
    }

    /// Process one PDU from the target.
    pub fn handle_pdu(&mut self, pdu: Pdu, now: Instant) -> Result<(), ProtocolError> {
        self.last_heard = Some(now);
        let result = self.dispatch(pdu, now);
        self.pump();
        result
    }

    fn dispatch(&mut self, pdu: Pdu, now: Instant) -> Result<(), ProtocolError> {
        match pdu.bhs {
            Bhs::DataIn(h) => self.data_in(h, Payload::Copy(pdu.data)),
            Bhs::ScsiResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.lookup(h.itt, "SCSI Response", TaskKind::command)?;
                if h.response != 0 {
                    let task = self.remove(h.itt).expect("checked above");
                    self.events.push_back(Event::Command {
                        id: task.id,
                        result: Err(TaskError::TargetFailure(h.response)),
                    });
                    return Ok(());
                }
                // §11.4.7: data segment = SenseLength (2 bytes) + sense data.
                let sense = if pdu.data.len() >= 2 {
                    let sl = u16::from_be_bytes([pdu.data[0], pdu.data[1]]) as usize;
                    if sl + 2 > pdu.data.len() {
                        return Err(ProtocolError::MalformedData {
                            what: "SCSI Response (SenseLength beyond the data segment)",
                        });
                    }
                    (sl > 0).then(|| pdu.data.slice(2..2 + sl))
                } else {
                    None
                };
                self.finish_command(h.itt, h.status, sense, h.residual);
                Ok(())
            }
            Bhs::R2t(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                let max_burst = self.params.max_burst_length;
                let c = self.lookup(h.itt, "R2T", TaskKind::command)?;
                if c.direct {
                    return Err(ProtocolError::DirectTaskData {
                        what: "R2T",
                        itt: h.itt,
                    });
                }
                let total = c.data_out.len() as u32;
                let end = h.buffer_offset as u64 + h.desired_length as u64;
                if h.desired_length == 0 || h.desired_length > max_burst || end > total as u64 {
                    return Err(ProtocolError::BadR2t {
                        itt: h.itt,
                        offset: h.buffer_offset,
                        len: h.desired_length,
                        total,
                    });
                }
                let (lun, data) = (c.lun, c.data_out.clone());
                self.queue_data_out(h.itt, lun, h.ttt, &data, h.buffer_offset, end as u32);
                Ok(())
            }
            Bhs::NopIn(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                if h.itt != RESERVED_TAG {
                    // Answer to our ping (§11.19.1).
                    self.update_stat_sn(h.stat_sn);
                    let sent = self.lookup(h.itt, "NOP-In", TaskKind::ping)?;
                    let rtt = now.saturating_duration_since(sent);
                    let task = self.remove(h.itt).expect("present");
                    if self.ping_outstanding.map(|p| p.0) == Some(h.itt) {
                        self.ping_outstanding = None;
                    }
                    self.events.push_back(Event::Pong { id: task.id, rtt });
                }
                if h.ttt != RESERVED_TAG {
                    // The target pings us: echo its TTT and data (§11.18.3).
                    self.queue(Pdu::with_data(
                        Bhs::NopOut(NopOut {
                            immediate: true,
                            lun: h.lun,
                            itt: RESERVED_TAG,
                            ttt: h.ttt,
                            cmd_sn: self.cmd_sn,
                            exp_stat_sn: self.exp_stat_sn,
                        }),
                        pdu.data,
                    ));
                }
                Ok(())
            }
            Bhs::TextResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                let exp_stat_sn = self.exp_stat_sn;
                let cmd_sn = self.cmd_sn;
                let (received, responses) = self.lookup(h.itt, "Text Response", TaskKind::text)?;
                // Bounds against a target that never ends the exchange:
                // the text kept, and the number of continuation rounds
                // (empty continued responses would otherwise go on forever).
                if received.len() + pdu.data.len() > MAX_TEXT_RESPONSE_BYTES {
                    return Err(ProtocolError::MalformedData {
                        what: "Text Response (over 16 MiB of text)",
                    });
                }
                *responses += 1;
                if !h.final_ && *responses >= MAX_TEXT_RESPONSES {
                    return Err(ProtocolError::MalformedData {
                        what: "Text Response (more than 1024 responses to one Text Request)",
                    });
                }
                received.extend_from_slice(&pdu.data);
                if h.final_ {
                    let task = self.remove(h.itt).expect("present");
                    if let TaskKind::Text { received, .. } = task.kind {
                        self.events.push_back(Event::Text {
                            id: task.id,
                            result: Ok(received.freeze()),
                        });
                    }
                } else {
                    // More to come (C bit or a long answer): ask for the next
                    // part with an empty Text Request echoing the TTT (§11.10.4).
                    self.queue(Pdu::new(Bhs::TextRequest(TextRequest {
                        immediate: false,
                        final_: true,
                        continue_: false,
                        lun: [0; 8],
                        itt: h.itt,
                        ttt: h.ttt,
                        cmd_sn,
                        exp_stat_sn,
                    })));
                }
                Ok(())
            }
            Bhs::TaskMgmtResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.lookup(h.itt, "Task Management Response", TaskKind::task_mgmt)?;
                let task = self.remove(h.itt).expect("present");
                let outcome = TmfOutcome::from_code(h.response);
                if let TaskKind::TaskMgmt {
                    function,
                    lun,
                    ref_itt,
                } = task.kind
                {
                    if function == tmf::LOGICAL_UNIT_RESET {
                        self.resets_outstanding = self.resets_outstanding.saturating_sub(1);
                    }
                    self.terminate_after_tmf(function, lun, ref_itt, outcome);
                }
                self.events.push_back(Event::TaskMgmt {
                    id: task.id,
                    result: Ok(outcome),
                });
                Ok(())
            }
            Bhs::LogoutResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.lookup(h.itt, "Logout Response", TaskKind::logout)?;
                let task = self.remove(h.itt).expect("present");
                self.events.push_back(Event::Logout {
                    id: task.id,
                    result: Ok(h.response),
                });
                Ok(())
            }
            Bhs::AsyncMessage(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.events.push_back(Event::Async {
                    event: h.event,
                    vcode: h.vcode,
                    parameters: [h.parameter1, h.parameter2, h.parameter3],
                    data: pdu.data,
                });
                Ok(())
            }
            Bhs::Reject(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                let reason = h.reason_text();
                // §11.17: the data segment holds the rejected PDU's header.
                let itt = (pdu.data.len() >= 48).then(|| {
                    u32::from_be_bytes([pdu.data[16], pdu.data[17], pdu.data[18], pdu.data[19]])
                });
                match itt.filter(|i| *i != RESERVED_TAG && self.tasks.contains_key(i)) {
                    Some(itt) => {
                        let task = self.remove(itt).expect("present");
                        let err = TaskError::Rejected(reason);
                        self.events.push_back(match task.kind {
                            TaskKind::Command(_) => Event::Command {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::Text { .. } => Event::Text {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::TaskMgmt { .. } => Event::TaskMgmt {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::Logout => Event::Logout {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::Ping { .. } => {
                                self.ping_outstanding = None;
                                Event::Reject { reason }
                            }
                        });
                    }
                    None => self.events.push_back(Event::Reject { reason }),
                }
                Ok(())
            }
            Bhs::LoginResponse(_) => Err(ProtocolError::UnexpectedPdu("Login Response")),
            Bhs::Unknown { opcode, .. } => Err(ProtocolError::UnknownOpcode(opcode)),
            other => Err(ProtocolError::UnexpectedPdu(other.opcode().name())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::pdu::*;
    use bytes::Bytes;
    use std::time::Instant;

    #[test]
    fn scsi_response_sense_data_is_extracted() {
        let mut s = connection(params(), 10);
        let id = s.submit(read(512));
        let itt = itt_of(&drain(&mut s)[0]);
        let mut pdu = response(itt, 1, 2, 10, 2);
        let sense = [
            0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0,
        ];
        let mut data = vec![0, sense.len() as u8];
        data.extend_from_slice(&sense);
        pdu.data = Bytes::from(data);
        s.handle_pdu(pdu, Instant::now()).unwrap();
        match s.poll_event() {
            Some(Event::Command { id: got, result }) => {
                assert_eq!(got, id);
                let r = result.unwrap();
                assert_eq!(r.status, 2);
                assert_eq!(&r.sense.unwrap()[..], &sense[..]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sense_length_past_the_segment_is_malformed() {
        let mut s = connection(params(), 10);
        s.submit(read(512));
        let itt = itt_of(&drain(&mut s)[0]);
        let mut pdu = response(itt, 1, 2, 10, 2);
        pdu.data = Bytes::from_static(&[0, 40, 0x70, 0]);
        assert!(matches!(
            s.handle_pdu(pdu, Instant::now()),
            Err(ProtocolError::MalformedData { .. })
        ));
    }

    #[test]
    fn reject_naming_a_command_fails_that_command_only() {
        let mut s = connection(params(), 10);
        let a = s.submit(read(512));
        let b = s.submit(read(512));
        let sent = drain(&mut s);
        let head = sent[0].encode(Default::default()).head;
        s.handle_pdu(
            Pdu::with_data(
                Bhs::Reject(crate::proto::pdu::Reject {
                    reason: 0x09,
                    stat_sn: 1,
                    exp_cmd_sn: 3,
                    max_cmd_sn: 10,
                    data_sn: 0,
                }),
                Bytes::from(head[..48].to_vec()),
            ),
            Instant::now(),
        )
        .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Err(TaskError::Rejected(_)) }) if id == a)
        );
        assert_eq!(s.outstanding(), 1);
        s.fail_all("gone");
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Err(TaskError::ConnectionLost(_)) }) if id == b)
        );
    }
}
