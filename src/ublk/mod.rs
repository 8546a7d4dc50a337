//! The ublk front end: one export as `/dev/ublkbN`, through the kernel's
//! userspace block driver (`ublk_drv`, Linux 6.0+) and io_uring, with the
//! `libublk` crate.
//!
//! The kernel hands each request to a queue thread as an io_uring command
//! completion; rlun answers it with the next command (COMMIT_AND_FETCH).
//! There is no socket between the kernel and rlun: a READ's data is copied
//! once, from rlun's page (or the PDU's buffer) into the tag's I/O buffer,
//! which the kernel then copies into the request's pages; a WRITE the other
//! way. (`UBLK_F_USER_COPY` would let rlun `pwrite` a cached page straight
//! into the request, and `UBLK_F_SUPPORT_ZERO_COPY`/`AUTO_BUF_REG` lend the
//! request's pages to an io_uring operation of the server's own — neither
//! fits data that comes from a tokio socket today; see ARCHITECTURE.md.)
//!
//! # Threads
//!
//! libublk runs one thread per hardware queue, each a `smol` executor
//! with one task per tag, waiting in its io_uring. A tag's task polls the
//! export layer's futures itself, on the queue thread, inside the tokio
//! runtime's context (`Handle::enter`: timers and spawns work); no task
//! is spawned and no channel crossed per request. What wakes those futures
//! (the session driver completing a command) runs on tokio's threads while
//! the queue thread sleeps in its io_uring, so the task's waker is wrapped
//! in one that also rings the queue's doorbell — a pipe the queue's ring
//! polls — once per batch: a flag set by the first wake and cleared by the
//! queue thread after it drained the pipe. A cache hit completes without
//! leaving the queue thread. (Spawning each request onto tokio instead,
//! answered through a oneshot, cost 15–20 % more CPU per GiB in the lab.)
//!
//! # Restart without errors
//!
//! Devices are created with `UBLK_F_USER_RECOVERY` and
//! `UBLK_F_USER_RECOVERY_REISSUE`: when rlun dies the kernel keeps the
//! device and queues its I/O (requests rlun had taken are re-issued), and
//! a new rlun takes the device over with START/END_USER_RECOVERY
//! ([`Options::recover`]); the filesystem on it sees a stall, not an
//! error. Data rlun had acknowledged but not written (`--cache
//! write-back`) dies with it: recovery is safe with write-through and
//! none only.

mod recovery;
mod request;

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use bytes::Bytes;
use io_uring::{opcode, types};
use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::helpers::IoBuf;
use libublk::io::{UblkDev, UblkQueue};
use libublk::{BufDesc, UblkError, UblkFlags};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::client::Lun;
use crate::export::{Export, ExportInfo, ZeroMode};

pub use recovery::{guard_step, is_orphan_of, may_recover, DevState, GuardStep};
pub use request::{decode, io_buf_bytes, params, Request};

/// The control device `ublk_drv` creates.
pub const CONTROL: &str = "/dev/ublk-control";

/// Largest per-tag I/O buffer (and so request): 512 KiB, what the kernel
/// initiator's default `max_sectors_kb` allows too.
pub const MAX_IO_BUF: u32 = 512 << 10;

/// What can go wrong with a ublk device.
#[derive(Debug, thiserror::Error)]
pub enum UblkFailure {
    #[error(
        "the ublk driver is not loaded ({CONTROL} is missing): run `modprobe ublk_drv` \
         (Linux 6.0 or later, built with CONFIG_BLK_DEV_UBLK; Debian 12's own 6.1 kernel is not, \
         its bookworm-backports 6.12 kernel is)"
    )]
    NoDriver,
    #[error("io_uring is disabled on this machine (sysctl kernel.io_uring_disabled = {0}); ublk needs it")]
    NoIoUring(u32),
    #[error("attaching a ublk device needs root (or CAP_SYS_ADMIN)")]
    NotRoot,
    #[error("{0} is not a ublk device (expected /dev/ublkb<N>)")]
    NotUblk(String),
    #[error("/dev/ublkb{0} exists already (attached by another process; `rlun attach --ublk --recover /dev/ublkb{0}` takes over one whose rlun died)")]
    Busy(u32),
    #[error("/dev/ublkb{0} does not exist: there is nothing to recover")]
    NoSuchDevice(u32),
    #[error("/dev/ublkb{id} is served by a live process (pid {pid}): there is nothing to recover")]
    Alive { id: u32, pid: i32 },
    #[error("/dev/ublkb{id} was attached to {stored}, not to {asked}: refusing to recover it with another LUN")]
    OtherLun {
        id: u32,
        stored: String,
        asked: String,
    },
    #[error("{what}: {reason}")]
    Driver { what: String, reason: String },
    #[error("the ublk server thread ended before the device was live")]
    Ended,
}

