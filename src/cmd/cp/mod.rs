//! `rlun cp`: whole-LUN backup and restore.
//!
//! The copy is cut into chunks of `--bs` bytes; up to `--qd` chunks are in
//! flight at once, each read from the source and written to the destination
//! by its own task. Chunks complete in any order but are collected in order,
//! so progress is exact and standard output (`-`) receives bytes in order.
//! Nothing is written before every check that can fail early has passed
//! (sizes, write protection, file permissions, `--offset`, a copy onto
//! itself) — except that a source read as a stream (standard input `-`, a
//! pipe, a FIFO, a character device) has no size to check: it is read in
//! order, and only when it turns out larger than the destination LUN does
//! the copy stop, with the LUN written full. SIGINT, SIGTERM and SIGHUP stop
//! a copy like an error does (a regular destination file is cut back to the
//! bytes copied) and end with exit code 128 + the signal's number; the
//! error then says how many bytes of the source the destination holds from
//! its start and how to resume (`--offset`).
//!
//! A regular destination file is sparse unless `--no-sparse`: it is cut
//! back to the resume point (the whole file for a whole copy) and extended
//! to its size, so everything the copy is about to write reads as zeros,
//! and the all-zero blocks of each chunk are then not written ([`sparse`]).
//! Into a LUN, a block device or a stream every byte is written: their old
//! contents would otherwise show through.

mod progress;
mod same;
mod sparse;

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::task::JoinHandle;

use super::context::Ctx;
use super::error::CliError;
use crate::cli::ConnectOpts;
use crate::client::{ClientError, LoggedIn, Lun};
use crate::daemon::Signals;
use progress::Meter;
pub use progress::ProgressMode;

pub struct Options {
    pub bs: u64,
    pub qd: u32,
    pub progress: ProgressMode,
    /// Print the summary line at the end (not with `-q`).
    pub summary: bool,
    pub fua: bool,
    /// Leave the all-zero blocks of a regular destination file as holes.
    pub sparse: bool,
    /// The byte of source and destination the copy starts at.
    pub offset: u64,
}

enum Source {
    Lun(Box<Lun>),
    /// A regular file or a block device: chunks are read in place (`pread`).
    File(Arc<File>, PathBuf),
    /// Standard input, a pipe, a FIFO, a socket or a character device: read
    /// in order by the copy loop (which owns the reader), size unknown.
    Stream(PathBuf),
}

/// The reader of a [`Source::Stream`].
type StreamReader = Box<dyn Read + Send>;

