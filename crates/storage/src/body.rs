//! Object bodies: one copy, written once by a fetch, streamed to many readers.
//!
//! A body is a list of [`Bytes`] segments. The fetch appends segments through the
//! single [`BodyWriter`] and never waits for readers; every [`BodyReader`] keeps its
//! own position and awaits new segments as they arrive, so a client can be served
//! while the backend is still sending (Varnish's streaming). Segments are handed
//! out by reference count, never copied, and a reader that is dropped costs
//! nothing. Once the body is finished its segments are frozen in a lock-free
//! slice, so reading a cached body takes no lock at all.
//!
//! Byte ranges (`Range:` requests) are served by [`Body::range_reader`], which
//! slices segments instead of copying and also works on a body still growing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::sync::Notify;

/// A body read failed because its fetch failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The fetch that was producing the body failed (or was abandoned) before
    /// finishing; the delivered bytes are incomplete.
    #[error("the body fetch failed before the body was complete")]
    FetchFailed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Done,
    Failed,
}

#[derive(Debug)]
struct Growing {
    segs: Vec<Bytes>,
    state: State,
}

#[derive(Debug)]
struct Inner {
    /// Set once, when the writer finishes: the final segment list.
    done: OnceLock<Box<[Bytes]>>,
    growing: Mutex<Growing>,
    /// Bytes written so far (final length once finished).
    len: AtomicU64,
    notify: Notify,
}

/// A shared handle on one body; cheap to clone.
#[derive(Debug, Clone)]
pub struct Body(Arc<Inner>);

/// The single producer of a body. Dropping it without [`finish`](Self::finish)
/// fails the body, so readers never wait forever.
#[derive(Debug)]
pub struct BodyWriter {
    body: Body,
    closed: bool,
}

/// One consumer's position in a body.
#[derive(Debug)]
pub struct BodyReader {
    body: Body,
    seg: usize,
    skip: u64,
    remaining: Option<u64>,
}

impl Body {
    /// A new, empty, growing body and its writer.
    pub fn new() -> (BodyWriter, Body) {
        let body = Body(Arc::new(Inner {
            done: OnceLock::new(),
            growing: Mutex::new(Growing {
                segs: Vec::new(),
                state: State::Open,
            }),
            len: AtomicU64::new(0),
            notify: Notify::new(),
        }));
        (
            BodyWriter {
                body: body.clone(),
                closed: false,
            },
            body,
        )
    }

    /// A finished body made of `segs` (synthetic responses, copies).
    pub fn from_segments(segs: Vec<Bytes>) -> Body {
        let (mut w, b) = Body::new();
        for s in segs {
            w.push(s);
        }
        w.finish();
        b
    }

    /// A finished, empty body.
    pub fn empty() -> Body {
        Body::from_segments(Vec::new())
    }

    /// A reader from the first byte.
    pub fn reader(&self) -> BodyReader {
        BodyReader {
            body: self.clone(),
            seg: 0,
            skip: 0,
            remaining: None,
        }
    }

    /// A reader of bytes `start..end` (`end` exclusive; `None` = to the end). On a
    /// body that ends before `end`, the reader stops at the body's end.
    pub fn range_reader(&self, start: u64, end: Option<u64>) -> BodyReader {
        BodyReader {
            body: self.clone(),
            seg: 0,
            skip: start,
            remaining: end.map(|e| e.saturating_sub(start)),
        }
    }

    /// Bytes written so far.
    pub fn len_so_far(&self) -> u64 {
        self.0.len.load(Ordering::Acquire)
    }

    /// The final length, once the body is finished.
    pub fn final_len(&self) -> Option<u64> {
        self.0.done.get().map(|_| self.len_so_far())
    }

    /// The frozen segments of a finished body (for vectored writes).
    pub fn segments(&self) -> Option<&[Bytes]> {
        self.0.done.get().map(|b| &b[..])
    }

    /// Whether the writer finished successfully.
    pub fn is_finished(&self) -> bool {
        self.0.done.get().is_some()
    }

    /// Whether the fetch producing this body failed.
    pub fn is_failed(&self) -> bool {
        self.0.done.get().is_none() && self.lock().state == State::Failed
    }

