//! What one iSER connection is shaped like: the limits it puts on the
//! login (no digests, data segments that fit a receive buffer, the most
//! one command moves) and the sizes of its queues and rings. Pure values,
//! host-tested.

use rlun_iscsi::proto::digest::DigestType;
use rlun_iscsi::proto::negotiate::InitiatorProposal;
use rlun_iscsi::proto::pdu::{Digests, FrameLimits};

/// The most data one SCSI command moves over iSER (512 KiB): tgtd's iSER
/// transport refuses a larger RDMA transfer for one task ("rdma-wr size …
/// too big") and closes the connection, and the Linux iSER initiator sends
/// no larger commands by default either. Targets do not announce this limit
/// (it is not MaxBurstLength), so rlun keeps to it for every iSER target.
pub const MAX_DIRECT_TRANSFER: u64 = 512 * 1024;

/// Environment variable that chooses how data buffers are registered with
/// the RDMA device: `pool` (the default) or `per-command`.
pub const REGISTRATION_ENV: &str = "RLUN_ISER_REGISTRATION";

/// How an iSER connection registers the memory of SCSI data
/// ([`REGISTRATION_ENV`]).
///
/// `Pool`: the process-wide buffer pool is registered once, at connect,
/// and every buffer from it is named by the pool's keys; only buffers from
/// outside it (a pool at its cap) are registered per command. `PerCommand`
/// leaves the pool off, so every read buffer and all write data is
/// registered for its command and released when the command ends (its task
/// hold). That is the slower path of the two, the one the kernel's iSER
/// initiator takes with `always_register`; it exists so that the path a
/// full pool falls back to can be run, and checked, on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    Pool,
    PerCommand,
}

impl Registration {
    /// The mode a value of [`REGISTRATION_ENV`] names (unset or empty:
    /// `Pool`); the value itself when it names none.
    pub fn parse(value: Option<&str>) -> Result<Registration, String> {
        match value.map(str::trim) {
            None | Some("") | Some("pool") => Ok(Registration::Pool),
            Some("per-command") => Ok(Registration::PerCommand),
            Some(other) => Err(other.to_string()),
        }
    }
}

/// The largest data segment the target may send us in one PDU: what one
/// receive buffer holds after the iSER header, BHS and AHS.
pub const MAX_RECV_DATA: u32 = 8192;

/// Receive buffers posted at all times: a response for every command the
/// session keeps in flight (queue depth 128 by default; LIO's CmdSN window
/// is 64) plus unsolicited PDUs (NOP-In, Async Message), with margin. A
/// target that outruns them waits on RNR retries, it does not fail.
pub const RECV_SLOTS: usize = 160;
/// One receive buffer: iSER header, BHS, the largest AHS, and a data segment
/// of up to [`MAX_RECV_DATA`] bytes plus padding.
pub const RECV_SLOT_LEN: usize = 16 * 1024;
/// Send buffers (and the send queue depth).
pub const SEND_SLOTS: usize = 32;
pub const SEND_SLOT_LEN: usize = 16 * 1024;
/// At most this many Sends in a row go unsignalled
/// ([`rlun_sys::rdma::slots::SendSlots`]).
pub const SIGNAL_EVERY: usize = SEND_SLOTS / 4;
/// Sends chained into one `ibv_post_send`.
pub const MAX_CHAIN: usize = SEND_SLOTS / 2;
/// Work completions taken from the receive CQ per poll; received buffers
/// are reposted once per batch, as one chain.
pub const POLL_BATCH: usize = 16;
// A chain never needs more slots than exist, and signalling at least every
// SIGNAL_EVERY Sends keeps the send queue from filling with Sends that
// nothing completes.
const _: () = assert!(MAX_CHAIN <= SEND_SLOTS);
const _: () = assert!(SIGNAL_EVERY >= 1 && SIGNAL_EVERY <= SEND_SLOTS / 2);

