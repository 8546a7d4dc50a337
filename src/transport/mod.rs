//! Transports that carry iSCSI PDUs: TCP, and iSER (RDMA).

pub mod iser;
pub mod tcp;
