//! Test backends for the export layer and the front ends above it:
//! [`TestLun`], a `MemBackend` with what a real LUN adds (capacity
//! changes, LBPU/LBPRZ, a connection to try again).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::device::{BackendError, BlockBackend, LunBackend, MemBackend};

/// A [`MemBackend`] that can pretend to be resized and can claim
/// LBPU/LBPRZ, for the parts of [`LunBackend`] a real LUN has.
#[derive(Clone)]
pub struct TestLun {
    pub mem: Arc<MemBackend>,
    pub generation: Arc<AtomicU64>,
    pub resized: Arc<Mutex<Option<Arc<MemBackend>>>>,
    pub lbpu: bool,
    pub lbprz: bool,
    /// Calls of [`LunBackend::reconnect`].
    pub reconnects: Arc<AtomicU64>,
    /// A target that is back: the next [`LunBackend::reconnect`] clears
    /// the injected faults (and this flag).
    pub back_on_reconnect: Arc<AtomicBool>,
}

impl TestLun {
    pub fn new(mem: MemBackend) -> TestLun {
        TestLun {
            mem: Arc::new(mem),
            generation: Arc::new(AtomicU64::new(0)),
            resized: Arc::new(Mutex::new(None)),
            lbpu: false,
            lbprz: false,
            reconnects: Arc::new(AtomicU64::new(0)),
            back_on_reconnect: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Report a capacity change: the next refresh sees `mem`.
    pub fn resize(&self, mem: MemBackend) {
        *self.resized.lock().unwrap() = Some(Arc::new(mem));
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl BlockBackend for TestLun {
    fn block_size(&self) -> u32 {
        self.mem.block_size()
    }
    fn blocks(&self) -> u64 {
        self.mem.blocks()
    }
    fn read_only(&self) -> bool {
        BlockBackend::read_only(&*self.mem)
    }
    fn max_transfer_bytes(&self) -> u64 {
        self.mem.max_transfer_bytes()
    }
    fn read_blocks(
        &self,
        lba: u64,
        blocks: u32,
    ) -> impl Future<Output = Result<Bytes, BackendError>> + Send {
        self.mem.read_blocks(lba, blocks)
    }
    type StartedRead = ();
    fn start_read(&self, lba: u64, blocks: u32) {
        self.mem.start_read(lba, blocks)
    }
    fn poll_read(
        &self,
        started: &mut (),
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Bytes, BackendError>>> {
        self.mem.poll_read(started, cx)
    }
    fn write_blocks(
        &self,
        lba: u64,
        data: Bytes,
        fua: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        self.mem.write_blocks(lba, data, fua)
    }
    fn flush(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        self.mem.flush()
    }
    fn unmap(
        &self,
        lba: u64,
        blocks: u64,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        self.mem.unmap(lba, blocks)
    }
    fn write_zeroes(
        &self,
        lba: u64,
        blocks: u64,
        unmap: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        self.mem.write_zeroes(lba, blocks, unmap)
    }
}

impl LunBackend for TestLun {
    fn reconnect(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        self.reconnects.fetch_add(1, Ordering::SeqCst);
        if self.back_on_reconnect.swap(false, Ordering::SeqCst) {
            self.mem.clear_faults();
        }
        async { Ok(()) }
    }
    fn capacity_generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
    fn reread_capacity(&self) -> impl Future<Output = Result<TestLun, BackendError>> + Send {
        let mut next = self.clone();
        if let Some(m) = self.resized.lock().unwrap().clone() {
            next.mem = m;
        }
        async move { Ok(next) }
    }
    fn can_unmap(&self) -> bool {
        self.lbpu || self.lbprz
    }
    fn unmap_reads_zeros(&self) -> bool {
        self.lbprz
    }
}