/// Read up to `len` bytes from `r` (fewer only at the end of the stream).
fn read_up_to(r: &mut StreamReader, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    r.take(len as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

enum Dest {
    Lun(Box<Lun>),
    /// A regular file or a block device: chunks are written in place
    /// (`pwrite`) and the file is synced at the end. `regular` files are cut
    /// back to what was copied when the copy fails.
    File {
        file: Arc<File>,
        path: PathBuf,
        regular: bool,
        /// All-zero blocks are left as holes (a regular file without
        /// `--no-sparse`, which reads as zeros wherever the copy writes).
        sparse: bool,
        /// Set (under the write lock) when the copy failed and the file is
        /// cut back: a chunk write still running in the blocking pool takes
        /// the read lock and skips its write once it is set, so nothing
        /// lands past the cut.
        stopped: Arc<std::sync::RwLock<bool>>,
    },
    /// Standard output, a pipe, a FIFO, a socket or a character device:
    /// chunks are written in order; there is nothing to sync.
    Stream(PathBuf),
}

/// What a chunk's task hands back: its data when the destination is a
/// stream (written in order by the copy loop), and how many of its bytes
/// were zeros left as holes.
struct Chunk {
    data: Option<Bytes>,
    holes: u64,
}

fn is_lun_arg(ctx: &Ctx, arg: &str) -> bool {
    arg.contains("://") || ctx.config.target(arg).is_some()
}

fn local<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CliError + 'a {
    move |source| CliError::LocalFile {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A failed write to standard output: its reader going away (`| head`)
/// ends the copy quietly, as it ends `ls`; anything else is an error.
fn stream_write_error(
    path: &Path,
    to_stdout: bool,
) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |e| {
        if to_stdout && e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            local("cannot write to", path)(e)
        }
    }
}

pub async fn run(
    ctx: &Ctx,
    src: &str,
    dst: &str,
    o: Options,
    conn: &ConnectOpts,
) -> Result<(), CliError> {
    if o.bs == 0 {
        return Err(CliError::Usage("--bs must be greater than 0".into()));
    }
    if o.qd == 0 {
        // As bench says: zero transfers in flight would copy nothing.
        return Err(CliError::Usage("--qd must be at least 1".into()));
    }
    if !is_lun_arg(ctx, src) && !is_lun_arg(ctx, dst) {
        same::refuse_same_file(src, dst)?;
        return Err(CliError::Usage(
            "neither side is a LUN URL; use cp(1) to copy files".into(),
        ));
    }
    // Installed before anything is written: from here on SIGINT/SIGTERM
    // stop the copy in order instead of killing rlun mid-chunk.
    let mut stop = Signals::install()?;
    if is_lun_arg(ctx, src) && is_lun_arg(ctx, dst) {
        or_stop(&mut stop, same::refuse_same_lun(ctx, src, dst)).await?;
    }
    let mut sessions = Vec::new();
    let result = copy(ctx, src, dst, &o, conn, &mut stop, &mut sessions).await;
    // Every session the copy logged in to ends here, whatever it did.
    for s in sessions {
        if let Err(e) = s.logout().await {
            tracing::debug!(error = %e, "logout failed");
        }
    }
    result
}

/// `--offset` must fall on a block boundary of every LUN copied.
fn check_offset_alignment(offset: u64, lun: &Lun) -> Result<(), CliError> {
    let bs = lun.block_size() as u64;
    if !offset.is_multiple_of(bs) {
        return Err(CliError::Usage(format!(
            "--offset {offset} is not a multiple of the {bs}-byte blocks of LUN {}",
            lun.number()
        )));
    }
    Ok(())
}

/// Resuming into an existing file (`--offset N`): the file must already
/// hold the first N bytes, or the copy would leave a gap of zeros.
fn check_resumed_file(path: &Path, offset: u64) -> Result<(), CliError> {
    if offset == 0 {
        return Ok(());
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() < offset => Err(CliError::Usage(format!(
            "--offset {offset} is past the end of {} ({} bytes): a resumed copy continues \
             a destination that holds the bytes before the offset",
            path.display(),
            m.len()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(CliError::Usage(format!(
            "--offset {offset}: {} does not exist; a resumed copy continues a destination \
             that holds the bytes before the offset",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// The copy itself; the sessions it logs in to go to `sessions`, for the
/// caller to log out of.
async fn copy(
    ctx: &Ctx,
    src: &str,
    dst: &str,
    o: &Options,
    conn: &ConnectOpts,
    stop: &mut Signals,
    sessions: &mut Vec<LoggedIn>,
) -> Result<(), CliError> {
    let mut reader: Option<StreamReader> = None;
    let source = if is_lun_arg(ctx, src) {
        let (t, l) = or_stop(stop, ctx.open_lun(src, conn)).await?;
        sessions.push(t);
        check_offset_alignment(o.offset, &l)?;
        Source::Lun(Box::new(l))
    } else if src == "-" {
        reader = Some(Box::new(std::io::stdin()));
        Source::Stream(PathBuf::from("standard input"))
    } else {
        let p = PathBuf::from(src);
        let f = File::open(&p).map_err(local("cannot open source file", &p))?;
        let kind = f.metadata().map_err(local("cannot stat", &p))?.file_type();
        if kind.is_file() || kind.is_block_device() {
            Source::File(Arc::new(f), p)
        } else {
            // A pipe, FIFO, socket or character device has no size (stat
            // says 0): read it in order to its end.
            reader = Some(Box::new(f));
            Source::Stream(p)
        }
    };
    let mut size = match &source {
        Source::Lun(l) => l.capacity_bytes(),
        // A block device's size is where it ends (stat says 0).
        Source::File(f, p) => (&**f)
            .seek(SeekFrom::End(0))
            .map_err(local("cannot find the size of", p))?,
        // Read at most the destination's capacity (set below).
        Source::Stream(_) => u64::MAX,
    };
    if o.offset > size {
        return Err(CliError::Usage(format!(
            "--offset {} is past the end of the source ({size} bytes)",
            o.offset
        )));
    }
    let mut stream: Option<Box<dyn Write>> = None;
    let to_stdout = dst == "-";
    let dest = if to_stdout {
        Dest::Stream(PathBuf::from("standard output"))
    } else if is_lun_arg(ctx, dst) {
        let (t, l) = or_stop(stop, ctx.open_lun(dst, conn)).await?;
        sessions.push(t);
        if l.write_protected() {
            return Err(ClientError::ReadOnly(l.number()).into());
        }
        check_offset_alignment(o.offset, &l)?;
        if reader.is_some() {
            size = l.capacity_bytes();
            if o.offset > size {
                return Err(CliError::Usage(format!(
                    "--offset {} is past the end of LUN {} ({size} bytes)",
                    o.offset,
                    l.number()
                )));
            }
        } else if size > l.capacity_bytes() {
            return Err(ClientError::TooLarge {
                lun: l.number(),
                size,
                capacity: l.capacity_bytes(),
            }
            .into());
        }
        Dest::Lun(Box::new(l))
    } else {
        let p = PathBuf::from(dst);
        check_resumed_file(&p, o.offset)?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&p)
            .map_err(local("cannot open destination file", &p))?;
        let kind = f.metadata().map_err(local("cannot stat", &p))?.file_type();
        let sparse = kind.is_file() && o.sparse;
        if sparse {
            // Everything from the offset on is about to be copied: drop
            // what the file held there, so that it reads as zeros and the
            // zeros of the source need not be written.
            f.set_len(o.offset).map_err(local("cannot truncate", &p))?;
        }
        if kind.is_file() {
            // A regular file gets exactly the LUN's size.
            f.set_len(size).map_err(local("cannot size", &p))?;
        }
        if kind.is_file() || kind.is_block_device() {
            Dest::File {
                file: Arc::new(f),
                path: p,
                regular: kind.is_file(),
                sparse,
                stopped: Arc::default(),
            }
        } else {
            stream = Some(Box::new(f));
            Dest::Stream(p)
        }
    };
    if let Dest::Stream(_) = dest {
        if stream.is_none() {
            stream = Some(Box::new(std::io::stdout().lock()));
        }
    }
    if o.offset > 0 {
        if let Some(r) = reader.take() {
            reader = Some(skip_stream(r, o.offset, &source).await?);
        }
    }
    // Chunks are whole blocks on both sides and within each LUN's transfer limit.
    let mut align = 1u64;
    let mut limit = u64::MAX;
    for l in [source_lun(&source), dest_lun(&dest)].into_iter().flatten() {
        align = align.max(l.block_size() as u64);
        limit = limit.min(l.max_transfer_bytes());
    }
    let chunk = (o.bs.min(limit) / align).max(1) * align;

    let total = (reader.is_none()).then_some(size);
    let meter = Meter::start(o.progress, o.offset, total);
    let start = std::time::Instant::now();
    let src = Arc::new(source);
    let dst_arc = Arc::new(dest);
    let mut inflight: InFlight = VecDeque::new();
    let mut offset = o.offset;
    // The source's bytes before this one reached the destination, in order.
    let mut done = o.offset;
    // Zeros of the source left as holes in the destination file.
    let mut holes = 0u64;
    let copy = async {
        while offset < size || !inflight.is_empty() {
            while offset < size && inflight.len() < o.qd as usize {
                let mut len = chunk.min(size - offset);
                let data = match reader.take() {
                    Some(r) => {
                        let (r, data) = read_stream(r, len as usize, &src).await?;
                        if (data.len() as u64) < len {
                            // The end of the stream: nothing after this chunk.
                            size = offset + data.len() as u64;
                            len = data.len() as u64;
                        } else {
                            reader = Some(r);
                        }
                        if len == 0 {
                            break;
                        }
                        Some(data)
                    }
                    None => None,
                };
                let (s, d, fua) = (src.clone(), dst_arc.clone(), o.fua);
                let at = offset;
                inflight.push_back((
                    len,
                    tokio::spawn(async move { copy_chunk(&s, &d, at, len, data, fua).await }),
                ));
                offset += len;
            }
            if offset == size {
                if let Some(r) = reader.take() {
                    // The destination is full: the stream must end here.
                    let (_, more) = read_stream(r, 1, &src).await?;
                    if !more.is_empty() {
                        // The part that fits is written whole before the
                        // error: the chunks still in flight land first.
                        while let Some((len, h)) = inflight.pop_front() {
                            h.await
                                .map_err(|e| CliError::Other(format!("copy task failed: {e}")))??;
                            done += len;
                        }
                        let lun = dest_lun(&dst_arc).expect("a stream is copied to a LUN");
                        return Err(CliError::StreamTooLarge {
                            source_name: stream_name(&src),
                            lun: lun.number(),
                            capacity: size,
                        });
                    }
                }
            }
            let Some((len, h)) = inflight.pop_front() else {
                break;
            };
            let out = h
                .await
                .map_err(|e| CliError::Other(format!("copy task failed: {e}")))??;
            if let (Some(data), Some(w), Dest::Stream(p)) = (out.data, &mut stream, &*dst_arc) {
                w.write_all(&data)
                    .map_err(stream_write_error(p, to_stdout))?;
            }
            holes += out.holes;
            done += len;
            meter.set(done);
        }
        Ok(())
    };
    let result: Result<(), CliError> = tokio::select! {
        r = copy => r,
        signal = stop.recv_with_hangup() => Err(CliError::Interrupted(signal)),
    };
    meter.finish();
    // How the flush after a failed copy into a LUN went.
    let mut stopped_at = None;
    if let (Err(_), Dest::Lun(b)) = (&result, &*dst_arc) {
        stopped_at = Some(settle_lun_after_failure(stop, b, &mut inflight, &mut done).await);
    }
    for (_, h) in inflight {
        h.abort();
    }
    match result {
        Ok(()) => {
            // Every byte reached the destination; a failure to make it
            // durable is the error itself (nothing to resume).
            match (&*dst_arc, &mut stream) {
                (Dest::Lun(b), _) => {
                    or_stop(stop, async { b.sync().await.map_err(CliError::from) }).await?
                }
                (Dest::File { file, path, .. }, _) => {
                    file.sync_all().map_err(local("cannot sync", path))?
                }
                (Dest::Stream(p), Some(w)) => {
                    w.flush().map_err(stream_write_error(p, to_stdout))?
                }
                (Dest::Stream(_), None) => {}
            }
            if o.summary {
                let line = progress::summary(size - o.offset, o.offset, holes, start.elapsed());
                // Standard error gone: the copy itself succeeded.
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            Ok(())
        }
        // A reader that went away wants no more, and no word about it.
        Err(CliError::BrokenPipe) => Err(CliError::BrokenPipe),
        Err(cause) => {
            // Where a rerun would start: the bytes copied, in whole blocks
            // of the LUNs; none once everything was copied.
            let resume = (done < size).then_some(done / align * align);
            let progress = match (&*dst_arc, stopped_at) {
                (Dest::Lun(l), flushed) => lun_stopped(l, done, resume, flushed),
                (Dest::File { .. }, _) => file_stopped(&dst_arc, done, resume),
                (Dest::Stream(p), _) => {
                    let hint = match resume {
                        Some(at) if at > 0 => format!(
                            "; rerun the same command with --offset {at}, appending its output \
                             to what was received, to resume"
                        ),
                        _ => String::new(),
                    };
                    format!(
                        "{} received the source's bytes up to byte {done}{hint}",
                        p.display()
                    )
                }
            };
            Err(CliError::CopyStopped {
                cause: Box::new(cause),
                progress,
            })
        }
    }
}

/// "; rerun … with --offset N to resume"; nothing when there is nothing
/// to resume, or nothing was copied (a plain rerun does it).
fn resume_hint(resume: Option<u64>) -> String {
    match resume {
        Some(at) if at > 0 => format!("; rerun the same command with --offset {at} to resume"),
        _ => String::new(),
    }
}

/// What a LUN holds after a stopped copy, and whether it was flushed.
fn lun_stopped(
    lun: &Lun,
    done: u64,
    resume: Option<u64>,
    flushed: Option<Result<(), CliError>>,
) -> String {
    let n = lun.number();
    let hint = resume_hint(resume);
    // Once the LUN is written full (a stream larger than it) there is no
    // "after".
    let rest = match resume {
        Some(_) => "; blocks after them may be partly written",
        None => "",
    };
    match flushed.unwrap_or(Ok(())) {
        Ok(()) => format!(
            "LUN {n} holds the first {done} bytes of the source, flushed with SYNCHRONIZE \
             CACHE{rest}{hint}"
        ),
        Err(e) => format!(
            "the first {done} bytes of the source reached LUN {n}, but flushing the target's \
             cache failed ({}){hint}",
            rlun_iscsi::error_chain(&e)
        ),
    }
}

/// A stopped copy into a file or block device: a regular file is cut back
/// to the bytes copied (a prefix of the source, not a full-size file with
/// stale bytes or a hole where the copy stopped). Says what it holds.
fn file_stopped(dest: &Dest, done: u64, resume: Option<u64>) -> String {
    let Dest::File {
        file,
        path,
        regular,
        stopped,
        ..
    } = dest
    else {
        return String::new();
    };
    let hint = resume_hint(resume);
    if !regular {
        return format!(
            "{} holds the first {done} bytes of the source{hint}",
            path.display()
        );
    }
    // Held until the file is cut: no chunk write after it.
    let mut stopped = stopped.write().unwrap_or_else(|e| e.into_inner());
    *stopped = true;
    match file.set_len(done) {
        Ok(()) => format!(
            "{} holds the {done} bytes copied before the copy stopped{hint}",
            path.display()
        ),
        Err(e) => format!(
            "{} could not be cut back to the {done} bytes copied before the copy stopped ({e}); \
             bytes after them may be stale{hint}",
            path.display()
        ),
    }
}

/// Read and drop the first `n` bytes of a stream source (resuming with
/// `--offset` from a stream that starts at the beginning again).
async fn skip_stream(r: StreamReader, n: u64, src: &Source) -> Result<StreamReader, CliError> {
    let path = match src {
        Source::Stream(p) => p.clone(),
        _ => PathBuf::new(),
    };
    tokio::task::spawn_blocking(move || {
        let mut r = r;
        let skipped = std::io::copy(&mut (&mut r).take(n), &mut std::io::sink())
            .map_err(local("cannot read", &path))?;
        if skipped < n {
            return Err(CliError::Usage(format!(
                "--offset {n} is past the end of {} ({skipped} bytes)",
                path.display()
            )));
        }
        Ok(r)
    })
    .await
    .map_err(|e| CliError::Other(format!("read task failed: {e}")))?
}

/// Each chunk in flight, in source order, with its length.
type InFlight = VecDeque<(u64, JoinHandle<Result<Chunk, CliError>>)>;

/// A copy to a LUN stopped (a signal, a failed read or write): the writes
/// already sent are let land and the target's write cache is flushed, so
/// that the prefix the message names is on the target's stable storage
/// rather than in its volatile cache. `done` grows by the chunks that land
/// in order. A second signal gives up at once; a lost target ends it after
/// the session's own timeouts. Returns how the flush went.
async fn settle_lun_after_failure(
    stop: &mut Signals,
    lun: &Lun,
    inflight: &mut InFlight,
    done: &mut u64,
) -> Result<(), CliError> {
    or_stop(stop, async {
        let mut in_order = true;
        while let Some((len, h)) = inflight.pop_front() {
            let landed = matches!(h.await, Ok(Ok(_)));
            in_order &= landed;
            if in_order {
                *done += len;
            }
        }
        lun.sync().await.map_err(CliError::from)
    })
    .await
}

fn source_lun(s: &Source) -> Option<&Lun> {
    match s {
        Source::Lun(l) => Some(l),
        Source::File(..) | Source::Stream(_) => None,
    }
}

fn stream_name(s: &Source) -> String {
    match s {
        Source::Stream(p) => p.display().to_string(),
        _ => String::new(),
    }
}

/// Read the next `len` bytes of a stream source off the runtime's thread;
/// the reader comes back with the data (fewer bytes only at the end).
async fn read_stream(
    mut r: StreamReader,
    len: usize,
    src: &Source,
) -> Result<(StreamReader, Bytes), CliError> {
    let path = match src {
        Source::Stream(p) => p.clone(),
        _ => PathBuf::new(),
    };
    tokio::task::spawn_blocking(move || {
        let data = read_up_to(&mut r, len).map_err(local("cannot read", &path))?;
        Ok((r, Bytes::from(data)))
    })
    .await
    .map_err(|e| CliError::Other(format!("read task failed: {e}")))?
}

/// `f`, unless SIGINT or SIGTERM comes first (a login that hangs until its
/// timeout, a final SYNCHRONIZE CACHE waiting for a lost target).
async fn or_stop<T>(
    stop: &mut Signals,
    f: impl std::future::Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::select! {
        r = f => r,
        signal = stop.recv_with_hangup() => Err(CliError::Interrupted(signal)),
    }
}

fn dest_lun(d: &Dest) -> Option<&Lun> {
    match d {
        Dest::Lun(l) => Some(l),
        _ => None,
    }
}

async fn copy_chunk(
    src: &Source,
    dst: &Dest,
    at: u64,
    len: u64,
    data: Option<Bytes>,
    fua: bool,
) -> Result<Chunk, CliError> {
    let data = match (data, src) {
        // A stream's chunk was read in order by the copy loop.
        (Some(data), _) => data,
        (None, Source::Stream(p)) => {
            return Err(CliError::Other(format!(
                "no data for the chunk at {at} of {}",
                p.display()
            )))
        }
        (None, Source::Lun(b)) => {
            let l = &**b;
            let bs = l.block_size() as u64;
            l.read(at / bs, (len.div_ceil(bs)) as u32).await?
        }
        (None, Source::File(f, p)) => {
            let f = f.clone();
            let p = p.clone();
            tokio::task::spawn_blocking(move || -> Result<Bytes, CliError> {
                // The file is read straight into a registered pool buffer
                // when the LUN is reached over iSER (`rlun_iscsi::iobuf`).
                let mut buf = rlun_iscsi::iobuf::IoBuf::with_len(len as usize);
                f.read_exact_at(&mut buf, at)
                    .map_err(local("cannot read", &p))?;
                Ok(buf.into_bytes())
            })
            .await
            .map_err(|e| CliError::Other(format!("read task failed: {e}")))??
        }
    };
    match dst {
        Dest::Stream(_) => Ok(Chunk {
            data: Some(data),
            holes: 0,
        }),
        Dest::File {
            file,
            path,
            sparse,
            stopped,
            ..
        } => {
            let (f, p, sparse, stopped) = (file.clone(), path.clone(), *sparse, stopped.clone());
            let holes = tokio::task::spawn_blocking(move || {
                let stopped = stopped.read().unwrap_or_else(|e| e.into_inner());
                if *stopped {
                    return Ok(0);
                }
                let written = if sparse {
                    sparse::write_sparse(&f, &data, at)
                } else {
                    f.write_all_at(&data, at).map(|()| 0)
                };
                written.map_err(local("cannot write", &p))
            })
            .await
            .map_err(|e| CliError::Other(format!("write task failed: {e}")))??;
            Ok(Chunk { data: None, holes })
        }
        Dest::Lun(b) => {
            let l = &**b;
            let bs = l.block_size() as usize;
            let data = if data.len() % bs != 0 {
                // The file ends inside a block: keep the rest of that block
                // as it is on the LUN (read-modify-write).
                let full = data.len() / bs * bs;
                let tail_lba = (at + full as u64) / bs as u64;
                let old = l.read(tail_lba, 1).await?;
                let mut buf = BytesMut::with_capacity(full + bs);
                buf.extend_from_slice(&data);
                buf.extend_from_slice(&old[data.len() - full..]);
                buf.freeze()
            } else {
                data
            };
            l.write(at / bs as u64, data, fua).await?;
            Ok(Chunk {
                data: None,
                holes: 0,
            })
        }
    }
}
