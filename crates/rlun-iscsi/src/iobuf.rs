//! Fixed-address I/O buffers from a process-wide pool of memory arenas, so
//! an RDMA transport can register the memory once per connection instead
//! of once per command.
//!
//! [`IoBuf`] is an owned, mutable byte buffer whose address never changes.
//! With the pool enabled ([`enable`], done when the first iSER connection
//! is made) it is a chunk of a pool arena: the arenas are allocated once
//! (4 MiB each, up to [`POOL_CAP`] in all), kept for the life of the process
//! and registered by each iSER connection with its RDMA device when the
//! connection is made (and when a new arena appears: once per arena and
//! connection). A command whose read destination or write data lies in an
//! arena is then named to the target with the arena's key, without a
//! registration on the data path; a read lands directly in the buffer the
//! caller gets back ([`IoBuf::into_bytes`] hands the same memory over as
//! `Bytes`, and dropping the last `Bytes` returns the chunk to the pool).
//!
//! The page cache's memory is a pool of its own ([`Pool::reserved`], one
//! per page cache budget): allocated once up front, never
//! grown (bar one arena for a chunk size that has none), its arenas in the
//! same process-wide list ([`arenas`], [`arena_of`]) that an iSER
//! connection registers, so cache pages are registered memory too.
//!
//! Chunks come in power-of-two size classes from 4 KiB to the arena size;
//! larger requests, requests once the pool is at its cap, and every request
//! while the pool is disabled (TCP only) get ordinary heap memory, which a
//! direct transport then registers per command.
//!
//! A chunk's contents when handed out are whatever an earlier buffer of
//! this process left there (heap buffers are zeroed). A read buffer is cut
//! to the length the target reported transferring before anyone sees it.
//!
//! On TCP (pool disabled) the read buffers of in-band commands come from a
//! small pool of their own ([`receive_pool`], at most [`RECEIVE_POOL_CAP`]
//! bytes, grown an arena at a time on first use and kept): a read then
//! neither allocates nor zero-fills memory, and the memory stays hot in
//! the CPU's cache. Past that cap (more reads held by callers at once than
//! it covers) read buffers are heap memory again, freed when dropped, so
//! the process's memory beyond the page cache's budget stays that
//! constant plus what callers hold. In-band read data is only ever handed
//! out up to the last byte the target sent in order (see
//! `proto::connection`), so the stale contents of a chunk never
//! reach a caller.
//!
//! The whole pool is safe Rust: arenas are leaked boxed slices split into
//! `&'static mut [u8]` chunks, so only the transport's registration (which
//! hands addresses to the device) needs `unsafe`, in its own module.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};

use bytes::Bytes;

/// Size of one arena (and of the largest pooled buffer).
pub const ARENA_LEN: usize = 4 << 20;
/// Memory the process-wide pool may take in all.
pub const POOL_CAP: usize = 256 << 20;
const PAGE: usize = 4096;
const MIN_SHIFT: u32 = 12;
/// 4 KiB, 8 KiB, … 4 MiB.
const CLASSES: usize = (ARENA_LEN.trailing_zeros() - MIN_SHIFT + 1) as usize;

/// Memory the TCP receive pool ([`receive_pool`]) may take in all: read
/// buffers of 32 commands of 512 KiB, or of 128 of 128 KiB, at once.
pub const RECEIVE_POOL_CAP: usize = 16 << 20;

static ENABLED: AtomicBool = AtomicBool::new(false);
static GLOBAL: OnceLock<&'static Pool> = OnceLock::new();
static RECEIVE: OnceLock<&'static Pool> = OnceLock::new();
/// Every arena of every pool of the process (the I/O pool and the page
/// cache's), in creation order: an arena's index is its position here.
static REGISTRY: RwLock<Vec<Arena>> = RwLock::new(Vec::new());

