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
use std::os::unix::fs::FileExt;
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
    File(Arc<File>, PathBuf),
    Stdout,
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
    let dest = if dst == "-" {
        Dest::Stdout
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
        let meta = f.metadata().map_err(local("cannot stat", &p))?;
        if meta.is_file() {
            // A regular file gets exactly the LUN's size (sparse where unwritten).
            f.set_len(size).map_err(local("cannot size", &p))?;
        }
        Dest::File(Arc::new(f), p)
    };
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
    let mut stdout = std::io::stdout().lock();
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
            let n = match out {
                Some(data) => {
                    stdout
                        .write_all(&data)
                        .map_err(local("cannot write to", Path::new("standard output")))?;
                    data.len() as u64
                }
                None => chunk.min(size - bar.position()),
            };
            bar.inc(n);
        }
        Ok(())
    }
    .await;
    for h in inflight {
        h.abort();
    }
    bar.finish_and_clear();
    if result.is_ok() {
        match &*dst_arc {
            Dest::Lun(b) => b.1.sync().await?,
            Dest::File(f, p) => f.sync_all().map_err(local("cannot sync", p))?,
            Dest::Stdout => stdout
                .flush()
                .map_err(local("cannot write to", Path::new("standard output")))?,
        }
    }
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
                let mut buf = vec![0u8; len as usize];
                f.read_exact_at(&mut buf, at)
                    .map_err(local("cannot read", &p))?;
                Ok(Bytes::from(buf))
            })
            .await
            .map_err(|e| CliError::Other(format!("read task failed: {e}")))??
        }
    };
    match dst {
        Dest::Stdout => Ok(Some(data)),
        Dest::File(f, p) => {
            let (f, p) = (f.clone(), p.clone());
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
