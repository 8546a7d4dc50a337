//! [`MemBackend`]: an in-memory [`BlockBackend`] for tests and models.
//!
//! It keeps its blocks in a `Vec<u8>`, counts and logs every command (so a
//! test can assert that the cache coalesced writes or issued read-ahead),
//! records how many commands were in flight at once, can delay each command
//! (to make concurrency observable) and can fail the next N commands of a
//! kind with a chosen errno. UNMAP and WRITE SAME leave zeros.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

use super::backend::{BackendError, BlockBackend};

/// A kind of backend command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemOp {
    Read,
    Write,
    Flush,
    Unmap,
    WriteZeroes,
}

impl MemOp {
    fn name(self) -> &'static str {
        match self {
            MemOp::Read => "READ",
            MemOp::Write => "WRITE",
            MemOp::Flush => "SYNCHRONIZE CACHE",
            MemOp::Unmap => "UNMAP",
            MemOp::WriteZeroes => "WRITE SAME",
        }
    }
}

/// One command as the backend received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemCommand {
    pub op: MemOp,
    pub lba: u64,
    pub blocks: u64,
    pub fua: bool,
}

/// Command counters of a [`MemBackend`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemCounts {
    pub reads: u64,
    pub writes: u64,
    pub fua_writes: u64,
    pub flushes: u64,
    pub unmaps: u64,
    pub write_zeroes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Most commands that were executing at the same time.
    pub max_in_flight: u64,
}

#[derive(Debug)]
struct Fault {
    op: MemOp,
    remaining: u32,
    errno: i32,
}

/// See the module docs.
#[derive(Debug)]
pub struct MemBackend {
    block_size: u32,
    blocks: u64,
    read_only: bool,
    max_transfer: u64,
    granularity: u64,
    optimal: u64,
    latency: Mutex<Duration>,
    data: Mutex<Vec<u8>>,
    faults: Mutex<Vec<Fault>>,
    log: Mutex<Vec<MemCommand>>,
    counts: Mutex<MemCounts>,
    in_flight: AtomicU64,
}

/// A command counted in `MemBackend::in_flight` (for `max_in_flight`)
/// until it ends.
struct CountedCommand<'a>(&'a MemBackend);

impl Drop for CountedCommand<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MemBackend {
    /// `blocks` zeroed blocks of `block_size` bytes, writable, 1 MiB
    /// maximum transfer.
    pub fn new(block_size: u32, blocks: u64) -> MemBackend {
        MemBackend::from_data(block_size, vec![0; (block_size as u64 * blocks) as usize])
    }

    /// A backend holding `data` (its length is rounded down to whole blocks).
    pub fn from_data(block_size: u32, mut data: Vec<u8>) -> MemBackend {
        let blocks = data.len() as u64 / block_size as u64;
        data.truncate((blocks * block_size as u64) as usize);
        MemBackend {
            block_size,
            blocks,
            read_only: false,
            max_transfer: (1 << 20).max(block_size as u64),
            granularity: 0,
            optimal: 0,
            latency: Mutex::new(Duration::ZERO),
            data: Mutex::new(data),
            faults: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            counts: Mutex::new(MemCounts::default()),
            in_flight: AtomicU64::new(0),
        }
    }

    /// Refuse writes, as a write-protected LUN does.
    pub fn read_only(mut self, read_only: bool) -> MemBackend {
        self.read_only = read_only;
        self
    }

    /// Largest transfer per command (rounded down to whole blocks, at least one).
    pub fn with_max_transfer(mut self, bytes: u64) -> MemBackend {
        let bs = self.block_size as u64;
        self.max_transfer = (bytes / bs).max(1) * bs;
        self
    }

    /// Report an optimal transfer granularity and length, in bytes.
    pub fn with_optimal(mut self, granularity: u64, transfer: u64) -> MemBackend {
        self.granularity = granularity;
        self.optimal = transfer;
        self
    }