/// Let [`IoBuf`]s come from the pool from now on (an RDMA transport is in
/// use). Until then they are heap memory, which costs nothing to pin.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether new buffers come from the pool.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn global() -> &'static Pool {
    GLOBAL.get_or_init(|| Box::leak(Box::new(Pool::new(POOL_CAP))))
}

/// The pool in-band (TCP) read buffers come from while the process-wide
/// pool is disabled (see the module docs). Holds no memory until the first
/// read; at most [`RECEIVE_POOL_CAP`] bytes.
pub fn receive_pool() -> &'static Pool {
    RECEIVE.get_or_init(|| Box::leak(Box::new(Pool::new(RECEIVE_POOL_CAP))))
}

/// The pool an in-band command's read buffer comes from: the process-wide
/// (registered) pool once an RDMA transport enabled it, else the TCP
/// [`receive_pool`].
pub fn read_pool() -> &'static Pool {
    if enabled() {
        global()
    } else {
        receive_pool()
    }
}

/// One arena of the process-wide pool: `len` bytes at `addr`, alive (and
/// unmoved) for the rest of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arena {
    /// Position in [`arenas`], stable for the life of the process.
    pub index: usize,
    pub addr: usize,
    pub len: usize,
}

/// Every arena of every pool so far: the I/O pool's and the page cache's
/// (see [`Pool::reserved`]), which an RDMA transport registers alike.
pub fn arenas() -> Vec<Arena> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The arena (of any pool) that holds all of `addr..addr+len`.
pub fn arena_of(addr: usize, len: usize) -> Option<Arena> {
    let end = addr.checked_add(len)?;
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|a| a.addr <= addr && end <= a.addr + a.len)
        .copied()
}

fn register(addr: usize, len: usize) -> Arena {
    let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    let arena = Arena {
        index: reg.len(),
        addr,
        len,
    };
    reg.push(arena);
    arena
}

/// A pool of arenas: the process-wide I/O pool, each page-cache budget's
/// pool ([`Pool::reserved`]), and the pools tests make.
pub struct Pool {
    state: Mutex<State>,
    arenas: RwLock<Vec<Arena>>,
    /// Reuse freed chunks oldest first (see [`Pool::reserved`]).
    fifo: bool,
}

struct State {
    free: [VecDeque<&'static mut [u8]>; CLASSES],
    /// The part of the newest arena not yet cut into chunks.
    rest: &'static mut [u8],
    /// Arenas allocated up front and not cut into chunks yet.
    unused: Vec<&'static mut [u8]>,
    /// Chunks handed out and not given back, per class.
    out: [usize; CLASSES],
    total: usize,
    cap: usize,
}

fn class_of(len: usize) -> Option<usize> {
    if len > ARENA_LEN {
        return None;
    }
    let size = len.max(PAGE).next_power_of_two();
    Some((size.trailing_zeros() - MIN_SHIFT) as usize)
}

fn class_len(class: usize) -> usize {
    PAGE << class
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("capacity", &self.capacity())
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl Pool {
    /// A pool that allocates at most `cap` bytes of arenas.
    pub fn new(cap: usize) -> Pool {
        Pool {
            state: Mutex::new(State {
                free: std::array::from_fn(|_| VecDeque::new()),
                rest: Default::default(),
                unused: Vec::new(),
                out: [0; CLASSES],
                total: 0,
                cap,
            }),
            arenas: RwLock::new(Vec::new()),
            fifo: false,
        }
    }

    /// A pool whose memory, `cap` bytes rounded up to whole arenas, is
    /// allocated once, now, as one page-aligned region and registered as
    /// arenas of the process (so an RDMA transport registers it like the
    /// I/O pool). The page cache takes its pages from such a pool: nothing
    /// of it is ever freed to the system, and nothing is allocated beyond
    /// it, except one arena for a chunk size that has none at all (so a
    /// second page size in the same budget cannot starve; see
    /// [`Pool::try_alloc`]). Untouched memory costs no RSS (it is mapped
    /// zero pages until first written).
    ///
    /// Freed chunks are reused oldest first, so chunks freed in address
    /// order (pages evicted in LRU order after a sequential fill) are
    /// handed out again in address order, side by side.
    pub fn reserved(cap: usize) -> &'static Pool {
        let n = cap.div_ceil(ARENA_LEN).max(1);
        let mut pool = Pool::new(n * ARENA_LEN);
        pool.fifo = true;
        let raw: &'static mut [u8] = Box::leak(vec![0u8; n * ARENA_LEN + PAGE].into_boxed_slice());
        let skip = raw.as_ptr().align_offset(PAGE).min(PAGE);
        let mut region = &mut raw[skip..skip + n * ARENA_LEN];
        {
            let st = pool.state.get_mut().unwrap_or_else(|e| e.into_inner());
            let mut arenas = pool.arenas.write().unwrap_or_else(|e| e.into_inner());
            while !region.is_empty() {
                let (arena, tail) = region.split_at_mut(ARENA_LEN);
                arenas.push(register(arena.as_ptr() as usize, ARENA_LEN));
                st.unused.push(arena);
                region = tail;
            }
            // Cut the lowest address first.
            st.unused.reverse();
            st.total = n * ARENA_LEN;
        }
        Box::leak(Box::new(pool))
    }

    /// Bytes of arenas this pool holds.
    pub fn capacity(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).total
    }

