//! A thin, hand-written binding to the system's rdma-core libraries
//! (`libibverbs.so.1`, `librdmacm.so.1`), loaded with `dlopen` at first use.
//!
//! Why not link them: a binary linked to rdma-core does not even start where
//! the libraries are missing, although most users of rlun only speak TCP.
//! Loading them on demand lets `iser://` fail with a message that says what
//! to install, and lets the crate build with no RDMA headers, cmake or
//! libclang at all.
//!
//! Only what an iSER initiator needs is declared: the RDMA CM (event channel,
//! id, address/route resolution, QP creation on the id, connect with private
//! data, events, disconnect) and a handful of verbs (device list, PD,
//! completion channel, CQ, memory registration). `ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq` are `static
//! inline` in `<infiniband/verbs.h>`: they call through the function table in
//! `struct ibv_context`, and so do we ([`IbvContext`]).
//!
//! Struct layouts are those of rdma-core's public headers (stable ABI since
//! rdma-core 13; Debian 12 ships 44) on 64-bit Linux; the test
//! `layouts_match_system_headers` compiles a C program against the installed
//! headers and compares every offset and size used here.
//!
//! The module is private to the crate: everything above it goes through the
//! safe wrappers of [`super`]. Fields no wrapper reads are declared for
//! their place in the C layout (hence `dead_code` is allowed here).
#![allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

// ---- libibverbs types -------------------------------------------------------

/// `struct ibv_context_ops`: only the four entries the inline verbs use are
/// named; the others are opaque pointers kept for their place.
#[repr(C)]
pub struct IbvContextOps {
    _before_poll_cq: [*mut c_void; 11],
    pub poll_cq: unsafe extern "C" fn(cq: *mut IbvCq, n: c_int, wc: *mut IbvWc) -> c_int,
    pub req_notify_cq: unsafe extern "C" fn(cq: *mut IbvCq, solicited_only: c_int) -> c_int,
    _before_post_send: [*mut c_void; 12],
    pub post_send:
        unsafe extern "C" fn(qp: *mut IbvQp, wr: *mut IbvSendWr, bad: *mut *mut IbvSendWr) -> c_int,
    pub post_recv:
        unsafe extern "C" fn(qp: *mut IbvQp, wr: *mut IbvRecvWr, bad: *mut *mut IbvRecvWr) -> c_int,
    _after_post_recv: [*mut c_void; 5],
}

/// `struct ibv_context` (prefix; we never allocate one).
#[repr(C)]
pub struct IbvContext {
    pub device: *mut c_void,
    pub ops: IbvContextOps,
}

/// `struct ibv_qp` (prefix).
#[repr(C)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    _ptrs: [*mut c_void; 5],
    pub handle: u32,
    pub qp_num: u32,
}

