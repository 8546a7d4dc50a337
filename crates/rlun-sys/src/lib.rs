//! rlun-sys: the only crate of rlun with `unsafe` code.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod nbd;
pub mod rdma;