/// An errno-style [`UblkError`] in words.
pub fn describe(e: &UblkError) -> String {
    match e {
        UblkError::OtherError(n) | UblkError::UringIOError(n) => {
            std::io::Error::from_raw_os_error(n.abs()).to_string()
        }
        UblkError::IOError(e) => e.to_string(),
        other => other.to_string(),
    }
}

fn driver(what: impl Into<String>) -> impl FnOnce(UblkError) -> UblkFailure {
    let what = what.into();
    move |e| UblkFailure::Driver {
        what,
        reason: describe(&e),
    }
}

/// The index N of `/dev/ublkbN` (or `ublkbN`).
pub fn parse_device(dev: &Path) -> Result<u32, UblkFailure> {
    let s = dev.to_string_lossy();
    s.strip_prefix("/dev/")
        .unwrap_or(&s)
        .strip_prefix("ublkb")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| UblkFailure::NotUblk(s.into_owned()))
}

/// Whether a device path names a ublk device (`/dev/ublkbN`).
pub fn is_ublk_path(dev: &Path) -> bool {
    parse_device(dev).is_ok()
}

/// `/dev/ublkbN`.
pub fn block_path(id: u32) -> PathBuf {
    PathBuf::from(format!("/dev/ublkb{id}"))
}

/// The checks that need no network: root, the driver, io_uring.
pub fn check_local(is_root: bool) -> Result<(), UblkFailure> {
    if !is_root {
        return Err(UblkFailure::NotRoot);
    }
    if !Path::new(CONTROL).exists() {
        return Err(UblkFailure::NoDriver);
    }
    // Linux 6.6+: 0 allowed, 1 only for the io_uring_group, 2 disabled.
    if let Some(v) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
    {
        if v == 2 {
            return Err(UblkFailure::NoIoUring(v));
        }
    }
    Ok(())
}

/// How the device is created.
#[derive(Debug, Clone)]
pub struct Options {
    /// `/dev/ublkbN` to create (or recover); `None`: the driver picks.
    pub id: Option<u32>,
    /// Hardware queues, one thread each.
    pub queues: u16,
    /// Requests in flight per queue.
    pub depth: u16,
    /// Take over a device whose server died instead of adding one.
    pub recover: bool,
    /// The LUN's URL, kept in the device's JSON (`/run/ublksrvd`) so that
    /// a recovery with another LUN is refused.
    pub url: String,
}

/// The JSON key rlun keeps its URL under in libublk's device file.
const URL_KEY: &str = "rlun_url";

/// The URL an earlier rlun stored for device `id`, from libublk's
/// `/run/ublksrvd/NNNN.json`.
pub fn stored_url(id: u32) -> Option<String> {
    let path = Path::new(&UblkCtrl::run_dir()).join(format!("{id:04}.json"));
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    find_key(&v, URL_KEY)
}

