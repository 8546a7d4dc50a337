//! `rlun cp`: whole-LUN backup and restore.
//!
//! The copy is cut into chunks of `--bs` bytes; up to `--qd` chunks are in
//! flight at once, each read from the source and written to the destination
//! by its own task. Chunks complete in any order but are collected in order,
//! so progress is exact and standard output (`-`) receives bytes in order.
//! Nothing is written before every check that can fail early has passed
//! (sizes, write protection, file permissions).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;

use super::{CliError, Ctx};
use crate::cli::ConnectOpts;
use crate::client::{ClientError, Lun, Target};

pub struct Options {
    pub bs: u64,
    pub qd: u32,
    pub progress: bool,
    pub fua: bool,
}

enum Source {
    Lun(Box<(Target, Lun)>),
    File(Arc<File>, PathBuf),
}

enum Dest {
    Lun(Box<(Target, Lun)>),
    /// A regular file or a block device: chunks are written in place
    /// (`pwrite`) and the file is synced at the end. `regular` files are cut
    /// back to what was copied when the copy fails.
    File {
        file: Arc<File>,
        path: PathBuf,
        regular: bool,
    },
    /// Standard output, a pipe, a FIFO, a socket or a character device:
    /// chunks are written in order; there is nothing to sync.
    Stream(PathBuf),
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
    if !is_lun_arg(ctx, src) && !is_lun_arg(ctx, dst) {
        return Err(CliError::Usage(
            "neither side is a LUN URL; use cp(1) to copy files".into(),
        ));
    }
    let source = if is_lun_arg(ctx, src) {
        Source::Lun(Box::new(ctx.open_lun(src, conn).await?))
    } else {
        let p = PathBuf::from(src);
        let f = File::open(&p).map_err(local("cannot open source file", &p))?;
        Source::File(Arc::new(f), p)
    };
    let size = match &source {
        Source::Lun(b) => b.1.capacity_bytes(),
        Source::File(f, p) => f.metadata().map_err(local("cannot stat", p))?.len(),
    };
    let mut stream: Option<Box<dyn Write>> = None;
    let dest = if dst == "-" {
        Dest::Stream(PathBuf::from("standard output"))
    } else if is_lun_arg(ctx, dst) {
        let (t, l) = ctx.open_lun(dst, conn).await?;
        if l.write_protected() {
            return Err(ClientError::ReadOnly(l.number()).into());
        }
        if size > l.capacity_bytes() {
            return Err(ClientError::TooLarge {
                lun: l.number(),
                size,
                capacity: l.capacity_bytes(),
            }
            .into());
        }
        Dest::Lun(Box::new((t, l)))
    } else {
        let p = PathBuf::from(dst);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&p)
            .map_err(local("cannot open destination file", &p))?;
        let kind = f.metadata().map_err(local("cannot stat", &p))?.file_type();
        if kind.is_file() {
            // A regular file gets exactly the LUN's size (sparse where unwritten).
            f.set_len(size).map_err(local("cannot size", &p))?;
        }
        if kind.is_file() || kind.is_block_device() {
            Dest::File {
                file: Arc::new(f),
                path: p,
                regular: kind.is_file(),
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
    // Chunks are whole blocks on both sides and within each LUN's transfer limit.
    let mut align = 1u64;
    let mut limit = u64::MAX;
    for l in [source_lun(&source), dest_lun(&dest)].into_iter().flatten() {
        align = align.max(l.block_size() as u64);
        limit = limit.min(l.max_transfer_bytes());
    }
    let chunk = (o.bs.min(limit) / align).max(1) * align;

    let bar = if o.progress {
        let b = ProgressBar::new(size);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("static template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let start = std::time::Instant::now();
    let src = Arc::new(source);
    let dst_arc = Arc::new(dest);
    let mut inflight: VecDeque<JoinHandle<Result<Option<Bytes>, CliError>>> = VecDeque::new();
    let mut offset = 0u64;
    // Bytes of the source that reached the destination, in order.
    let mut done = 0u64;
    let result: Result<(), CliError> = async {
        while offset < size || !inflight.is_empty() {
            while offset < size && inflight.len() < o.qd.max(1) as usize {
                let len = chunk.min(size - offset);
                let (s, d, fua) = (src.clone(), dst_arc.clone(), o.fua);
                let at = offset;
                inflight.push_back(tokio::spawn(async move {
                    copy_chunk(&s, &d, at, len, fua).await
                }));
                offset += len;
            }
            let h = inflight.pop_front().expect("non-empty");
            let out = h
                .await
                .map_err(|e| CliError::Other(format!("copy task failed: {e}")))??;
            let n = match (out, &mut stream, &*dst_arc) {
                (Some(data), Some(w), Dest::Stream(p)) => {
                    w.write_all(&data).map_err(local("cannot write to", p))?;
                    data.len() as u64
                }
                _ => chunk.min(size - done),
            };
            done += n;
            bar.inc(n);
        }
        Ok(())
    }
    .await;
    for h in inflight {
        h.abort();
    }
    bar.finish_and_clear();
    let result = match result {
        Ok(()) => match (&*dst_arc, &mut stream) {
            (Dest::Lun(b), _) => b.1.sync().await.map_err(CliError::from),
            (Dest::File { file, path, .. }, _) => {
                file.sync_all().map_err(local("cannot sync", path))
            }
            (Dest::Stream(p), Some(w)) => w.flush().map_err(local("cannot write to", p)),
            (Dest::Stream(_), None) => Ok(()),
        },
        Err(e) => {
            if let Dest::File {
                file,
                path,
                regular: true,
            } = &*dst_arc
            {
                // Leave a file that holds exactly what was copied: a prefix
                // of the source, not a full-size file with a hole or stale
                // bytes where the copy stopped.
                match file.set_len(done) {
                    Ok(()) => tracing::warn!(
                        path = %path.display(),
                        bytes = done,
                        "copy failed; the destination file holds the {done} bytes copied before the error"
                    ),
                    Err(te) => tracing::warn!(
                        path = %path.display(),
                        error = %te,
                        "copy failed and the destination file could not be cut back to the copied bytes"
                    ),
                }
            }
            Err(e)
        }
    };
    if let Source::Lun(b) = &*src {
        let _ = b.0.logout().await;
    }
    if let Dest::Lun(b) = &*dst_arc {
        let _ = b.0.logout().await;
    }
    result?;
    let secs = start.elapsed().as_secs_f64();
    tracing::info!(
        bytes = size,
        seconds = secs,
        mb_per_s = size as f64 / secs.max(1e-9) / 1e6,
        "copy complete"
    );
    Ok(())
}

fn source_lun(s: &Source) -> Option<&Lun> {
    match s {
        Source::Lun(b) => Some(&b.1),
        Source::File(..) => None,
    }
}

fn dest_lun(d: &Dest) -> Option<&Lun> {
    match d {
        Dest::Lun(b) => Some(&b.1),
        _ => None,
    }
}

async fn copy_chunk(
    src: &Source,
    dst: &Dest,
    at: u64,
    len: u64,
    fua: bool,
) -> Result<Option<Bytes>, CliError> {
    let data = match src {
        Source::Lun(b) => {
            let l = &b.1;
            let bs = l.block_size() as u64;
            l.read(at / bs, (len.div_ceil(bs)) as u32).await?
        }
        Source::File(f, p) => {
            let f = f.clone();
            let p = p.clone();
            tokio::task::spawn_blocking(move || -> Result<Bytes, CliError> {
                // The file is read straight into a registered pool buffer
                // when the LUN is reached over iSER (`crate::iobuf`).
                let mut buf = crate::iobuf::IoBuf::with_len(len as usize);
                f.read_exact_at(&mut buf, at)
                    .map_err(local("cannot read", &p))?;
                Ok(buf.into_bytes())
            })
            .await
            .map_err(|e| CliError::Other(format!("read task failed: {e}")))??
        }
    };
    match dst {
        Dest::Stream(_) => Ok(Some(data)),
        Dest::File { file, path, .. } => {
            let (f, p) = (file.clone(), path.clone());
            tokio::task::spawn_blocking(move || {
                f.write_all_at(&data, at).map_err(local("cannot write", &p))
            })
            .await
            .map_err(|e| CliError::Other(format!("write task failed: {e}")))??;
            Ok(None)
        }
        Dest::Lun(b) => {
            let l = &b.1;
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
            Ok(None)
        }
    }
}