    /// Bytes of chunks handed out now.
    pub fn in_use(&self) -> usize {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.out
            .iter()
            .enumerate()
            .map(|(c, n)| n * class_len(c))
            .sum()
    }

    /// The arenas of this pool.
    pub fn arenas(&self) -> Vec<Arena> {
        self.arenas
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    #[cfg(test)]
    fn arena_of(&self, addr: usize, len: usize) -> Option<Arena> {
        let end = addr.checked_add(len)?;
        self.arenas
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|a| a.addr <= addr && end <= a.addr + a.len)
            .copied()
    }

    /// A chunk of class `class`, or `None` when the pool is at its cap.
    fn take(&self, class: usize) -> Option<&'static mut [u8]> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        let reused = if self.fifo {
            st.free[class].pop_front()
        } else {
            st.free[class].pop_back()
        };
        if let Some(c) = reused {
            st.out[class] += 1;
            return Some(c);
        }
        let size = class_len(class);
        if st.rest.len() < size {
            let arena = match st.unused.pop() {
                Some(a) => a,
                None => {
                    // Past the cap only for a class with nothing at all, so
                    // that one chunk size cannot starve another for good.
                    let starved = st.out[class] == 0 && st.free[class].is_empty();
                    if st.total + ARENA_LEN > st.cap && !(self.fifo && starved) {
                        return None;
                    }
                    // One page more, so the arena can start on a page boundary.
                    let raw: &'static mut [u8] =
                        Box::leak(vec![0u8; ARENA_LEN + PAGE].into_boxed_slice());
                    let skip = raw.as_ptr().align_offset(PAGE).min(PAGE);
                    let arena = &mut raw[skip..skip + ARENA_LEN];
                    self.arenas
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(register(arena.as_ptr() as usize, ARENA_LEN));
                    st.total += ARENA_LEN;
                    arena
                }
            };
            // What is left of the old arena goes to the smaller classes.
            let mut left = std::mem::replace(&mut st.rest, arena);
            while left.len() >= PAGE {
                let c = (usize::BITS - 1 - left.len().leading_zeros() - MIN_SHIFT) as usize;
                let c = c.min(CLASSES - 1);
                let (chunk, tail) = left.split_at_mut(class_len(c));
                st.free[c].push_back(chunk);
                left = tail;
            }
        }
        let (chunk, tail) = std::mem::take(&mut st.rest).split_at_mut(size);
        st.rest = tail;
        st.out[class] += 1;
        Some(chunk)
    }

    fn give_back(&self, class: usize, chunk: &'static mut [u8]) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.out[class] -= 1;
        st.free[class].push_back(chunk);
    }

    /// A buffer of `len` bytes (at most [`ARENA_LEN`]) from this pool, or
    /// `None` when the pool has no chunk of that size left: never heap
    /// memory. Contents are what an earlier user left there.
    pub fn try_alloc(&'static self, len: usize) -> Option<IoBuf> {
        let class = class_of(len)?;
        let chunk = self.take(class)?;
        Some(IoBuf {
            store: Store::Pooled {
                pool: self,
                class,
                chunk,
            },
            len,
        })
    }

    /// A buffer of `len` bytes from this pool (heap memory if it cannot
    /// give one).
    pub fn alloc(&'static self, len: usize) -> IoBuf {
        if let Some(class) = class_of(len) {
            if let Some(chunk) = self.take(class) {
                return IoBuf {
                    store: Store::Pooled {
                        pool: self,
                        class,
                        chunk,
                    },
                    len,
                };
            }
        }
        IoBuf {
            store: Store::Heap(vec![0u8; len]),
            len,
        }
    }
}