fn find_key(v: &serde_json::Value, key: &str) -> Option<String> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .and_then(|s| s.as_str().map(str::to_owned))
            .or_else(|| m.values().find_map(|v| find_key(v, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

/// Ask the driver about device `id`; `None` when it does not exist.
pub fn dev_state(id: u32) -> Option<DevState> {
    if !Path::new(CONTROL).exists() {
        return None;
    }
    let ctrl = UblkCtrl::new_simple(id as i32).ok()?;
    let info = ctrl.dev_info();
    let pid = info.ublksrv_pid;
    Some(DevState {
        live: u32::from(info.state) == libublk::sys::UBLK_S_DEV_LIVE,
        quiesced: u32::from(info.state) == libublk::sys::UBLK_S_DEV_QUIESCED,
        server_pid: pid,
        served: pid > 0 && Path::new(&format!("/proc/{pid}")).exists(),
    })
}

/// A device an rlun attached to `url` and then died: the kernel holds it
/// (and its I/O) for a recovery. The lowest such `/dev/ublkbN`.
pub fn find_orphan(url: &str) -> Option<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir("/sys/class/ublk-char")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("ublkc")?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids.into_iter()
        .find(|&id| is_orphan_of(dev_state(id), stored_url(id).as_deref(), url))
}

/// Stop device `id` (STOP_DEV): its queues end and I/O on it fails; the
/// server that runs it then deletes it.
pub fn stop(id: u32) -> Result<(), UblkFailure> {
    let ctrl = UblkCtrl::new_simple(id as i32).map_err(driver(format!("/dev/ublkb{id}")))?;
    ctrl.kill_dev()
        .map(drop)
        .map_err(driver(format!("stopping /dev/ublkb{id}")))
}

/// Delete device `id`, whose server is gone: requests waiting on it fail.
pub fn delete(id: u32) -> Result<(), UblkFailure> {
    let ctrl = UblkCtrl::new_simple(id as i32).map_err(driver(format!("/dev/ublkb{id}")))?;
    let _ = ctrl.kill_dev();
    ctrl.del_dev()
        .map(drop)
        .map_err(driver(format!("deleting /dev/ublkb{id}")))
}

/// What the server thread reports.
#[derive(Debug)]
pub enum Event {
    /// `/dev/ublkbN` is live.
    Live(u32),
    /// The queues ended (the device was stopped) and the device is
    /// deleted; or the device could not be set up.
    Ended(Result<(), UblkFailure>),
}

/// Start serving `export` as a ublk device: a thread of its own runs the
/// device and its queue threads. The first event is [`Event::Live`] or an
/// [`Event::Ended`] with what failed; a live device ends with
/// [`Event::Ended`] after [`stop`].
pub fn start(
    export: Arc<Export<Lun>>,
    info: ExportInfo,
    opts: Options,
    rt: tokio::runtime::Handle,
) -> Result<mpsc::UnboundedReceiver<Event>, UblkFailure> {
    let (tx, rx) = mpsc::unbounded_channel();
    let buf = io_buf_bytes(&info, MAX_IO_BUF);
    let shared = Arc::new(Shared {
        export,
        rt,
        buf_len: buf as usize,
    });
    std::thread::Builder::new()
        .name("rlun-ublk".into())
        .spawn(move || {
            let r = run(&opts, &info, buf, shared, &tx);
            let _ = tx.send(Event::Ended(r));
        })
        .map_err(|e| UblkFailure::Driver {
            what: "cannot start the ublk thread".into(),
            reason: e.to_string(),
        })?;
    Ok(rx)
}

/// The server thread: add (or recover) the device, run it until it is
/// stopped, delete it.
fn run(
    opts: &Options,
    info: &ExportInfo,
    buf: u32,
    shared: Arc<Shared>,
    tx: &mpsc::UnboundedSender<Event>,
) -> Result<(), UblkFailure> {
    let id = opts.id.map_or(-1, |i| i as i32);
    let flags = if opts.recover {
        let id = opts.id.ok_or(UblkFailure::Ended)?;
        may_recover(id, dev_state(id), stored_url(id).as_deref(), &opts.url)?;
        let old = UblkCtrl::new_simple(id as i32).map_err(driver(format!("/dev/ublkb{id}")))?;
        old.start_user_recover()
            .map_err(driver(format!("recovering /dev/ublkb{id}")))
            .and_then(|r| match r {
                r if r < 0 => Err(UblkFailure::Driver {
                    what: format!("recovering /dev/ublkb{id}"),
                    reason: std::io::Error::from_raw_os_error(-r).to_string(),
                }),
                _ => Ok(()),
            })?;
        UblkFlags::UBLK_DEV_F_RECOVER_DEV
    } else {
        UblkFlags::UBLK_DEV_F_ADD_DEV
    };
    let ctrl = UblkCtrlBuilder::default()
        .name("rlun")
        .id(id)
        .nr_queues(opts.queues.max(1))
        .depth(opts.depth.max(1))
        .io_buf_bytes(buf)
        .ctrl_flags(
            u64::from(libublk::sys::UBLK_F_USER_RECOVERY)
                | u64::from(libublk::sys::UBLK_F_USER_RECOVERY_REISSUE),
        )
        .dev_flags(flags)
        .build()
        .map_err(driver(match opts.id {
            Some(i) => format!("creating /dev/ublkb{i}"),
            None => "creating a ublk device".into(),
        }))?;
    let dev_params = params(info, buf);
    let size = info.size;
    let url = opts.url.clone();
    let tgt_init = move |dev: &mut UblkDev| {
        dev.tgt.dev_size = size;
        dev.tgt.params = dev_params;
        dev.set_target_json(serde_json::json!({ URL_KEY: url }));
        Ok(())
    };
    let live = tx.clone();
    let q_shared = shared.clone();
    let r = ctrl.run_target(
        tgt_init,
        move |qid, dev: &UblkDev| queue(qid, dev, &q_shared),
        move |c: &UblkCtrl| {
            let _ = live.send(Event::Live(c.dev_info().dev_id));
        },
    );
    let dev_id = ctrl.dev_info().dev_id;
    // Stopped (or never started): delete the device, recovered ones too.
    if let Err(e) = ctrl.del_dev() {
        debug!(error = %describe(&e), "deleting /dev/ublkb{dev_id}");
    }
    r.map(drop)
        .map_err(driver(format!("running /dev/ublkb{dev_id}")))
}

/// What every queue thread shares.
struct Shared {
    export: Arc<Export<Lun>>,
    rt: tokio::runtime::Handle,
    buf_len: usize,
}

/// Wakes a queue thread from its io_uring wait: a pipe its ring polls.
struct Doorbell {
    rung: AtomicBool,
    writer: std::io::PipeWriter,
}

impl Doorbell {
    fn ring(&self) {
        if !self.rung.swap(true, Ordering::AcqRel) {
            // A full pipe cannot happen (one byte per drain); an error
            // would only mean the queue is gone.
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// One queue thread: a task per tag and the doorbell, on a smol executor
/// driven by the queue's io_uring.
fn queue(qid: u16, dev: &UblkDev, shared: &Arc<Shared>) {
    let q = match UblkQueue::new(qid, dev) {
        Ok(q) => Rc::new(q),
        Err(e) => {
            warn!(queue = qid, error = %describe(&e), "cannot set up a ublk queue");
            return;
        }
    };
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => {
            warn!(queue = qid, error = %e, "cannot create the ublk queue's doorbell");
            return;
        }
    };
    let bell = Arc::new(Doorbell {
        rung: AtomicBool::new(false),
        writer,
    });
    // The export's futures need tokio's context (timers, spawns) on this
    // thread; they are polled here, woken from tokio through the doorbell.
    let _runtime = shared.rt.enter();
    let exe = Rc::new(smol::LocalExecutor::new());
    let mut tasks = Vec::new();
    for tag in q.tags() {
        let (q, shared, bell) = (q.clone(), shared.clone(), bell.clone());
        tasks.push(exe.spawn(async move {
            match io_task(&q, tag, &shared, &bell).await {
                Ok(()) | Err(UblkError::QueueIsDown) => {}
                Err(e) => warn!(queue = qid, tag, error = %describe(&e), "ublk tag ended"),
            }
        }));
    }
    let doorbell = {
        let (q, bell) = (q.clone(), bell.clone());
        exe.spawn(async move { ring_wait(&q, reader, &bell).await })
    };
    let runner = exe.clone();
    smol::block_on(exe.run(async {
        let run_ops = || while runner.try_tick() {};
        let done = || tasks.iter().all(|t| t.is_finished());
        if let Err(e) = libublk::wait_and_handle_io_events(&q, Some(20), run_ops, done).await {
            debug!(queue = qid, error = %describe(&e), "ublk queue ended");
        }
    }));
    drop(doorbell);
}

/// The doorbell's side in the queue thread: poll the pipe, drain it, then
/// clear the flag (in that order: a completion that finds the flag still
/// set was queued before the clear, and the executor runs it in this
/// turn).
async fn ring_wait(q: &UblkQueue<'_>, reader: std::io::PipeReader, bell: &Doorbell) {
    let fd = reader.as_raw_fd();
    let mut scratch = [0u8; 64];
    loop {
        let sqe = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build();
        let res = q.ublk_submit_sqe(sqe).await;
        if res < 0 {
            if q.is_stopping() {
                return;
            }
            warn!(error = %std::io::Error::from_raw_os_error(-res), "ublk doorbell poll failed");
            return;
        }
        // POLLIN: at least one byte, so this read does not block.
        let _ = (&reader).read(&mut scratch);
        bell.rung.swap(false, Ordering::AcqRel);
    }
}

/// One tag: fetch a request, serve it on tokio, commit the result and
/// fetch the next, until the queue goes down.
async fn io_task(
    q: &UblkQueue<'_>,
    tag: u16,
    shared: &Shared,
    bell: &Arc<Doorbell>,
) -> Result<(), UblkError> {
    let mut buf = IoBuf::<u8>::new(shared.buf_len);
    let mut waker = None;
    q.submit_io_prep_cmd(tag, BufDesc::Slice(buf.as_slice()), 0, Some(&buf))
        .await?;
    loop {
        let iod = q.get_iod(tag);
        let req = decode(
            iod.op_flags,
            iod.start_sector,
            iod.nr_sectors,
            shared.buf_len,
        );
        let res = serve(&shared.export, bell, &mut waker, req, buf.as_mut_slice()).await;
        q.submit_io_commit_cmd(tag, BufDesc::Slice(buf.as_slice()), res)
            .await?;
    }
}

/// What a request against the export returns.
enum Outcome {
    Read(Bytes),
    Done(i32),
}

/// A waker that also rings the queue's doorbell: the export's futures are
/// polled on the queue thread, and what wakes them (the session driver,
/// a timer) runs on tokio's threads while the queue thread sleeps in its
/// io_uring.
struct BellWaker {
    task: Waker,
    bell: Arc<Doorbell>,
}

impl Wake for BellWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Schedule first, then ring: the queue thread runs what is
        // scheduled once it wakes.
        self.task.wake_by_ref();
        self.bell.ring();
    }
}

/// Poll `fut` with a [`BellWaker`] around the task's own waker (made
/// once per tag: `cache` keeps it while the task's waker stays the same).
async fn rung<F: Future>(
    fut: F,
    bell: &Arc<Doorbell>,
    cache: &mut Option<(Waker, Waker)>,
) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        if !matches!(cache, Some((task, _)) if task.will_wake(cx.waker())) {
            let ours = Waker::from(Arc::new(BellWaker {
                task: cx.waker().clone(),
                bell: bell.clone(),
            }));
            *cache = Some((cx.waker().clone(), ours));
        }
        let ours = &cache.as_ref().expect("just set").1;
        fut.as_mut().poll(&mut Context::from_waker(ours))
    })
    .await
}

