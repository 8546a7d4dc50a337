//! The export set: the exports of one target, which LUNs they are
//! ([`open_luns`]), how they come and go while serving, and what the end of
//! serving reports ([`ShutdownReport`]). See the parent module's docs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use thiserror::Error;
use tracing::{debug, error, info};

use super::{Export, ExportError, LunBackend};
use crate::client::{ClientError, Lun, Target};
use crate::device::{DeviceConfig, DeviceError};
use rlun_iscsi::error_chain;

/// The exports of one target (or the one LUN a URL names). LUNs come and
/// go while it serves ([`ExportSet::add`], [`ExportSet::remove`]: the
/// target's REPORTED LUNS DATA HAS CHANGED, or a rescan); readers take a
/// snapshot ([`ExportSet::exports`]).
pub struct ExportSet<B: LunBackend> {
    exports: RwLock<Arc<[Arc<Export<B>>]>>,
    /// Exports whose LUN went away, kept for the lost-data report.
    removed: std::sync::Mutex<Vec<Arc<Export<B>>>>,
    /// Bumped by every add and remove.
    generation: AtomicU64,
    cfg: DeviceConfig,
    read_only: bool,
}

impl<B: LunBackend> ExportSet<B> {
    /// One export per `(lun number, backend)`, each given a [`LunDevice`]
    /// with `cfg`; `read_only` makes every export read-only. Must run inside
    /// a Tokio runtime.
    pub fn new(
        luns: Vec<(u64, B)>,
        cfg: &DeviceConfig,
        read_only: bool,
    ) -> Result<ExportSet<B>, DeviceError> {
        let exports = luns
            .into_iter()
            .map(|(n, b)| Export::new(n, b, cfg, read_only).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ExportSet {
            exports: RwLock::new(exports.into()),
            removed: std::sync::Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            cfg: cfg.clone(),
            read_only,
        })
    }

    /// The exports now, in REPORT LUNS order (new LUNs at the end).
    pub fn exports(&self) -> Arc<[Arc<Export<B>>]> {
        self.exports
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The export called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Export<B>>> {
        self.exports().iter().find(|e| e.name == name).cloned()
    }

    /// The export of LUN `number`.
    pub fn by_number(&self, number: u64) -> Option<Arc<Export<B>>> {
        self.exports().iter().find(|e| e.number == number).cloned()
    }

    /// Export LUN `number`, which the target reports now, with the
    /// settings of the others.
    pub fn add(&self, number: u64, backend: B) -> Result<Arc<Export<B>>, DeviceError> {
        let e = Arc::new(Export::new(number, backend, &self.cfg, self.read_only)?);
        let mut cur = self.exports.write().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = cur.iter().cloned().collect();
        v.push(e.clone());
        *cur = v.into();
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(e)
    }

    /// A count of the exports added and removed so far: a front end that
    /// mirrors the set looks again when it moved.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The target no longer reports LUN `number` (or another logical unit
    /// has it now): its requests fail with [`ExportError::Gone`] from now
    /// on, its backend is fenced ([`LunBackend::fence`]: nothing cached is
    /// written back), and data still cached for it is reported lost at the
    /// end ([`ExportSet::finish`]).
    pub fn remove(&self, number: u64) -> Option<Arc<Export<B>>> {
        let e = {
            let mut cur = self.exports.write().unwrap_or_else(|e| e.into_inner());
            let e = cur.iter().find(|e| e.number == number)?.clone();
            let v: Vec<_> = cur.iter().filter(|x| x.number != number).cloned().collect();
            *cur = v.into();
            e
        };
        e.gone.store(true, Ordering::Release);
        // Its flusher must not write to another LU under the same number.
        e.device().backend().fence();
        self.generation.fetch_add(1, Ordering::AcqRel);
        let dirty = e.dirty_bytes();
        if dirty > 0 {
            error!(
                lun = number,
                dirty, "the target removed the LUN: its cached data cannot be written and is lost"
            );
        } else {
            info!(lun = number, "the target removed the LUN");
        }
        self.removed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e.clone());
        Some(e)
    }

    /// Every export is read-only.
    pub fn all_read_only(&self) -> bool {
        self.exports().iter().all(|e| e.read_only)
    }

    /// Refuse every later request with [`ExportError::ShutDown`].
    pub fn shut_down(&self) {
        for e in self.exports().iter() {
            e.shut.store(true, Ordering::Release);
        }
    }

