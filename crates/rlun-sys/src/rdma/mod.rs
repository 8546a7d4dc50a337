//! rdma-core, loaded with `dlopen` at first use.

pub mod ffi;