enum Store {
    Pooled {
        pool: &'static Pool,
        class: usize,
        chunk: &'static mut [u8],
    },
    Heap(Vec<u8>),
}

/// An owned I/O buffer at a fixed address (see the module docs).
pub struct IoBuf {
    store: Store,
    len: usize,
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoBuf")
            .field("len", &self.len)
            .field("pooled", &self.is_pooled())
            .finish()
    }
}

impl IoBuf {
    /// A buffer of `len` bytes, from the process-wide pool when it is
    /// enabled. Pooled contents are unspecified (see the module docs).
    pub fn with_len(len: usize) -> IoBuf {
        if enabled() && len > 0 {
            global().alloc(len)
        } else {
            IoBuf {
                store: Store::Heap(vec![0u8; len]),
                len,
            }
        }
    }

    /// A buffer holding a copy of `data`.
    pub fn copy_from_slice(data: &[u8]) -> IoBuf {
        let mut b = IoBuf::with_len(data.len());
        b.copy_from_slice_at(data);
        b
    }

    fn copy_from_slice_at(&mut self, data: &[u8]) {
        self[..].copy_from_slice(data);
    }

    /// An empty buffer (no memory).
    pub fn empty() -> IoBuf {
        IoBuf {
            store: Store::Heap(Vec::new()),
            len: 0,
        }
    }

    /// Whether the memory is a chunk of a pool arena.
    pub fn is_pooled(&self) -> bool {
        matches!(self.store, Store::Pooled { .. })
    }

    /// Shorten to `len` bytes (no effect if already shorter).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// The same memory as `Bytes`, without a copy; a pooled chunk returns
    /// to its pool when the last `Bytes` pointing into it is dropped.
    pub fn into_bytes(self) -> Bytes {
        if self.len == 0 {
            return Bytes::new();
        }
        Bytes::from_owner(self)
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.store {
            Store::Pooled { chunk, .. } => &chunk[..self.len],
            Store::Heap(v) => &v[..self.len],
        }
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.store {
            Store::Pooled { chunk, .. } => &mut chunk[..self.len],
            Store::Heap(v) => &mut v[..self.len],
        }
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if let Store::Pooled { pool, class, chunk } = &mut self.store {
            pool.give_back(*class, std::mem::take(chunk));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(cap: usize) -> &'static Pool {
        Box::leak(Box::new(Pool::new(cap)))
    }

    #[test]
    fn sizes_round_up_to_power_of_two_classes() {
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(4096), Some(0));
        assert_eq!(class_of(4097), Some(1));
        assert_eq!(class_of(128 << 10), Some(5));
        assert_eq!(class_of(ARENA_LEN), Some(CLASSES - 1));
        assert_eq!(class_of(ARENA_LEN + 1), None);
    }

