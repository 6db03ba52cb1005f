//! A fact read from the engine, kept in memory (issue 34 item 5, decisions 0145, 0149): callers
//! arriving together wait for one read; an answer older than its TTL is still answered while
//! one task reads it again; an answer read under an older generation is never answered.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One fact's last answer: when, under which generation.
#[derive(Debug)]
pub struct Memo<T> {
    value: Mutex<Option<(Instant, u64, T)>>,
    /// Held by the read that callers without an answer wait for.
    reading: tokio::sync::Mutex<()>,
    /// A read in the background is going on (at most one).
    refreshing: AtomicBool,
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo {
            value: Mutex::new(None),
            reading: tokio::sync::Mutex::new(()),
            refreshing: AtomicBool::new(false),
        }
    }
}

/// How the answer was had (what the tests and the benchmark count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Had {
    /// Read now, the caller waiting.
    Read,
    /// From memory, younger than the TTL.
    Fresh,
    /// From memory, older than the TTL: a read in the background was started (or runs).
    Stale,
}

impl<T: Clone + Send + 'static> Memo<T> {
    /// The answer: from memory when read under `generation` (younger than `ttl`: as is; older:
    /// as is, and `read` again by one background task); else read now, callers arriving
    /// together waiting for one read. `fresh` reads now whatever memory holds.
    pub async fn get<F, Fut>(
        self: &Arc<Self>,
        generation: u64,
        ttl: Duration,
        fresh: bool,
        read: F,
    ) -> (T, Had)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        if !fresh {
            match self.peek(generation, ttl) {
                Some((v, Had::Stale)) => {
                    if !self.refreshing.swap(true, Ordering::SeqCst) {
                        let me = Arc::clone(self);
                        tokio::spawn(async move {
                            let _r = me.reading.lock().await;
                            let v = read().await;
                            me.put(generation, v);
                            me.refreshing.store(false, Ordering::SeqCst);
                        });
                    }
                    return (v, Had::Stale);
                }
                Some(hit) => return hit,
                None => {}
            }
        }
        let asked = Instant::now();
        let _r = self.reading.lock().await;
        // Read by the caller before this one while this one waited: that answer is as new.
        if let Some((at, g, v)) = &*self.value.lock().unwrap_or_else(PoisonError::into_inner)
            && *g == generation
            && *at >= asked
        {
            return (v.clone(), Had::Fresh);
        }
        let v = read().await;
        self.put(generation, v.clone());
        (v, Had::Read)
    }

    /// What memory holds for `generation`, and whether it is younger than `ttl`.
    fn peek(&self, generation: u64, ttl: Duration) -> Option<(T, Had)> {
        let value = self.value.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, g, v) = value.as_ref()?;
        (*g == generation).then(|| {
            let had = if at.elapsed() < ttl {
                Had::Fresh
            } else {
                Had::Stale
            };
            (v.clone(), had)
        })
    }

    /// Keeps `v`, read under `generation` — unless memory already holds a later generation's.
    fn put(&self, generation: u64, v: T) {
        let mut value = self.value.lock().unwrap_or_else(PoisonError::into_inner);
        if value.as_ref().is_none_or(|(_, g, _)| *g <= generation) {
            *value = Some((Instant::now(), generation, v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn counted(
        n: &Arc<AtomicUsize>,
    ) -> impl FnOnce() -> std::future::Ready<usize> + Send + 'static {
        let n = Arc::clone(n);
        move || std::future::ready(n.fetch_add(1, Ordering::SeqCst) + 1)
    }

    #[tokio::test]
    async fn one_read_for_callers_together_then_memory_then_stale_while_read_again() {
        let m = Arc::new(Memo::<usize>::default());
        let n = Arc::new(AtomicUsize::new(0));
        let slow = {
            let n = Arc::clone(&n);
            move || async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                n.fetch_add(1, Ordering::SeqCst) + 1
            }
        };
        let ttl = Duration::from_secs(60);
        let together: Vec<_> = (0..8)
            .map(|_| {
                let (m, slow) = (Arc::clone(&m), slow.clone());
                tokio::spawn(async move { m.get(0, ttl, false, slow).await })
            })
            .collect();
        let mut reads = 0;
        for t in together {
            let (v, had) = t.await.unwrap();
            assert_eq!(v, 1);
            reads += usize::from(had == Had::Read);
        }
        assert_eq!((reads, n.load(Ordering::SeqCst)), (1, 1));
        assert_eq!(m.get(0, ttl, false, counted(&n)).await, (1, Had::Fresh));
        // Older than the TTL: the old answer at once, the new one read behind it.
        assert_eq!(
            m.get(0, Duration::ZERO, false, counted(&n)).await,
            (1, Had::Stale)
        );
        let _settled = m.reading.lock().await;
        drop(_settled);
        while m.refreshing.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        assert_eq!(m.get(0, ttl, false, counted(&n)).await, (2, Had::Fresh));
        // A new generation (a build ended) is read now; `fresh` reads now too.
        assert_eq!(m.get(1, ttl, false, counted(&n)).await, (3, Had::Read));
        assert_eq!(m.get(1, ttl, true, counted(&n)).await, (4, Had::Read));
        // A late read of an older generation never replaces a newer one.
        m.put(0, 99);
        assert_eq!(m.get(1, ttl, false, counted(&n)).await, (4, Had::Fresh));
    }
}
