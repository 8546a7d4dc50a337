//! The wire layout of each Basic Header Segment (RFC 7143 §11.3–§11.19):
//! [`Bhs::encode`] into the 48 bytes and [`Bhs::decode`] back, with the
//! flag, stage and task attribute checks the typed form cannot express. An
//! opcode this crate does not know decodes as [`Bhs::Unknown`], raw.
//!
//! The round trips through whole frames (`frame.rs`) test it against
//! annotated wire fixtures, for every opcode and with both digests.

use super::bhs::{
    AsyncMessage, Bhs, DataIn, DataOut, LoginRequest, LoginResponse, LogoutRequest, LogoutResponse,
    NopIn, NopOut, Opcode, PduError, R2t, Reject, Residual, ScsiCommand, ScsiResponse, Snack,
    Stage, TaskAttr, TaskMgmtRequest, TaskMgmtResponse, TextRequest, TextResponse, BHS_LEN,
    MAX_DATA_SEGMENT, RESERVED_TAG,
};

impl Bhs {
    /// Encode into the 48 wire bytes. `data_len` and `ahs_len` (bytes, a
    /// multiple of 4) fill the length fields.
    pub fn encode(&self, ahs_len: usize, data_len: u32) -> [u8; BHS_LEN] {
        let mut b = [0u8; BHS_LEN];
        let op = self.opcode().to_u8();
        b[0] = op;
        match self {
            Bhs::NopOut(h) => {
                imm(&mut b, h.immediate);
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::ScsiCommand(h) => {
                imm(&mut b, h.immediate);
                b[1] = flag(h.final_, 0x80)
                    | flag(h.read, 0x40)
                    | flag(h.write, 0x20)
                    | (h.attr as u8 & 7);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.expected_data_transfer_length);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
                b[32..48].copy_from_slice(&h.cdb);
            }
            Bhs::TaskMgmtRequest(h) => {
                imm(&mut b, h.immediate);
                b[1] = 0x80 | (h.function & 0x7f);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.referenced_task_tag);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
                put32(&mut b, 32, h.ref_cmd_sn);
                put32(&mut b, 36, h.exp_data_sn);
            }
            Bhs::LoginRequest(h) => {
                // Login requests always carry the I bit (§11.12).
                imm(&mut b, true);
                b[1] = flag(h.transit, 0x80)
                    | flag(h.continue_, 0x40)
                    | ((h.csg as u8) << 2)
                    | (h.nsg as u8);
                b[2] = h.version_max;
                b[3] = h.version_min;
                b[8..14].copy_from_slice(&h.isid);
                b[14..16].copy_from_slice(&h.tsih.to_be_bytes());
                put32(&mut b, 16, h.itt);
                b[20..22].copy_from_slice(&h.cid.to_be_bytes());
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::TextRequest(h) => {
                imm(&mut b, h.immediate);
                b[1] = flag(h.final_, 0x80) | flag(h.continue_, 0x40);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::DataOut(h) => {
                b[1] = flag(h.final_, 0x80);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 28, h.exp_stat_sn);
                put32(&mut b, 36, h.data_sn);
                put32(&mut b, 40, h.buffer_offset);
            }
            Bhs::LogoutRequest(h) => {
                imm(&mut b, h.immediate);
                b[1] = 0x80 | (h.reason & 0x7f);
                put32(&mut b, 16, h.itt);
                b[20..22].copy_from_slice(&h.cid.to_be_bytes());
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::Snack(h) => {
                b[1] = 0x80 | (h.snack_type & 0x0f);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 28, h.exp_stat_sn);
                put32(&mut b, 40, h.beg_run);
                put32(&mut b, 44, h.run_length);
            }
            Bhs::NopIn(h) => {
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
            }
            Bhs::ScsiResponse(h) => {
                b[1] = 0x80
                    | flag(h.bidi_overflow, 0x10)
                    | flag(h.bidi_underflow, 0x08)
                    | flag(h.residual.overflow, 0x04)
                    | flag(h.residual.underflow, 0x02);
                b[2] = h.response;
                b[3] = h.status;
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.snack_tag);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.exp_data_sn);
                put32(&mut b, 40, h.bidi_read_residual_count);
                put32(&mut b, 44, h.residual.count);
            }
            Bhs::TaskMgmtResponse(h) => {
                b[1] = 0x80;
                b[2] = h.response;
                put32(&mut b, 16, h.itt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
            }
            Bhs::LoginResponse(h) => {
                b[1] = flag(h.transit, 0x80)
                    | flag(h.continue_, 0x40)
                    | ((h.csg as u8) << 2)
                    | (h.nsg as u8);
                b[2] = h.version_max;
                b[3] = h.version_active;
                b[8..14].copy_from_slice(&h.isid);
                b[14..16].copy_from_slice(&h.tsih.to_be_bytes());
                put32(&mut b, 16, h.itt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                b[36] = h.status_class;
                b[37] = h.status_detail;
            }
            Bhs::TextResponse(h) => {
                b[1] = flag(h.final_, 0x80) | flag(h.continue_, 0x40);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
            }
            Bhs::DataIn(h) => {
                b[1] = flag(h.final_, 0x80)
                    | flag(h.ack, 0x40)
                    | flag(h.residual.overflow, 0x04)
                    | flag(h.residual.underflow, 0x02)
                    | flag(h.status_present, 0x01);
                b[3] = h.status;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.data_sn);
                put32(&mut b, 40, h.buffer_offset);
                put32(&mut b, 44, h.residual.count);
            }
            Bhs::LogoutResponse(h) => {
                b[1] = 0x80;
                b[2] = h.response;
                put32(&mut b, 16, h.itt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                b[40..42].copy_from_slice(&h.time2wait.to_be_bytes());
                b[42..44].copy_from_slice(&h.time2retain.to_be_bytes());
            }
            Bhs::R2t(h) => {
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.r2t_sn);
                put32(&mut b, 40, h.buffer_offset);
                put32(&mut b, 44, h.desired_length);
            }
            Bhs::AsyncMessage(h) => {
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, RESERVED_TAG);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                b[36] = h.event;
                b[37] = h.vcode;
                b[38..40].copy_from_slice(&h.parameter1.to_be_bytes());
                b[40..42].copy_from_slice(&h.parameter2.to_be_bytes());
                b[42..44].copy_from_slice(&h.parameter3.to_be_bytes());
            }
            Bhs::Reject(h) => {
                b[1] = 0x80;
                b[2] = h.reason;
                put32(&mut b, 16, RESERVED_TAG);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.data_sn);
            }
            Bhs::Unknown { raw, .. } => {
                b.copy_from_slice(&raw[..]);
            }
        }
        b[4] = (ahs_len / 4) as u8;
        let dl = data_len.min(MAX_DATA_SEGMENT);
        b[5] = (dl >> 16) as u8;
        b[6] = (dl >> 8) as u8;
        b[7] = dl as u8;
        b
    }

    /// Decode the 48 BHS bytes into the typed form.
    pub fn decode(b: &[u8; BHS_LEN]) -> Result<Bhs, PduError> {
        let op = Opcode::from_u8(b[0]);
        let immediate = b[0] & 0x40 != 0;
        let lun = || -> [u8; 8] { b[8..16].try_into().expect("8 bytes") };
        let f = b[1];
        Ok(match op {
            Opcode::NopOut => Bhs::NopOut(NopOut {
                immediate,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::ScsiCommand => Bhs::ScsiCommand(ScsiCommand {
                immediate,
                final_: f & 0x80 != 0,
                read: f & 0x40 != 0,
                write: f & 0x20 != 0,
                attr: match f & 7 {
                    0 => TaskAttr::Untagged,
                    1 => TaskAttr::Simple,
                    2 => TaskAttr::Ordered,
                    3 => TaskAttr::HeadOfQueue,
                    4 => TaskAttr::Aca,
                    _ => {
                        return Err(PduError::Malformed {
                            opcode: "SCSI Command",
                            what: "reserved task attribute",
                        })
                    }
                },
                lun: lun(),
                itt: get32(b, 16),
                expected_data_transfer_length: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
                cdb: b[32..48].try_into().expect("16 bytes"),
            }),
            Opcode::TaskMgmtRequest => Bhs::TaskMgmtRequest(TaskMgmtRequest {
                immediate,
                function: f & 0x7f,
                lun: lun(),
                itt: get32(b, 16),
                referenced_task_tag: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
                ref_cmd_sn: get32(b, 32),
                exp_data_sn: get32(b, 36),
            }),
            Opcode::LoginRequest => Bhs::LoginRequest(LoginRequest {
                transit: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                csg: stage(f >> 2, "Login Request")?,
                nsg: stage(f, "Login Request")?,
                version_max: b[2],
                version_min: b[3],
                isid: b[8..14].try_into().expect("6 bytes"),
                tsih: u16::from_be_bytes([b[14], b[15]]),
                itt: get32(b, 16),
                cid: u16::from_be_bytes([b[20], b[21]]),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::TextRequest => Bhs::TextRequest(TextRequest {
                immediate,
                final_: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::DataOut => Bhs::DataOut(DataOut {
                final_: f & 0x80 != 0,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                exp_stat_sn: get32(b, 28),
                data_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
            }),
            Opcode::LogoutRequest => Bhs::LogoutRequest(LogoutRequest {
                immediate,
                reason: f & 0x7f,
                itt: get32(b, 16),
                cid: u16::from_be_bytes([b[20], b[21]]),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::Snack => Bhs::Snack(Snack {
                snack_type: f & 0x0f,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                exp_stat_sn: get32(b, 28),
                beg_run: get32(b, 40),
                run_length: get32(b, 44),
            }),
            Opcode::NopIn => Bhs::NopIn(NopIn {
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            Opcode::ScsiResponse => Bhs::ScsiResponse(ScsiResponse {
                bidi_overflow: f & 0x10 != 0,
                bidi_underflow: f & 0x08 != 0,
                residual: Residual {
                    overflow: f & 0x04 != 0,
                    underflow: f & 0x02 != 0,
                    count: get32(b, 44),
                },
                response: b[2],
                status: b[3],
                itt: get32(b, 16),
                snack_tag: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                exp_data_sn: get32(b, 36),
                bidi_read_residual_count: get32(b, 40),
            }),
            Opcode::TaskMgmtResponse => Bhs::TaskMgmtResponse(TaskMgmtResponse {
                response: b[2],
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            Opcode::LoginResponse => Bhs::LoginResponse(LoginResponse {
                transit: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                csg: stage(f >> 2, "Login Response")?,
                nsg: stage(f, "Login Response")?,
                version_max: b[2],
                version_active: b[3],
                isid: b[8..14].try_into().expect("6 bytes"),
                tsih: u16::from_be_bytes([b[14], b[15]]),
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                status_class: b[36],
                status_detail: b[37],
            }),
            Opcode::TextResponse => Bhs::TextResponse(TextResponse {
                final_: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            Opcode::DataIn => Bhs::DataIn(DataIn {
                final_: f & 0x80 != 0,
                ack: f & 0x40 != 0,
                status_present: f & 0x01 != 0,
                residual: Residual {
                    overflow: f & 0x04 != 0,
                    underflow: f & 0x02 != 0,
                    count: get32(b, 44),
                },
                status: b[3],
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                data_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
            }),
            Opcode::LogoutResponse => Bhs::LogoutResponse(LogoutResponse {
                response: b[2],
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                time2wait: u16::from_be_bytes([b[40], b[41]]),
                time2retain: u16::from_be_bytes([b[42], b[43]]),
            }),
            Opcode::R2t => Bhs::R2t(R2t {
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                r2t_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
                desired_length: get32(b, 44),
            }),
            Opcode::AsyncMessage => Bhs::AsyncMessage(AsyncMessage {
                lun: lun(),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                event: b[36],
                vcode: b[37],
                parameter1: u16::from_be_bytes([b[38], b[39]]),
                parameter2: u16::from_be_bytes([b[40], b[41]]),
                parameter3: u16::from_be_bytes([b[42], b[43]]),
            }),
            Opcode::Reject => Bhs::Reject(Reject {
                reason: b[2],
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                data_sn: get32(b, 36),
            }),
            Opcode::Unknown(opcode) => Bhs::Unknown {
                opcode,
                raw: Box::new(*b),
            },
        })
    }
}

fn stage(bits: u8, opcode: &'static str) -> Result<Stage, PduError> {
    Stage::from_bits(bits).ok_or(PduError::Malformed {
        opcode,
        what: "reserved login stage value 2",
    })
}

fn flag(on: bool, bit: u8) -> u8 {
    if on {
        bit
    } else {
        0
    }
}

fn imm(b: &mut [u8; BHS_LEN], on: bool) {
    if on {
        b[0] |= 0x40;
    }
}

fn put32(b: &mut [u8; BHS_LEN], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn get32(b: &[u8; BHS_LEN], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