    /// Wait until the body is complete; returns its length.
    pub async fn wait_finished(&self) -> Result<u64, BodyError> {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_finished() {
                return Ok(self.len_so_far());
            }
            if self.lock().state == State::Failed {
                return Err(BodyError::FetchFailed);
            }
            notified.await;
        }
    }

    /// Concatenate a finished body into one buffer (tests, small bodies, ESI).
    /// Waits for the body to finish.
    pub async fn collect(&self) -> Result<Bytes, BodyError> {
        self.wait_finished().await?;
        let segs = self.segments().unwrap_or(&[]);
        if segs.len() == 1 {
            return Ok(segs[0].clone());
        }
        let mut v = Vec::with_capacity(self.len_so_far() as usize);
        for s in segs {
            v.extend_from_slice(s);
        }
        Ok(Bytes::from(v))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Growing> {
        // A poisoned lock only means a panic elsewhere while holding it; the
        // segment list itself is always consistent, so keep going.
        self.0.growing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether two handles refer to the same body.
    pub fn same(&self, other: &Body) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl BodyWriter {
    /// Append a segment; wakes readers waiting for data. Never waits.
    pub fn push(&mut self, seg: Bytes) {
        if seg.is_empty() {
            return;
        }
        let n = seg.len() as u64;
        {
            let mut g = self.body.lock();
            g.segs.push(seg);
            self.body.0.len.fetch_add(n, Ordering::Release);
        }
        self.body.0.notify.notify_waiters();
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.body.len_so_far()
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body being written.
    pub fn body(&self) -> &Body {
        &self.body
    }

    /// Mark the body complete.
    pub fn finish(mut self) {
        self.close(State::Done);
    }

    /// Mark the body failed: readers that run out of data get an error.
    pub fn fail(mut self) {
        self.close(State::Failed);
    }

    fn close(&mut self, state: State) {
        if self.closed {
            return;
        }
        self.closed = true;
        {
            let mut g = self.body.lock();
            if state == State::Done {
                let segs = std::mem::take(&mut g.segs).into_boxed_slice();
                // Only this writer sets `done`, and only once (closed flag).
                let _ = self.body.0.done.set(segs);
            }
            g.state = state;
        }
        self.body.0.notify.notify_waiters();
    }
}

impl Drop for BodyWriter {
    fn drop(&mut self) {
        self.close(State::Failed);
    }
}

enum Step {
    Seg(Bytes),
    End,
    Wait,
}

impl BodyReader {
    /// The next segment, `Ok(None)` at the end, or an error if the fetch failed.
    /// Waits while the body is still growing.
    pub async fn next(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            if self.remaining == Some(0) {
                return Ok(None);
            }
            if let Some(done) = self.body.0.done.get() {
                match done.get(self.seg) {
                    Some(s) => {
                        let s = s.clone();
                        self.seg += 1;
                        if let Some(out) = self.trim(s) {
                            return Ok(Some(out));
                        }
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let inner = Arc::clone(&self.body.0);
            let notified = inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let step = {
                let g = self.body.lock();
                match g.segs.get(self.seg) {
                    Some(s) => Step::Seg(s.clone()),
                    None => match g.state {
                        State::Open => Step::Wait,
                        // Segments moved to `done`: loop to the lock-free path.
                        State::Done => Step::End,
                        State::Failed => return Err(BodyError::FetchFailed),
                    },
                }
            };
            match step {
                Step::Seg(s) => {
                    self.seg += 1;
                    if let Some(out) = self.trim(s) {
                        return Ok(Some(out));
                    }
                }
                Step::End => {}
                Step::Wait => notified.await,
            }
        }
    }

    /// Apply the range window to a segment; `None` if it is skipped entirely.
    fn trim(&mut self, s: Bytes) -> Option<Bytes> {
        let len = s.len() as u64;
        if self.skip >= len {
            self.skip -= len;
            return None;
        }
        let mut out = s.slice(self.skip as usize..);
        self.skip = 0;
        if let Some(rem) = self.remaining.as_mut() {
            if (out.len() as u64) > *rem {
                out.truncate(*rem as usize);
            }
            *rem -= out.len() as u64;
        }
        Some(out)
    }

    /// The body this reader reads.
    pub fn body(&self) -> &Body {
        &self.body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(mut r: BodyReader) -> Result<Vec<u8>, BodyError> {
        let mut v = Vec::new();
        while let Some(s) = r.next().await? {
            v.extend_from_slice(&s);
        }
        Ok(v)
    }

    #[tokio::test]
    async fn finished_body_reads_without_waiting() {
        let b = Body::from_segments(vec![
            Bytes::from_static(b"hello "),
            Bytes::from_static(b"world"),
        ]);
        assert!(b.is_finished());
        assert_eq!(b.final_len(), Some(11));
        assert_eq!(read_all(b.reader()).await.unwrap(), b"hello world");
        assert_eq!(b.segments().unwrap().len(), 2);
        assert_eq!(&b.collect().await.unwrap()[..], b"hello world");
    }

    #[tokio::test]
    async fn ranges_slice_across_segments() {
        let b = Body::from_segments(vec![
            Bytes::from_static(b"0123"),
            Bytes::from_static(b"4567"),
            Bytes::from_static(b"89"),
        ]);
        assert_eq!(
            read_all(b.range_reader(2, Some(7))).await.unwrap(),
            b"23456"
        );
        assert_eq!(read_all(b.range_reader(4, Some(8))).await.unwrap(), b"4567");
        assert_eq!(read_all(b.range_reader(9, None)).await.unwrap(), b"9");
        assert_eq!(read_all(b.range_reader(0, Some(0))).await.unwrap(), b"");
        assert_eq!(read_all(b.range_reader(20, None)).await.unwrap(), b"");
        assert_eq!(read_all(b.range_reader(8, Some(100))).await.unwrap(), b"89");
    }

    #[tokio::test]
    async fn streaming_readers_see_identical_bytes() {
        let (mut w, b) = Body::new();
        let readers: Vec<_> = (0..8)
            .map(|i| {
                let r = if i % 2 == 0 {
                    b.reader()
                } else {
                    b.range_reader(1000, Some(5000))
                };
                tokio::spawn(read_all(r))
            })
            .collect();
        let mut expect = Vec::new();
        for i in 0..200u32 {
            let seg: Vec<u8> = (0..37).map(|j| (i * 7 + j) as u8).collect();
            expect.extend_from_slice(&seg);
            w.push(Bytes::from(seg));
            if i % 10 == 0 {
                tokio::task::yield_now().await;
            }
        }
        assert!(!b.is_finished());
        assert_eq!(b.len_so_far(), 200 * 37);
        w.finish();
        for (i, r) in readers.into_iter().enumerate() {
            let got = r.await.unwrap().unwrap();
            if i % 2 == 0 {
                assert_eq!(got, expect);
            } else {
                assert_eq!(got, &expect[1000..5000]);
            }
        }
    }

    #[tokio::test]
    async fn failed_fetch_errors_readers_and_drop_fails() {
        let (mut w, b) = Body::new();
        let r = tokio::spawn(read_all(b.reader()));
        w.push(Bytes::from_static(b"abc"));
        tokio::task::yield_now().await;
        w.fail();
        assert_eq!(r.await.unwrap(), Err(BodyError::FetchFailed));
        assert!(b.is_failed());
        assert_eq!(b.wait_finished().await, Err(BodyError::FetchFailed));

        let (w, b) = Body::new();
        let r = tokio::spawn(read_all(b.reader()));
        drop(w);
        assert_eq!(r.await.unwrap(), Err(BodyError::FetchFailed));
    }

    #[tokio::test]
    async fn dropped_reader_costs_nothing_and_writer_never_waits() {
        let (mut w, b) = Body::new();
        let mut r = b.reader();
        let fut = r.next();
        drop(fut);
        drop(r);
        for _ in 0..1000 {
            w.push(Bytes::from_static(b"x"));
        }
        w.finish();
        assert_eq!(b.final_len(), Some(1000));
        assert_eq!(Arc::strong_count(&b.0), 1);
    }
}