    #[test]
    fn a_freed_chunk_is_reused_at_the_same_address() {
        let p = pool(ARENA_LEN);
        let mut a = p.alloc(100 << 10);
        assert!(a.is_pooled());
        assert_eq!(a.len(), 100 << 10);
        a[0] = 7;
        let addr = a.as_ptr() as usize;
        assert_eq!(addr % PAGE, 0, "chunks are page aligned");
        drop(a);
        let b = p.alloc(128 << 10);
        assert_eq!(b.as_ptr() as usize, addr, "same class, same chunk");
    }

    #[test]
    fn into_bytes_keeps_the_memory_and_returns_it_when_dropped() {
        let p = pool(ARENA_LEN);
        let mut a = p.alloc(8192);
        a.copy_from_slice_at(&[0x5a; 8192]);
        a.truncate(5000);
        let addr = a.as_ptr() as usize;
        let bytes = a.into_bytes();
        assert_eq!(bytes.as_ptr() as usize, addr, "no copy");
        assert_eq!(bytes.len(), 5000);
        assert!(bytes.iter().all(|&b| b == 0x5a));
        let part = bytes.slice(100..200);
        drop(bytes);
        // Still held by `part`: a new buffer of that class is elsewhere.
        let other = p.alloc(8192);
        assert_ne!(other.as_ptr() as usize, addr);
        drop(part);
        let again = p.alloc(8192);
        assert_eq!(
            again.as_ptr() as usize,
            addr,
            "returned after the last Bytes"
        );
    }

    #[test]
    fn arena_lookup_finds_pooled_buffers_only() {
        let p = pool(2 * ARENA_LEN);
        let a = p.alloc(64 << 10);
        let addr = a.as_ptr() as usize;
        let arena = p.arena_of(addr, a.len()).expect("in an arena");
        assert_eq!(arena.index, p.arenas()[0].index, "indices are process-wide");
        assert!(arena.addr <= addr && addr + a.len() <= arena.addr + arena.len);
        assert_eq!(
            p.arena_of(arena.addr + arena.len - 10, 20),
            None,
            "crosses the end"
        );
        let heap = vec![0u8; 4096];
        assert_eq!(p.arena_of(heap.as_ptr() as usize, 4096), None);
    }

    #[test]
    fn past_the_cap_and_beyond_the_largest_class_buffers_come_from_the_heap() {
        let p = pool(ARENA_LEN);
        let big = p.alloc(ARENA_LEN + 1);
        assert!(!big.is_pooled());
        assert_eq!(big.len(), ARENA_LEN + 1);
        let whole = p.alloc(ARENA_LEN);
        assert!(whole.is_pooled());
        let more = p.alloc(4096);
        assert!(!more.is_pooled(), "the one arena allowed is in use");
        assert_eq!(p.arenas().len(), 1);
    }

    #[test]
    fn the_rest_of_an_arena_is_not_lost_when_a_new_one_starts() {
        let p = pool(2 * ARENA_LEN);
        let _a = p.alloc(3 << 20); // class 4 MiB: the whole first arena
        let _b = p.alloc(4096); // second arena
        let _c = p.alloc(2 << 20); // 2 MiB from the second arena's rest
        assert_eq!(p.arenas().len(), 2);
        // 4 MiB - 4 KiB - 2 MiB remain, split into smaller classes.
        let d = p.alloc(1 << 20);
        assert!(d.is_pooled());
        assert_eq!(p.arenas().len(), 2);
    }

    #[test]
    fn disabled_pool_gives_zeroed_heap_memory() {
        // The process-wide pool is enabled only by an iSER connection,
        // which unit tests never make.
        if !enabled() {
            let b = IoBuf::with_len(4096);
            assert!(!b.is_pooled());
            assert!(b.iter().all(|&x| x == 0));
        }
        let c = IoBuf::copy_from_slice(b"abc");
        assert_eq!(&c[..], b"abc");
    }
}