/// Serve `req` through the export, on the queue thread (inside the tokio
/// runtime's context); `buf` is the tag's buffer (WRITE data in, READ data
/// out). The ublk result: bytes, 0 or -errno.
async fn serve(
    export: &Export<Lun>,
    bell: &Arc<Doorbell>,
    cache: &mut Option<(Waker, Waker)>,
    req: Request,
    buf: &mut [u8],
) -> i32 {
    let data = match req {
        Request::Write { len, .. } => Some(Bytes::copy_from_slice(&buf[..len])),
        Request::TooLarge { len } => {
            warn!(len, "ublk request larger than its buffer refused");
            return -libc::EINVAL;
        }
        Request::Unsupported(op) => {
            debug!(op, "unsupported ublk op");
            return -libc::EOPNOTSUPP;
        }
        _ => None,
    };
    let out = rung(execute(export, req, data), bell, cache).await;
    match (out, req) {
        (Outcome::Read(bytes), Request::Read { len, .. }) => {
            let n = bytes.len().min(len);
            buf[..n].copy_from_slice(&bytes[..n]);
            // Past the end of a LUN that shrank: zeros.
            buf[n..len].fill(0);
            len as i32
        }
        (Outcome::Done(r), _) => r,
        (Outcome::Read(_), _) => -libc::EIO,
    }
}