    /// Delay every command by `latency` (0 for none).
    pub fn with_latency(self, latency: Duration) -> MemBackend {
        self.set_latency(latency);
        self
    }

    pub fn set_latency(&self, latency: Duration) {
        *lock(&self.latency) = latency;
    }

    /// Fail the next `times` commands of kind `op` with `errno`.
    pub fn fail_next(&self, op: MemOp, times: u32, errno: i32) {
        lock(&self.faults).push(Fault {
            op,
            remaining: times,
            errno,
        });
    }

    /// Stop failing commands.
    pub fn clear_faults(&self) {
        lock(&self.faults).clear();
    }

    /// A copy of every byte.
    pub fn snapshot(&self) -> Vec<u8> {
        lock(&self.data).clone()
    }

    /// Bytes `offset..offset + len` (panics when out of range: test helper).
    pub fn bytes_at(&self, offset: u64, len: usize) -> Vec<u8> {
        lock(&self.data)[offset as usize..offset as usize + len].to_vec()
    }

    pub fn counts(&self) -> MemCounts {
        *lock(&self.counts)
    }

    /// Every command received so far, in order.
    pub fn log(&self) -> Vec<MemCommand> {
        lock(&self.log).clone()
    }

    /// Forget the log and the counters.
    pub fn reset_counts(&self) {
        lock(&self.log).clear();
        *lock(&self.counts) = MemCounts::default();
    }

