//! Object bodies: one copy, written once by a fetch, streamed to many readers.
//!
//! A body is a list of [`Segment`]s: bytes in memory, or spans of a file
//! store's extents (read back on delivery). The fetch appends segments through the
//! single [`BodyWriter`] and never waits for readers; every [`BodyReader`] keeps its
//! own position and awaits new segments as they arrive, so a client can be served
//! while the backend is still sending (Varnish's streaming). Segments are handed
//! out by reference count, never copied, and a reader that is dropped costs
//! nothing. Once the body is finished its segments are frozen in a lock-free
//! slice, so reading a cached body takes no lock at all.
//!
//! Byte ranges (`Range:` requests) are served by [`Body::range_reader`], which
//! slices segments instead of copying and also works on a body still growing.
//!
//! A file segment is read when a reader reaches it: straight from the
//! store's mapping when its pages are in memory, otherwise on tokio's
//! blocking pool (see `crate::file`); consecutive spans of one extent are read together, up
//! to a MiB, so delivery from a file store sends the same large batches as
//! from memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::file::{Extent, FileSpan};

/// One piece of a body.
#[derive(Debug, Clone)]
pub enum Segment {
    /// Bytes kept in memory.
    Mem(Bytes),
    /// Bytes kept in a file store.
    File(FileSpan),
}

impl Segment {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Segment::Mem(b) => b.len() as u64,
            Segment::File(f) => f.len(),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `skip..skip+take` of it (clamped).
    fn slice(&self, skip: u64, take: u64) -> Segment {
        match self {
            Segment::Mem(b) => {
                let start = usize::try_from(skip).unwrap_or(usize::MAX).min(b.len());
                let end = start.saturating_add(usize::try_from(take).unwrap_or(usize::MAX));
                Segment::Mem(b.slice(start..end.min(b.len())))
            }
            Segment::File(f) => Segment::File(f.slice(skip, take)),
        }
    }

    /// Its bytes (a blocking read for a file segment).
    pub fn read_blocking(&self) -> Result<Bytes, BodyError> {
        match self {
            Segment::Mem(b) => Ok(b.clone()),
            Segment::File(f) => f
                .read()
                .map_err(|e| BodyError::StoreRead(e.raw_os_error().unwrap_or(0))),
        }
    }
}

/// A body read failed because its fetch failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The fetch that was producing the body failed (or was abandoned) before
    /// finishing; the delivered bytes are incomplete.
    #[error("the body fetch failed before the body was complete")]
    FetchFailed,
    /// Reading the body back from its file store failed (the OS error
    /// number, 0 when there was none); the delivered bytes are incomplete.
    #[error("reading the stored body from its storage file failed (os error {0})")]
    StoreRead(i32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Done,
    Failed,
}

#[derive(Debug)]
struct Growing {
    segs: Vec<Segment>,
    state: State,
}