/// `struct ibv_cq` (prefix).
#[repr(C)]
pub struct IbvCq {
    pub context: *mut IbvContext,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct IbvCompChannel {
    pub context: *mut IbvContext,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut c_void,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr`. The unions after `imm_data` (RDMA/atomic/UD
/// addressing, XRC, memory-window bind, TSO) are unused by an iSER
/// initiator, which only posts Sends: they stay zero.
#[repr(C)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    pub imm_data: u32,
    _unions: [u64; 11],
}

impl IbvSendWr {
    /// A Send of `sges`, signalled (it makes a work completion) or not.
    pub fn send(wr_id: u64, sges: &mut [IbvSge], signalled: bool) -> IbvSendWr {
        IbvSendWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as c_int,
            opcode: IBV_WR_SEND,
            send_flags: if signalled { IBV_SEND_SIGNALED } else { 0 },
            imm_data: 0,
            _unions: [0; 11],
        }
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

pub const IBV_QPT_RC: c_int = 2;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_SEND_SIGNALED: u32 = 1 << 1;
pub const IBV_WC_SUCCESS: c_int = 0;
pub const IBV_WC_WR_FLUSH_ERR: c_int = 5;
pub const IBV_WC_REM_ACCESS_ERR: c_int = 10;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;

// ---- librdmacm types --------------------------------------------------------

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct RdmaEventChannel {
    pub fd: c_int,
}

/// `struct rdma_cm_id` (prefix).
#[repr(C)]
pub struct RdmaCmId {
    pub verbs: *mut IbvContext,
    pub channel: *mut RdmaEventChannel,
    pub context: *mut c_void,
    pub qp: *mut IbvQp,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_cm_event` (the `conn` member of the `param` union).
#[repr(C)]
pub struct RdmaCmEvent {
    pub id: *mut RdmaCmId,
    pub listen_id: *mut RdmaCmId,
    pub event: c_int,
    pub status: c_int,
    pub conn: RdmaConnParam,
}

pub const RDMA_PS_TCP: c_int = 0x0106;

/// `enum rdma_cm_event_type`.
pub mod cm_event {
    use std::ffi::c_int;
    pub const ADDR_RESOLVED: c_int = 0;
    pub const ROUTE_RESOLVED: c_int = 2;
    pub const CONNECT_ERROR: c_int = 6;
    pub const UNREACHABLE: c_int = 7;
    pub const REJECTED: c_int = 8;
    pub const ESTABLISHED: c_int = 9;
    pub const DISCONNECTED: c_int = 10;
    pub const DEVICE_REMOVAL: c_int = 11;
    pub const ADDR_CHANGE: c_int = 14;
    pub const TIMEWAIT_EXIT: c_int = 15;
}

// ---- the loaded libraries ---------------------------------------------------

/// The rdma-core entry points rlun calls, resolved from the system libraries.
pub struct Api {
    pub ibv_get_device_list: unsafe extern "C" fn(num: *mut c_int) -> *mut *mut c_void,
    pub ibv_free_device_list: unsafe extern "C" fn(list: *mut *mut c_void),
    pub ibv_alloc_pd: unsafe extern "C" fn(ctx: *mut IbvContext) -> *mut c_void,
    pub ibv_dealloc_pd: unsafe extern "C" fn(pd: *mut c_void) -> c_int,
    pub ibv_create_comp_channel: unsafe extern "C" fn(ctx: *mut IbvContext) -> *mut IbvCompChannel,
    pub ibv_destroy_comp_channel: unsafe extern "C" fn(ch: *mut IbvCompChannel) -> c_int,
    pub ibv_create_cq: unsafe extern "C" fn(
        ctx: *mut IbvContext,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut IbvCompChannel,
        comp_vector: c_int,
    ) -> *mut IbvCq,
    pub ibv_destroy_cq: unsafe extern "C" fn(cq: *mut IbvCq) -> c_int,
    pub ibv_get_cq_event: unsafe extern "C" fn(
        ch: *mut IbvCompChannel,
        cq: *mut *mut IbvCq,
        cq_context: *mut *mut c_void,
    ) -> c_int,
    pub ibv_ack_cq_events: unsafe extern "C" fn(cq: *mut IbvCq, nevents: u32),
    pub ibv_reg_mr: unsafe extern "C" fn(
        pd: *mut c_void,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> *mut IbvMr,
    pub ibv_dereg_mr: unsafe extern "C" fn(mr: *mut IbvMr) -> c_int,
    pub ibv_wc_status_str: unsafe extern "C" fn(status: c_int) -> *const c_char,

    pub rdma_create_event_channel: unsafe extern "C" fn() -> *mut RdmaEventChannel,
    pub rdma_destroy_event_channel: unsafe extern "C" fn(ch: *mut RdmaEventChannel),
    pub rdma_create_id: unsafe extern "C" fn(
        ch: *mut RdmaEventChannel,
        id: *mut *mut RdmaCmId,
        context: *mut c_void,
        ps: c_int,
    ) -> c_int,
    pub rdma_destroy_id: unsafe extern "C" fn(id: *mut RdmaCmId) -> c_int,
    pub rdma_resolve_addr: unsafe extern "C" fn(
        id: *mut RdmaCmId,
        src: *mut libc::sockaddr,
        dst: *mut libc::sockaddr,
        timeout_ms: c_int,
    ) -> c_int,
    pub rdma_resolve_route: unsafe extern "C" fn(id: *mut RdmaCmId, timeout_ms: c_int) -> c_int,
    pub rdma_create_qp:
        unsafe extern "C" fn(id: *mut RdmaCmId, pd: *mut c_void, attr: *mut IbvQpInitAttr) -> c_int,
    pub rdma_destroy_qp: unsafe extern "C" fn(id: *mut RdmaCmId),
    pub rdma_connect: unsafe extern "C" fn(id: *mut RdmaCmId, param: *mut RdmaConnParam) -> c_int,
    pub rdma_disconnect: unsafe extern "C" fn(id: *mut RdmaCmId) -> c_int,
    pub rdma_get_cm_event:
        unsafe extern "C" fn(ch: *mut RdmaEventChannel, event: *mut *mut RdmaCmEvent) -> c_int,
    pub rdma_ack_cm_event: unsafe extern "C" fn(event: *mut RdmaCmEvent) -> c_int,
    pub rdma_event_str: unsafe extern "C" fn(event: c_int) -> *const c_char,
}

/// Why the rdma-core libraries could not be used: which one, and what
/// `dlopen`/`dlsym` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub library: &'static str,
    pub detail: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot load {}: {}", self.library, self.detail)
    }
}

impl std::error::Error for LoadError {}

const LIBIBVERBS: &CStr = c"libibverbs.so.1";
const LIBRDMACM: &CStr = c"librdmacm.so.1";

fn dlerror_string() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc,
    // valid until the next dl* call on this thread; we copy it at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".to_string()
    } else {
        // SAFETY: non-NULL, NUL-terminated (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn open(name: &'static CStr) -> Result<*mut c_void, LoadError> {
    // SAFETY: `name` is a valid C string; dlopen has no other preconditions.
    // The handle is never closed: the functions stay valid for the process.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(LoadError {
            library: name.to_str().unwrap_or("?"),
            detail: dlerror_string(),
        });
    }
    Ok(h)
}

