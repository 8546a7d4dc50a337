//! Reply buffers of cached reads, carved from a per-thread arena so that a
//! cache hit costs no allocation of its own.

use bytes::{Bytes, BytesMut};

/// Reply buffers of cached reads are carved from a per-thread arena of
/// this size: one allocation serves many small reads (a 4 KiB hit would
/// otherwise cost a malloc and a free of its own). A slice keeps its arena
/// block alive until dropped, so the block is kept small.
const ARENA: usize = 64 << 10;

thread_local! {
    static ARENA_BUF: std::cell::RefCell<BytesMut> =
        std::cell::RefCell::new(BytesMut::new());
}

/// An empty buffer with room for `len` bytes: the thread's arena when
/// `len` is small (give it back with [`arena_put`]), else its own.
#[inline]
pub(super) fn arena_take(len: usize) -> BytesMut {
    if len > ARENA / 4 {
        return BytesMut::with_capacity(len);
    }
    let mut b = ARENA_BUF.with(|a| std::mem::take(&mut *a.borrow_mut()));
    if b.capacity() < len {
        // Reuses the old block when no reply holds a slice of it any more.
        b.reserve(ARENA);
    }
    b
}

/// Split the filled part off `buf` as the reply; the room left goes back
/// to the thread's arena (unless it holds more already).
#[inline]
pub(super) fn arena_put(mut buf: BytesMut) -> Bytes {
    let data = buf.split().freeze();
    if buf.capacity() > 0 {
        ARENA_BUF.with(|a| {
            let mut a = a.borrow_mut();
            if a.capacity() < buf.capacity() {
                *a = buf;
            }
        });
    }
    data
}