    /// Common start of every command: latency, in-flight count, log, faults,
    /// range and write-protect checks.
    async fn begin(
        &self,
        op: MemOp,
        lba: u64,
        blocks: u64,
        fua: bool,
    ) -> Result<CountedCommand<'_>, BackendError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let guard = CountedCommand(self);
        {
            let mut c = lock(&self.counts);
            c.max_in_flight = c.max_in_flight.max(now);
        }
        let latency = *lock(&self.latency);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        lock(&self.log).push(MemCommand {
            op,
            lba,
            blocks,
            fua,
        });
        {
            let mut faults = lock(&self.faults);
            if let Some(pos) = faults.iter().position(|f| f.op == op && f.remaining > 0) {
                faults[pos].remaining -= 1;
                let errno = faults[pos].errno;
                if faults[pos].remaining == 0 {
                    faults.remove(pos);
                }
                return Err(BackendError::Injected {
                    op: op.name(),
                    errno,
                });
            }
        }
        if lba.checked_add(blocks).is_none_or(|end| end > self.blocks) {
            return Err(BackendError::OutOfRange {
                op: op.name(),
                lba,
                blocks,
                capacity: self.blocks,
            });
        }
        if self.read_only && op != MemOp::Read && op != MemOp::Flush {
            return Err(BackendError::ReadOnly { op: op.name() });
        }
        Ok(guard)
    }

    fn range(&self, lba: u64, blocks: u64) -> std::ops::Range<usize> {
        let bs = self.block_size as u64;
        (lba * bs) as usize..((lba + blocks) * bs) as usize
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BlockBackend for MemBackend {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn max_transfer_bytes(&self) -> u64 {
        self.max_transfer
    }
    fn optimal_granularity_bytes(&self) -> u64 {
        self.granularity
    }
    fn optimal_transfer_bytes(&self) -> u64 {
        self.optimal
    }

    async fn read_blocks(&self, lba: u64, blocks: u32) -> Result<Bytes, BackendError> {
        let _g = self.begin(MemOp::Read, lba, blocks as u64, false).await?;
        let out = Bytes::copy_from_slice(&lock(&self.data)[self.range(lba, blocks as u64)]);
        let mut c = lock(&self.counts);
        c.reads += 1;
        c.bytes_read += out.len() as u64;
        Ok(out)
    }

    /// Memory has nothing to send ahead: reads run with `read_blocks`.
    type StartedRead = ();
    fn start_read(&self, _lba: u64, _blocks: u32) {}
    fn poll_read(
        &self,
        _started: &mut (),
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Bytes, BackendError>>> {
        std::task::Poll::Ready(None)
    }

    async fn write_blocks(&self, lba: u64, data: Bytes, fua: bool) -> Result<(), BackendError> {
        let bs = self.block_size as u64;
        let blocks = data.len() as u64 / bs;
        let _g = self.begin(MemOp::Write, lba, blocks, fua).await?;
        if !(data.len() as u64).is_multiple_of(bs) {
            return Err(BackendError::Injected {
                op: "WRITE of a partial block",
                errno: rlun_iscsi::scsi::sense::errno::EINVAL,
            });
        }
        lock(&self.data)[self.range(lba, blocks)].copy_from_slice(&data);
        let mut c = lock(&self.counts);
        c.writes += 1;
        c.fua_writes += fua as u64;
        c.bytes_written += data.len() as u64;
        Ok(())
    }

    async fn flush(&self) -> Result<(), BackendError> {
        let _g = self.begin(MemOp::Flush, 0, 0, false).await?;
        lock(&self.counts).flushes += 1;
        Ok(())
    }

    async fn unmap(&self, lba: u64, blocks: u64) -> Result<(), BackendError> {
        let _g = self.begin(MemOp::Unmap, lba, blocks, false).await?;
        lock(&self.data)[self.range(lba, blocks)].fill(0);
        lock(&self.counts).unmaps += 1;
        Ok(())
    }

    async fn write_zeroes(&self, lba: u64, blocks: u64, _unmap: bool) -> Result<(), BackendError> {
        let _g = self.begin(MemOp::WriteZeroes, lba, blocks, false).await?;
        lock(&self.data)[self.range(lba, blocks)].fill(0);
        lock(&self.counts).write_zeroes += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlun_iscsi::scsi::sense::errno;

    #[tokio::test]
    async fn writes_land_in_the_store_and_are_counted() {
        let m = MemBackend::new(512, 8);
        m.write_blocks(2, Bytes::from(vec![7u8; 1024]), true)
            .await
            .unwrap();
        assert_eq!(m.bytes_at(1024, 1024), vec![7u8; 1024]);
        assert_eq!(m.read_blocks(2, 1).await.unwrap(), vec![7u8; 512]);
        let c = m.counts();
        assert_eq!((c.writes, c.fua_writes, c.reads), (1, 1, 1));
        assert_eq!(
            m.log()[0],
            MemCommand {
                op: MemOp::Write,
                lba: 2,
                blocks: 2,
                fua: true
            }
        );
    }

    #[tokio::test]
    async fn injected_fault_fails_exactly_the_requested_commands() {
        let m = MemBackend::new(512, 8);
        m.fail_next(MemOp::Read, 1, errno::ENOSPC);
        let e = m.read_blocks(0, 1).await.unwrap_err();
        assert_eq!(e.to_errno(), errno::ENOSPC);
        assert!(m.read_blocks(0, 1).await.is_ok());
    }

    #[tokio::test]
    async fn out_of_range_and_read_only_are_refused() {
        let m = MemBackend::new(512, 8).read_only(true);
        assert_eq!(
            m.read_blocks(7, 2).await.unwrap_err().to_errno(),
            errno::EINVAL
        );
        let e = m.write_blocks(0, Bytes::from(vec![0u8; 512]), false).await;
        assert_eq!(e.unwrap_err().to_errno(), errno::EROFS);
    }

    #[tokio::test]
    async fn unmap_and_write_zeroes_leave_zeros() {
        let m = MemBackend::from_data(512, vec![0xffu8; 4096]);
        m.unmap(1, 1).await.unwrap();
        m.write_zeroes(3, 2, false).await.unwrap();
        let s = m.snapshot();
        assert!(s[512..1024].iter().all(|&b| b == 0));
        assert!(s[1536..2560].iter().all(|&b| b == 0));
        assert!(s[1024..1536].iter().all(|&b| b == 0xff));
    }
}
