//! Reusable buffers per compute node, sharded by client, so steady-state operations allocate
//! nothing and clients on different threads share no cache line.
//!
//! # Why sharded
//!
//! One queue for a compute node puts its head and tail words on every operation of every
//! thread: on two threads that one line bouncing cost CHIME's search about a tenth of its time.
//! A [`Pool`] is [`SHARDS`] queues, each on its own cache line; a client takes from and returns
//! to the shard of its [`Client::ordinal`], so clients made one after another (one per thread or
//! coroutine) use different shards. Sharing a shard is only slower, never wrong.
//!
//! # Memory
//!
//! A buffer returned to a full shard is freed; an empty shard makes a new one. A buffer keeps its
//! memory for life: freeing memory another thread allocated contends on that thread's allocator.
//! Buffers are kept boxed, so taking one from a queue and giving it back moves a pointer, not
//! the buffer (a CHIME leaf buffer with its layout is over 200 bytes, moved twice an operation).

use std::ops::{Deref, DerefMut};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use dmindex_fabric::{Client, Transport};

/// Queues per pool.
pub const SHARDS: usize = 16;

/// A compute node's reusable buffers of type `B`.
pub struct Pool<B> {
    shards: Box<[CachePadded<ArrayQueue<Box<B>>>]>,
}

impl<B> Pool<B> {
    /// A pool keeping up to `capacity` idle buffers (at least one per shard).
    pub fn new(capacity: usize) -> Pool<B> {
        let per = capacity.div_ceil(SHARDS).max(1);
        Pool { shards: (0..SHARDS).map(|_| CachePadded::new(ArrayQueue::new(per))).collect() }
    }

    /// A buffer for client `c`: an idle one of its shard, or `make()`'s. It goes back to that
    /// shard when dropped.
    pub fn get<T: Transport>(&self, c: &Client<T>, make: impl FnOnce() -> B) -> Pooled<'_, B> {
        let shard = c.ordinal() as usize % SHARDS;
        let buf = self.shards[shard].pop().unwrap_or_else(|| Box::new(make()));
        Pooled { buf: Some(buf), shard: &self.shards[shard] }
    }

    /// Idle buffers in the pool.
    pub fn idle(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }
}

impl<B> std::fmt::Debug for Pool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("idle", &self.idle()).finish()
    }
}

/// A buffer borrowed from a [`Pool`].
pub struct Pooled<'p, B> {
    buf: Option<Box<B>>,
    shard: &'p ArrayQueue<Box<B>>,
}

impl<B> Pooled<'_, B> {
    /// Takes the buffer out of the pool's reach (it is then freed normally).
    pub fn into_inner(mut self) -> B {
        *self.buf.take().expect("present until dropped")
    }
}

impl<B> Deref for Pooled<'_, B> {
    type Target = B;
    fn deref(&self) -> &B {
        self.buf.as_ref().expect("present until dropped")
    }
}

impl<B> DerefMut for Pooled<'_, B> {
    fn deref_mut(&mut self) -> &mut B {
        self.buf.as_mut().expect("present until dropped")
    }
}

impl<B> Drop for Pooled<'_, B> {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            // A full shard (more operations in flight than it keeps) frees the extra buffer.
            let _ = self.shard.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmindex_fabric::local::{LocalConfig, LocalFabric};
    use dmindex_fabric::Fabric;

    #[test]
    fn buffers_are_reused_per_client_and_capped_per_shard() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let (a, b) = (f.client(0).unwrap(), f.client(0).unwrap());
        let pool: Pool<Vec<u8>> = Pool::new(SHARDS);
        let made = std::cell::Cell::new(0);
        let make = || {
            made.set(made.get() + 1);
            Vec::with_capacity(64)
        };
        let x = pool.get(&a, make);
        let (p, at) = (x.as_ptr(), &*x as *const Vec<u8>);
        drop(x);
        // The same client gets the same buffer back, where it was (boxed: the queue moved a
        // pointer, not the buffer); another client's shard is empty.
        let again = vec![pool.get(&a, make)];
        assert_eq!((again[0].as_ptr(), &*again[0] as *const Vec<u8>), (p, at));
        drop(again);
        assert_ne!(pool.get(&b, make).as_ptr(), p);
        assert_eq!(made.get(), 2);
        // One idle buffer per shard here: the second returned to a's shard is freed.
        let (x, y) = (pool.get(&a, make), pool.get(&a, make));
        drop((x, y));
        assert_eq!(pool.idle(), 2);
        // A buffer taken out is not returned.
        let _ = pool.get(&a, make).into_inner();
        assert_eq!(pool.idle(), 1);
    }
}