    /// Flush every writable export (dirty write-back data, then
    /// SYNCHRONIZE CACHE). Returns the first failure after trying all.
    pub async fn flush_all(&self) -> Result<(), ExportError> {
        let mut first = None;
        for e in self.exports().iter() {
            if e.read_only {
                continue;
            }
            if let Err(err) = e.flush_now().await {
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Bytes written into caches and not yet to the target.
    pub fn dirty_bytes(&self) -> u64 {
        self.exports().iter().map(|e| e.dirty_bytes()).sum()
    }

    /// The last step before logging out: flush each export that has cached
    /// data or writes since its last flush, and report what could not be
    /// made durable. Works after [`ExportSet::shut_down`] too.
    pub async fn finish(&self) -> ShutdownReport {
        let mut lost = Vec::new();
        for e in self
            .removed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let dirty_bytes = e.dirty_bytes();
            if dirty_bytes > 0 {
                lost.push(LostData {
                    export: e.name.clone(),
                    dirty_bytes,
                    error: ExportError::Gone {
                        export: e.name.clone(),
                    },
                });
            }
        }
        for e in self.exports().iter() {
            let lost_in_resize = e.retired().await;
            if lost_in_resize > 0 {
                lost.push(LostData {
                    export: e.name.clone(),
                    dirty_bytes: lost_in_resize,
                    error: ExportError::LostInResize {
                        export: e.name.clone(),
                    },
                });
            }
            let dirty_bytes = e.dirty_bytes();
            if e.read_only || (dirty_bytes == 0 && !e.unsynced()) {
                continue;
            }
            if let Err(err) = e.finish_flush().await {
                lost.push(LostData {
                    export: e.name.clone(),
                    dirty_bytes: e.dirty_bytes(),
                    error: err,
                });
            }
        }
        ShutdownReport { lost }
    }
}

/// How many times [`ExportSet::finish`] flushes an export before it
/// declares its data lost (see [`Export::finish_flush`]).
pub const FINAL_FLUSH_ROUNDS: u32 = 3;
/// The pause between those rounds when the fresh try at the target failed
/// too (a refused connection fails at once).
pub const FINAL_FLUSH_PAUSE: Duration = Duration::from_secs(1);

/// Data of one export that may not have reached the target's stable
/// storage.
#[derive(Debug)]
pub struct LostData {
    pub export: String,
    /// Bytes still only in rlun's cache (0: the writes reached the target,
    /// but the final SYNCHRONIZE CACHE failed).
    pub dirty_bytes: u64,
    /// Why the final flush failed.
    pub error: ExportError,
}

/// What [`ExportSet::finish`] found.
#[derive(Debug, Default)]
pub struct ShutdownReport {
    pub lost: Vec<LostData>,
}

impl ShutdownReport {
    /// Some written data may not be on the target's stable storage.
    pub fn data_lost(&self) -> bool {
        !self.lost.is_empty()
    }

    /// `Ok` when nothing was lost, else the [`DataLost`] error to report.
    pub fn into_result(self) -> Result<(), DataLost> {
        if self.lost.is_empty() {
            Ok(())
        } else {
            Err(DataLost { lost: self.lost })
        }
    }
}

/// Written data did not reach the target (or not its stable storage).
#[derive(Debug, Error)]
#[error("{}", describe_lost(.lost))]
pub struct DataLost {
    pub lost: Vec<LostData>,
}

fn describe_lost(lost: &[LostData]) -> String {
    let parts: Vec<String> = lost
        .iter()
        .map(|l| {
            let what = if l.dirty_bytes > 0 {
                format!(
                    "{} bytes of cached data could not be written",
                    l.dirty_bytes
                )
            } else {
                "written data could not be flushed to stable storage".to_string()
            };
            format!("{}: {what}: {}", l.export, error_chain(&l.error))
        })
        .collect();
    parts.join("; ")
}

/// Why [`open_luns`] found nothing to export.
#[derive(Debug, Error)]
pub enum OpenError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("target {target} has no disk LUNs")]
    NoDiskLuns { target: String },
}

/// The LUN `only` (a LUN URL), or every disk LUN of the target in REPORT
/// LUNS order (see the module docs for what is left out). An empty set is
/// [`OpenError::NoDiskLuns`].
pub async fn open_luns(
    target: &Target,
    target_name: &str,
    only: Option<u64>,
) -> Result<Vec<(u64, Lun)>, OpenError> {
    if let Some(n) = only {
        return Ok(vec![(n, target.open_lun(n).await?)]);
    }
    let mut luns = Vec::new();
    for n in target.report_luns().await? {
        match target.open_lun(n).await {
            Ok(l) => luns.push((n, l)),
            Err(ClientError::NotADisk { device_type, .. }) => {
                debug!(lun = n, device_type, "not a disk; not exported");
            }
            Err(ClientError::LunNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if luns.is_empty() {
        return Err(OpenError::NoDiskLuns {
            target: target_name.to_string(),
        });
    }
    Ok(luns)
}