/// What rlun proposes at login over iSER, from the TCP proposal (the driver
/// adds RDMAExtensions=Yes itself for a direct transport): no digests (RFC
/// 7145 §7.2; discovery sessions still send the digest keys), and every PDU
/// the target sends must fit one receive buffer: InitiatorRecvDataSegmentLength
/// (normal sessions) and MaxRecvDataSegmentLength (discovery) at most
/// [`MAX_RECV_DATA`]. Immediate data stays on: TargetRecvDataSegmentLength
/// (default 8192, what LIO receives into) bounds it.
pub fn adjust_proposal(p: &mut InitiatorProposal) {
    p.header_digest = vec![DigestType::None];
    p.data_digest = vec![DigestType::None];
    p.max_recv_data_segment_length = p.max_recv_data_segment_length.min(MAX_RECV_DATA);
    p.initiator_recv_data_segment_length = p.initiator_recv_data_segment_length.min(MAX_RECV_DATA);
}

/// No digests on iSER (RFC 7145 §7.2), and never more data than a receive
/// buffer holds.
pub fn iser_limits(l: FrameLimits) -> FrameLimits {
    FrameLimits {
        digests: Digests::default(),
        max_data_segment: l.max_data_segment.min(MAX_RECV_DATA),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_limit_known_before_connecting_is_this_one() {
        assert_eq!(
            crate::url::TransportKind::Iser.max_transfer(),
            Some(super::MAX_DIRECT_TRANSFER)
        );
    }

    #[test]
    fn registration_mode_from_the_environment() {
        use super::Registration;
        assert_eq!(Registration::parse(None), Ok(Registration::Pool));
        assert_eq!(Registration::parse(Some("")), Ok(Registration::Pool));
        assert_eq!(Registration::parse(Some("pool")), Ok(Registration::Pool));
        assert_eq!(
            Registration::parse(Some(" per-command ")),
            Ok(Registration::PerCommand)
        );
        assert_eq!(
            Registration::parse(Some("always")),
            Err("always".to_string())
        );
    }

    use super::*;
    use rlun_iscsi::proto::connection::FeatureParams;
    use rlun_sys::rdma::slots::SendSlots;

    #[test]
    fn iser_proposal_drops_digests_and_fits_receive_buffers() {
        let mut p = InitiatorProposal::default();
        assert!(p.max_recv_data_segment_length > MAX_RECV_DATA);
        assert!(p.initiator_recv_data_segment_length > MAX_RECV_DATA);

        adjust_proposal(&mut p);

        assert_eq!(p.header_digest, vec![DigestType::None]);
        assert_eq!(p.data_digest, vec![DigestType::None]);
        assert_eq!(p.max_recv_data_segment_length, MAX_RECV_DATA);
        assert_eq!(p.initiator_recv_data_segment_length, MAX_RECV_DATA);
        assert!(
            p.immediate_data,
            "immediate data stays, bounded by TargetRecvDataSegmentLength"
        );
    }

    #[test]
    fn received_frames_have_no_digests_and_fit_a_receive_buffer() {
        let l = iser_limits(FrameLimits {
            digests: Digests {
                header: true,
                data: true,
            },
            max_data_segment: 256 * 1024,
        });
        assert_eq!(l.digests, Digests::default());
        assert_eq!(l.max_data_segment, MAX_RECV_DATA);
        // A receive buffer holds the largest such PDU with its iSER header,
        // BHS, the largest AHS (1020 bytes) and padding.
        assert!(28 + 48 + 1020 + MAX_RECV_DATA as usize + 3 <= RECV_SLOT_LEN);
    }

    #[test]
    fn batched_reposting_keeps_a_receive_for_every_command_in_flight() {
        // The reader holds back at most one poll batch of receive buffers
        // (reposted together after the batch); the rest stay posted. They
        // must still cover a response for every command at the default
        // queue depth plus unsolicited PDUs (NOP-In, Async Message, Reject).
        let unsolicited = 16;
        let held_back = POLL_BATCH;
        assert!(
            RECV_SLOTS - held_back >= FeatureParams::default().queue_depth as usize + unsolicited,
            "{RECV_SLOTS} receive buffers, {held_back} held back at once"
        );
    }

    #[test]
    fn send_signalling_fits_the_send_queue() {
        // The constants themselves are checked at compile time (below
        // their definitions); the accounting accepts them.
        let s = SendSlots::new(SEND_SLOTS, SIGNAL_EVERY);
        assert_eq!((s.free(), s.every()), (SEND_SLOTS, SIGNAL_EVERY));
    }
}