/// One request against the export.
async fn execute(export: &Export<Lun>, req: Request, data: Option<Bytes>) -> Outcome {
    let fail = |e: crate::export::ExportError| Outcome::Done(-e.to_errno());
    match req {
        Request::Read { offset, len } => match export.read(offset, len).await {
            Ok(b) => Outcome::Read(b),
            Err(e) => fail(e),
        },
        Request::Write { offset, len, fua } => {
            let data = data.unwrap_or_else(|| Bytes::from(vec![0; len]));
            match export.write(offset, data, fua).await {
                Ok(n) if n as usize == len => Outcome::Done(len as i32),
                // Past the end of a LUN that shrank.
                Ok(_) => Outcome::Done(-libc::ENOSPC),
                Err(e) => fail(e),
            }
        }
        Request::Flush => match export.flush().await {
            Ok(()) => Outcome::Done(0),
            Err(e) => fail(e),
        },
        Request::Discard { offset, len } => match export.trim(offset, len).await {
            Ok(()) => Outcome::Done(0),
            Err(e) => fail(e),
        },
        Request::WriteZeroes { offset, len, unmap } => {
            let mode = if unmap {
                ZeroMode::MayUnmap
            } else {
                ZeroMode::Allocate
            };
            match export.write_zeroes(offset, len, mode).await {
                Ok(()) => Outcome::Done(0),
                Err(e) => fail(e),
            }
        }
        Request::Unsupported(_) => Outcome::Done(-libc::EOPNOTSUPP),
        Request::TooLarge { .. } => Outcome::Done(-libc::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names() {
        assert_eq!(parse_device(Path::new("/dev/ublkb3")).unwrap(), 3);
        assert_eq!(parse_device(Path::new("ublkb12")).unwrap(), 12);
        assert!(parse_device(Path::new("/dev/ublkc3")).is_err());
        assert!(parse_device(Path::new("/dev/nbd0")).is_err());
        assert!(is_ublk_path(Path::new("/dev/ublkb0")));
        assert!(!is_ublk_path(Path::new("/dev/nbd0")));
    }

    #[test]
    fn the_stored_url_is_found_wherever_libublk_nests_it() {
        let v = serde_json::json!({
            "dev_info": {"dev_id": 0},
            "target": {"dev_size": 1, "tgt_data": {"rlun_url": "iscsi://h/iqn/0"}},
        });
        assert_eq!(find_key(&v, URL_KEY).as_deref(), Some("iscsi://h/iqn/0"));
        assert_eq!(find_key(&serde_json::json!({"a": [1, 2]}), URL_KEY), None);
    }

    #[test]
    fn local_checks_name_what_is_missing() {
        assert!(matches!(check_local(false), Err(UblkFailure::NotRoot)));
        let e = UblkFailure::NoDriver.to_string();
        assert!(e.contains("modprobe ublk_drv"), "{e}");
        assert!(e.contains("6.0"), "{e}");
        assert!(describe(&UblkError::OtherError(-libc::ENOENT)).contains("No such file"));
    }
}