fn sym(h: *mut c_void, lib: &'static CStr, name: &CStr) -> Result<*mut c_void, LoadError> {
    // SAFETY: `h` is a live handle from dlopen, `name` a valid C string.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    if p.is_null() {
        return Err(LoadError {
            library: lib.to_str().unwrap_or("?"),
            detail: format!(
                "symbol {} missing: {}",
                name.to_string_lossy(),
                dlerror_string()
            ),
        });
    }
    Ok(p)
}

/// Reinterpret a symbol address as the function pointer type `F`.
///
/// # Safety
/// `F` must be an `unsafe extern "C" fn` type whose signature is the C
/// prototype of the function at `p`.
unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: same size (checked at compile time); validity is the caller's
    // promise above.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

macro_rules! load_api {
    ($ibv:ident, $ibvlib:ident, $cm:ident, $cmlib:ident; ibv: $($i:ident),*; cm: $($c:ident),* $(,)?) => {
        Api {
            $(
                // SAFETY: the symbol is rdma-core's exported function of that
                // name, whose C prototype the field's type reproduces.
                $i: unsafe { as_fn(sym($ibv, $ibvlib, &cstr(stringify!($i)))?) },
            )*
            $(
                // SAFETY: as above, for librdmacm.
                $c: unsafe { as_fn(sym($cm, $cmlib, &cstr(stringify!($c)))?) },
            )*
        }
    };
}

fn cstr(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).expect("symbol names have no NUL")
}

fn load() -> Result<Api, LoadError> {
    load_from(LIBIBVERBS, LIBRDMACM)
}