#[derive(Debug)]
struct Inner {
    /// Set once, when the writer finishes: the final segment list.
    done: OnceLock<Box<[Segment]>>,
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
    /// Drops each segment it takes from a growing body
    /// ([`Body::consuming_reader`]).
    consume: bool,
    /// Body bytes in the segments taken or skipped so far.
    passed: u64,
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
        Body::from_parts(segs.into_iter().map(Segment::Mem).collect())
    }

    /// A finished body made of `segs`.
    pub fn from_parts(segs: Vec<Segment>) -> Body {
        let (mut w, b) = Body::new();
        for s in segs {
            w.push_segment(s);
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
            consume: false,
            passed: 0,
        }
    }

    /// The only reader a private (pass) body will ever have: while the
    /// body is still growing, each segment it takes (or skips) is dropped
    /// from the body, so a streamed pass holds only what the fetch is ahead
    /// of delivery, not the whole body (varnishd frees a private object's
    /// delivered storage as it streams). What the fetch had finished before
    /// this reader got to it stays until the body is dropped. Nothing may
    /// read the body after it: the dropped segments read as empty.
    pub fn consuming_reader(&self, start: u64, end: Option<u64>) -> BodyReader {
        BodyReader {
            consume: true,
            ..self.range_reader(start, end)
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
            consume: false,
            passed: 0,
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

    /// The frozen segments of a finished body.
    pub fn segments(&self) -> Option<&[Segment]> {
        self.0.done.get().map(|b| &b[..])
    }

    /// The last `n` bytes of a finished body (fewer when it is shorter);
    /// `None` while it is not finished or when its store cannot be read.
    /// A file store answers with one small blocking read.
    pub fn tail(&self, n: usize) -> Option<Vec<u8>> {
        let segs = self.segments()?;
        let mut out = Vec::with_capacity(n);
        for seg in segs.iter().rev() {
            let need = (n - out.len()) as u64;
            if need == 0 {
                break;
            }
            let len = seg.len();
            let part = seg
                .slice(len.saturating_sub(need), need)
                .read_blocking()
                .ok()?;
            let mut v = part.to_vec();
            v.extend_from_slice(&out);
            out = v;
        }
        Some(out)
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
        if let [Segment::Mem(only)] = segs {
            return Ok(only.clone());
        }
        let mut v = Vec::with_capacity(self.len_so_far() as usize);
        let mut r = self.reader();
        while let Some(s) = r.next().await? {
            v.extend_from_slice(&s);
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
    /// Append bytes; wakes readers waiting for data. Never waits.
    pub fn push(&mut self, seg: Bytes) {
        self.push_segment(Segment::Mem(seg));
    }

    /// Append a segment; wakes readers waiting for data. Never waits.
    pub fn push_segment(&mut self, seg: Segment) {
        if seg.is_empty() {
            return;
        }
        let n = seg.len();
        {
            let mut g = self.body.lock();
            g.segs.push(seg);
            self.body.0.len.fetch_add(n, Ordering::Release);
        }
        self.body.0.notify.notify_waiters();
    }

    /// Point the segments stored in extent `from` at the same places in
    /// `to` (whose start holds a copy of `from`'s), before the body is
    /// finished. Readers holding segments of `from` keep reading them.
    /// Returns whether the body was still open.
    pub fn relocate(&mut self, from: &Extent, to: &Extent) -> bool {
        let mut g = self.body.lock();
        if g.state != State::Open {
            return false;
        }
        for seg in g.segs.iter_mut() {
            if let Segment::File(span) = seg
                && span.is_in(from)
            {
                *span = span.moved_to(to);
            }
        }
        true
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
    Seg(Segment),
    End,
    Wait,
}

impl BodyReader {
    /// The next segment, `Ok(None)` at the end, or an error if the fetch failed.
    /// Waits while the body is still growing.
    pub async fn next(&mut self) -> Result<Option<Bytes>, BodyError> {
        let Some(seg) = self.next_segment().await? else {
            return Ok(None);
        };
        match seg {
            Segment::Mem(b) => Ok(Some(b)),
            Segment::File(mut span) => {
                // Spans that follow in the same extent are read at once.
                if let Some(done) = self.body.0.done.get() {
                    while self.remaining != Some(0)
                        && let Some(Segment::File(next)) = done.get(self.seg)
                        && self.skip == 0
                    {
                        let next = match self.remaining {
                            Some(rem) => next.slice(0, rem),
                            None => next.clone(),
                        };
                        let Some(joined) = span.join(&next) else {
                            break;
                        };
                        span = joined;
                        self.seg += 1;
                        self.passed += next.len();
                        if let Some(rem) = self.remaining.as_mut() {
                            *rem -= next.len();
                        }
                    }
                }
                // In the page cache: its bytes, from the mapping, at once.
                if let Some(b) = span.mapped() {
                    return Ok(Some(b));
                }
                let read = tokio::task::spawn_blocking(move || span.read()).await;
                match read {
                    Ok(Ok(b)) => Ok(Some(b)),
                    Ok(Err(e)) => Err(BodyError::StoreRead(e.raw_os_error().unwrap_or(0))),
                    Err(_) => Err(BodyError::StoreRead(0)),
                }
            }
        }
    }

    /// The next segment within the reader's window, without reading it.
    async fn next_segment(&mut self) -> Result<Option<Segment>, BodyError> {
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
                let mut g = self.body.lock();
                match g.segs.get_mut(self.seg) {
                    // The empty placeholder keeps the other segments' indexes.
                    Some(s) if self.consume => {
                        Step::Seg(std::mem::replace(s, Segment::Mem(Bytes::new())))
                    }
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

    /// The body offset past the last segment this reader took or skipped
    /// (what a private body's delivery has done with).
    pub fn passed(&self) -> u64 {
        self.passed
    }

    /// Apply the range window to a segment; `None` if it is skipped entirely.
    fn trim(&mut self, s: Segment) -> Option<Segment> {
        let len = s.len();
        self.passed += len;
        if self.skip >= len {
            self.skip -= len;
            return None;
        }
        let take = self.remaining.unwrap_or(u64::MAX);
        let out = s.slice(self.skip, take);
        self.skip = 0;
        if let Some(rem) = self.remaining.as_mut() {
            *rem -= out.len();
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
    async fn consuming_reader_drops_what_it_took_from_a_growing_body() {
        let (mut w, b) = Body::new();
        w.push(Bytes::from(vec![b'a'; 1000]));
        w.push(Bytes::from(vec![b'b'; 1000]));
        let mut r = b.consuming_reader(0, None);
        assert_eq!(r.next().await.unwrap().unwrap().len(), 1000);
        {
            let g = b.lock();
            // The segment handed out is gone from the body; the next one
            // is still there, and the total length still counts both.
            assert_eq!(g.segs[0].len(), 0);
            assert_eq!(g.segs[1].len(), 1000);
        }
        assert_eq!(b.len_so_far(), 2000);
        assert_eq!(r.passed(), 1000);
        w.push(Bytes::from_static(b"tail"));
        w.finish();
        let rest = read_all(r).await.unwrap();
        assert_eq!(rest.len(), 1004);
        assert!(rest.ends_with(b"btail"));
        assert_eq!(b.final_len(), Some(2004));
        // A range window skips what it does not deliver, and drops it too.
        let (mut w, b) = Body::new();
        w.push(Bytes::from_static(b"0123"));
        w.push(Bytes::from_static(b"4567"));
        let mut r = b.consuming_reader(5, Some(7));
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"56");
        assert!(b.lock().segs.iter().all(|s| s.is_empty()));
        w.finish();
        assert_eq!(r.next().await.unwrap(), None);
        // An ordinary reader of the same kind of body leaves it whole.
        let (mut w, b) = Body::new();
        w.push(Bytes::from_static(b"keep"));
        let mut r = b.reader();
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"keep");
        assert_eq!(b.lock().segs[0].len(), 4);
        w.finish();
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
        assert_eq!(b.tail(7).unwrap(), b"o world");
        assert_eq!(b.tail(70).unwrap(), b"hello world");
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
