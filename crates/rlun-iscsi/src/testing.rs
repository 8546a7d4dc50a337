//! Canned target PDUs for tests of code built on this crate (feature
//! `test-utils`; always on for this crate's own tests).

use bytes::Bytes;

use crate::proto::pdu::{Bhs, DataIn, Pdu, Residual, RESERVED_TAG};

/// A Data-In PDU as a target sends it: `data` at `offset` of task `itt`'s
/// read, its `data_sn`-th; the `last` one carries status (GOOD). Sequence
/// numbers: StatSN 1, ExpCmdSN 2, MaxCmdSN 40.
pub fn data_in(itt: u32, data_sn: u32, offset: u32, data: &[u8], last: bool) -> Pdu {
    Pdu::with_data(
        Bhs::DataIn(DataIn {
            final_: last,
            ack: false,
            status_present: last,
            residual: Residual::default(),
            status: 0,
            lun: [0; 8],
            itt,
            ttt: RESERVED_TAG,
            stat_sn: 1,
            exp_cmd_sn: 2,
            max_cmd_sn: 40,
            data_sn,
            buffer_offset: offset,
        }),
        Bytes::copy_from_slice(data),
    )
}