/// Load the API from the libraries of these names (the tests name one
/// that does not exist).
fn load_from(libibverbs: &'static CStr, librdmacm: &'static CStr) -> Result<Api, LoadError> {
    let ibv = open(libibverbs)?;
    let cm = open(librdmacm)?;
    Ok(load_api!(ibv, libibverbs, cm, librdmacm;
        ibv: ibv_get_device_list, ibv_free_device_list, ibv_alloc_pd, ibv_dealloc_pd,
             ibv_create_comp_channel, ibv_destroy_comp_channel, ibv_create_cq, ibv_destroy_cq,
             ibv_get_cq_event, ibv_ack_cq_events, ibv_reg_mr, ibv_dereg_mr, ibv_wc_status_str;
        cm: rdma_create_event_channel, rdma_destroy_event_channel, rdma_create_id, rdma_destroy_id,
            rdma_resolve_addr, rdma_resolve_route, rdma_create_qp, rdma_destroy_qp, rdma_connect,
            rdma_disconnect, rdma_get_cm_event, rdma_ack_cm_event, rdma_event_str,
    ))
}

/// The rdma-core API, loaded once per process.
pub fn api() -> Result<&'static Api, LoadError> {
    static API: OnceLock<Result<Api, LoadError>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

// SAFETY: `Api` holds only function pointers into libraries that stay loaded
// for the life of the process; calling them from any thread is what
// rdma-core documents as supported.
unsafe impl Send for Api {}
// SAFETY: as above; the struct is immutable after loading.
unsafe impl Sync for Api {}

/// A static C string of rdma-core as `&'static str`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that lives for the
/// rest of the process (a string constant of a library that is never
/// unloaded, see [`api`]).
unsafe fn static_str(p: *const c_char) -> Option<&'static str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, NUL-terminated and immortal (the caller's promise).
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Name of a CM event type (`rdma_event_str`).
pub fn event_name(api: &Api, event: c_int) -> &'static str {
    // SAFETY: rdma_event_str returns a pointer to a string constant of
    // librdmacm for any value (an "unrecognized" one for unknown values).
    let p = unsafe { (api.rdma_event_str)(event) };
    // SAFETY: such a constant lives as long as the library, which stays
    // loaded for the process.
    unsafe { static_str(p) }.unwrap_or("unknown CM event")
}

