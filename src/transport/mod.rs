//! Transports that carry iSCSI PDUs.

pub mod tcp;