/// Name of a work completion status (`ibv_wc_status_str`).
pub fn wc_status_name(api: &Api, status: c_int) -> &'static str {
    // SAFETY: ibv_wc_status_str returns a pointer to a string constant of
    // libibverbs for any value.
    let p = unsafe { (api.ibv_wc_status_str)(status) };
    // SAFETY: as in `event_name`.
    unsafe { static_str(p) }.unwrap_or("unknown work completion status")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    /// Every layout this module relies on, as the installed rdma-core headers
    /// define it. Skipped (with a message) only when the headers or a C
    /// compiler are absent; scripts/install-test-deps.sh installs both.
    #[test]
    fn layouts_match_system_headers() {
        let have_headers = std::path::Path::new("/usr/include/infiniband/verbs.h").exists()
            && std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        if !have_headers || Command::new(&cc).arg("--version").output().is_err() {
            eprintln!("SKIP: rdma-core headers (libibverbs-dev, librdmacm-dev) or {cc} missing");
            return;
        }
        let checks: &[(&str, usize)] = &[
            (
                "offsetof(struct ibv_context, ops.poll_cq)",
                offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, poll_cq),
            ),
            (
                "offsetof(struct ibv_context, ops.req_notify_cq)",
                offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, req_notify_cq),
            ),
            (
                "offsetof(struct ibv_context, ops.post_send)",
                offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, post_send),
            ),
            (
                "offsetof(struct ibv_context, ops.post_recv)",
                offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, post_recv),
            ),
            ("sizeof(struct ibv_context_ops)", size_of::<IbvContextOps>()),
            (
                "offsetof(struct ibv_qp, context)",
                offset_of!(IbvQp, context),
            ),
            ("offsetof(struct ibv_qp, qp_num)", offset_of!(IbvQp, qp_num)),
            (
                "offsetof(struct ibv_cq, context)",
                offset_of!(IbvCq, context),
            ),
            (
                "offsetof(struct ibv_comp_channel, fd)",
                offset_of!(IbvCompChannel, fd),
            ),
            (
                "sizeof(struct ibv_comp_channel)",
                size_of::<IbvCompChannel>(),
            ),
            ("offsetof(struct ibv_mr, addr)", offset_of!(IbvMr, addr)),
            ("offsetof(struct ibv_mr, lkey)", offset_of!(IbvMr, lkey)),
            ("offsetof(struct ibv_mr, rkey)", offset_of!(IbvMr, rkey)),
            ("sizeof(struct ibv_mr)", size_of::<IbvMr>()),
            ("sizeof(struct ibv_sge)", size_of::<IbvSge>()),
            (
                "offsetof(struct ibv_send_wr, sg_list)",
                offset_of!(IbvSendWr, sg_list),
            ),
            (
                "offsetof(struct ibv_send_wr, num_sge)",
                offset_of!(IbvSendWr, num_sge),
            ),
            (
                "offsetof(struct ibv_send_wr, opcode)",
                offset_of!(IbvSendWr, opcode),
            ),
            (
                "offsetof(struct ibv_send_wr, send_flags)",
                offset_of!(IbvSendWr, send_flags),
            ),
            (
                "offsetof(struct ibv_send_wr, imm_data)",
                offset_of!(IbvSendWr, imm_data),
            ),
            ("sizeof(struct ibv_send_wr)", size_of::<IbvSendWr>()),
            ("sizeof(struct ibv_recv_wr)", size_of::<IbvRecvWr>()),
            ("offsetof(struct ibv_wc, status)", offset_of!(IbvWc, status)),
            ("offsetof(struct ibv_wc, opcode)", offset_of!(IbvWc, opcode)),
            (
                "offsetof(struct ibv_wc, byte_len)",
                offset_of!(IbvWc, byte_len),
            ),
            ("offsetof(struct ibv_wc, qp_num)", offset_of!(IbvWc, qp_num)),
            ("sizeof(struct ibv_wc)", size_of::<IbvWc>()),
            (
                "offsetof(struct ibv_qp_init_attr, cap)",
                offset_of!(IbvQpInitAttr, cap),
            ),
            (
                "offsetof(struct ibv_qp_init_attr, qp_type)",
                offset_of!(IbvQpInitAttr, qp_type),
            ),
            (
                "sizeof(struct ibv_qp_init_attr)",
                size_of::<IbvQpInitAttr>(),
            ),
            (
                "offsetof(struct rdma_cm_id, verbs)",
                offset_of!(RdmaCmId, verbs),
            ),
            ("offsetof(struct rdma_cm_id, qp)", offset_of!(RdmaCmId, qp)),
            (
                "offsetof(struct rdma_event_channel, fd)",
                offset_of!(RdmaEventChannel, fd),
            ),
            (
                "offsetof(struct rdma_cm_event, event)",
                offset_of!(RdmaCmEvent, event),
            ),
            (
                "offsetof(struct rdma_cm_event, status)",
                offset_of!(RdmaCmEvent, status),
            ),
            (
                "offsetof(struct rdma_cm_event, param.conn)",
                offset_of!(RdmaCmEvent, conn),
            ),
            ("sizeof(struct rdma_conn_param)", size_of::<RdmaConnParam>()),
            (
                "offsetof(struct rdma_conn_param, qp_num)",
                offset_of!(RdmaConnParam, qp_num),
            ),
            ("IBV_QPT_RC", IBV_QPT_RC as usize),
            ("IBV_WR_SEND", IBV_WR_SEND as usize),
            ("IBV_SEND_SIGNALED", IBV_SEND_SIGNALED as usize),
            ("IBV_WC_WR_FLUSH_ERR", IBV_WC_WR_FLUSH_ERR as usize),
            ("IBV_WC_REM_ACCESS_ERR", IBV_WC_REM_ACCESS_ERR as usize),
            ("IBV_ACCESS_LOCAL_WRITE", IBV_ACCESS_LOCAL_WRITE as usize),
            ("IBV_ACCESS_REMOTE_WRITE", IBV_ACCESS_REMOTE_WRITE as usize),
            ("IBV_ACCESS_REMOTE_READ", IBV_ACCESS_REMOTE_READ as usize),
            ("RDMA_PS_TCP", RDMA_PS_TCP as usize),
            (
                "RDMA_CM_EVENT_ADDR_RESOLVED",
                cm_event::ADDR_RESOLVED as usize,
            ),
            (
                "RDMA_CM_EVENT_ROUTE_RESOLVED",
                cm_event::ROUTE_RESOLVED as usize,
            ),
            (
                "RDMA_CM_EVENT_CONNECT_ERROR",
                cm_event::CONNECT_ERROR as usize,
            ),
            ("RDMA_CM_EVENT_UNREACHABLE", cm_event::UNREACHABLE as usize),
            (
                "RDMA_CM_EVENT_DISCONNECTED",
                cm_event::DISCONNECTED as usize,
            ),
            (
                "RDMA_CM_EVENT_DEVICE_REMOVAL",
                cm_event::DEVICE_REMOVAL as usize,
            ),
            ("RDMA_CM_EVENT_ESTABLISHED", cm_event::ESTABLISHED as usize),
            ("RDMA_CM_EVENT_REJECTED", cm_event::REJECTED as usize),
            (
                "RDMA_CM_EVENT_TIMEWAIT_EXIT",
                cm_event::TIMEWAIT_EXIT as usize,
            ),
            ("RDMA_CM_EVENT_ADDR_CHANGE", cm_event::ADDR_CHANGE as usize),
        ];
        let dir = tempfile::tempdir().unwrap();
        let mut src = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\
             #include <rdma/rdma_cma.h>\nint main(void) {\n",
        );
        for (expr, _) in checks {
            src.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
        }
        src.push_str("  return 0;\n}\n");
        let c = dir.path().join("layout.c");
        let exe = dir.path().join("layout");
        std::fs::write(&c, src).unwrap();
        let out = Command::new(&cc)
            .arg(&c)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        let got: Vec<usize> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(got.len(), checks.len());
        let wrong: Vec<String> = checks
            .iter()
            .zip(&got)
            .filter(|((_, ours), c)| ours != *c)
            .map(|((expr, ours), c)| format!("{expr}: C says {c}, rlun has {ours}"))
            .collect();
        assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
    }

    #[test]
    fn a_missing_library_is_named_in_the_load_error() {
        let e = load_from(c"libibverbs-rlun-missing.so.1", LIBRDMACM)
            .err()
            .expect("no such library");
        assert_eq!(e.library, "libibverbs-rlun-missing.so.1");
        assert!(e.detail.contains("libibverbs-rlun-missing.so.1"), "{e}");
        let e = load_from(LIBIBVERBS, c"librdmacm-rlun-missing.so.1")
            .err()
            .expect("no such library");
        assert_eq!(e.library, "librdmacm-rlun-missing.so.1");
        assert!(
            e.to_string()
                .starts_with("cannot load librdmacm-rlun-missing.so.1: "),
            "{e}"
        );
    }

    #[test]
    fn status_and_event_names_come_from_rdma_core() {
        let api = api().expect("rdma-core is installed where the tests run");
        assert_eq!(wc_status_name(api, IBV_WC_SUCCESS), "success");
        assert_eq!(
            wc_status_name(api, IBV_WC_WR_FLUSH_ERR),
            "Work Request Flushed Error"
        );
        assert_eq!(
            event_name(api, cm_event::DISCONNECTED),
            "RDMA_CM_EVENT_DISCONNECTED"
        );
    }

    #[test]
    fn libraries_load_on_this_host() {
        // rdma-core's libraries are installed wherever the tests run
        // (install-test-deps.sh); loading them needs no RDMA device.
        match api() {
            Ok(_) => {}
            Err(e) => panic!("{}: {}", e.library, e.detail),
        }
    }
}
