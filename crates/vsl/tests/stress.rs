//! Concurrency stress test of the shared-memory log: several writer threads
//! publish self-checking records through `VslBuf`s while readers (a thread,
//! and a separate process) follow the ring. Every record read must be intact
//! (no torn payloads), each writer's records must arrive in order, and any
//! gap must be announced by an `Overrun` event. Bounded to a few seconds.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lacquer_vsl::{
    ReadEvent, StartAt, Tag, Vsl, VslBuf, VslConfig, VslReader, Vxid, vsl, vsl_path,
};

const WRITERS: u32 = 4;

fn workdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lq-stress-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Payload for record `seq` of writer `w`: header, then a filler whose
/// byte and length derive from `seq`, then the filler length again.
fn payload_len(seq: u32) -> usize {
    (seq as usize * 7) % 200
}

fn filler(seq: u32) -> char {
    char::from(b'a' + (seq % 26) as u8)
}

fn write_all(vsl: Arc<Vsl>, w: u32, count: u32, per_tx: u32) {
    let mut seq = 0;
    while seq < count {
        let mut buf = VslBuf::new(vsl.clone(), Vxid::client(w));
        for _ in 0..per_tx.min(count - seq) {
            let fill: String = std::iter::repeat_n(filler(seq), payload_len(seq)).collect();
            vsl!(buf, Tag::VCL_Log, "{w} {seq} {fill} {}", payload_len(seq));
            seq += 1;
        }
        // Dropping the buffer publishes the batch.
    }
}

/// Checks one record; returns (writer, seq).
fn check(rec: &lacquer_vsl::Record) -> Result<(u32, u32), String> {
    let text = std::str::from_utf8(&rec.data).map_err(|e| format!("not UTF-8: {e}: {:?}", rec))?;
    let parts: Vec<&str> = text.split(' ').collect();
    if parts.len() != 4 {
        return Err(format!("torn record: {text:?}"));
    }
    let w: u32 = parts[0]
        .parse()
        .map_err(|_| format!("bad writer in {text:?}"))?;
    let seq: u32 = parts[1]
        .parse()
        .map_err(|_| format!("bad seq in {text:?}"))?;
    let len: usize = parts[3]
        .parse()
        .map_err(|_| format!("bad len in {text:?}"))?;
    if rec.tag != Tag::VCL_Log || rec.vxid != Vxid::client(w) {
        return Err(format!("tag/vxid mismatch for {text:?}"));
    }
    if len != payload_len(seq)
        || parts[2].len() != len
        || !parts[2].chars().all(|c| c == filler(seq))
    {
        return Err(format!("torn payload for writer {w} seq {seq}: {text:?}"));
    }
    Ok((w, seq))
}

#[derive(Default, Debug)]
struct Tally {
    records: u64,
    overruns: u64,
    last: HashMap<u32, u32>,
}

/// Follows the log until `done` is set and the ring is drained; a slow
/// reader (`pause_every` > 0) sleeps a millisecond every that many records.
fn follow(
    mut r: VslReader,
    done: &AtomicBool,
    deadline: Instant,
    pause_every: u64,
) -> Result<Tally, String> {
    let mut t = Tally::default();
    let mut gap_ok = false;
    loop {
        let before = r.position();
        match r.next_event() {
            ReadEvent::Record(rec) => {
                let (w, seq) =
                    check(&rec).map_err(|e| format!("{e} pos {before} head {}", r.head()))?;
                match t.last.get(&w) {
                    Some(&prev) if seq <= prev => {
                        return Err(format!("writer {w}: seq {seq} after {prev}"));
                    }
                    Some(&prev) if seq != prev + 1 && !gap_ok => {
                        return Err(format!("writer {w}: silent gap {prev} -> {seq}"));
                    }
                    None if seq != 0 && !gap_ok => {
                        return Err(format!("writer {w}: first record is seq {seq}"));
                    }
                    _ => {}
                }
                t.last.insert(w, seq);
                t.records += 1;
                if pause_every > 0 && t.records % pause_every == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if t.last.len() == WRITERS as usize {
                    gap_ok = false;
                }
            }
            ReadEvent::Overrun { .. } => {
                t.overruns += 1;
                gap_ok = true;
                // Gaps are allowed for every writer until each has been
                // seen again after the overrun.
                t.last.clear();
            }
            ReadEvent::Idle => {
                if done.load(Ordering::Acquire) && r.position() == r.head() {
                    return Ok(t);
                }
                if Instant::now() > deadline {
                    return Err("reader did not finish in time".to_string());
                }
                std::thread::yield_now();
            }
        }
    }
}

fn run(name: &str, space: usize, count: u32) -> Tally {
    run_with(name, space, count, &[0]).remove(0)
}

/// Writers against one reader per entry of `pauses` (see [`follow`]), all
/// running at once; returns each reader's tally.
fn run_with(name: &str, space: usize, count: u32, pauses: &[u64]) -> Vec<Tally> {
    let dir = workdir(name);
    let path = vsl_path(&dir);
    let cfg = VslConfig {
        space,
        buffer: 1024,
        ..VslConfig::default()
    };
    let vsl = Vsl::create(&path, &cfg).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(4);
    // Opened before any write, so every record is either read or covered
    // by an overrun report.
    let readers: Vec<_> = pauses
        .iter()
        .map(|&pause| {
            let r = VslReader::open(&path, StartAt::Oldest).unwrap();
            let done = done.clone();
            std::thread::spawn(move || follow(r, &done, deadline, pause))
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let vsl = vsl.clone();
            std::thread::spawn(move || write_all(vsl, w, count, 1 + w * 3))
        })
        .collect();
    for h in writers {
        h.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let tallies = readers
        .into_iter()
        .map(|r| r.join().unwrap().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    tallies
}

#[test]
fn big_ring_delivers_everything_in_order() {
    // 4 x 5000 records of < 256 bytes fit in 8 MB: nothing may be lost.
    let t = run("big", 8 << 20, 5000);
    assert_eq!(t.overruns, 0);
    assert_eq!(t.records, u64::from(WRITERS) * 5000);
    for w in 0..WRITERS {
        assert_eq!(t.last[&w], 4999);
    }
}

#[test]
fn small_ring_reports_overruns_never_corrupts() {
    // 64 KB ring and ~5 MB of records: the reader falls behind.
    let t = run("small", lacquer_vsl::ring::MIN_SPACE, 10_000);
    assert!(t.records > 0);
    if t.records < u64::from(WRITERS) * 10_000 {
        assert!(t.overruns > 0, "records lost without an overrun: {t:?}");
    }
}

#[test]
fn slow_reader_is_told_of_overruns_while_a_fast_one_keeps_up() {
    // A 64 KB ring, ~2.5 MB of records, and two readers at once: one that
    // naps every 50 records must fall behind, be told so, resynchronise
    // and go on reading intact, ordered records; the other is checked the
    // same way, whatever its speed.
    let t = run_with("slow", lacquer_vsl::ring::MIN_SPACE, 5000, &[50, 0]);
    let total = u64::from(WRITERS) * 5000;
    assert!(
        t[0].overruns > 0,
        "the slow reader was never overrun: {:?}",
        t[0]
    );
    assert!(t[0].records > 0 && t[0].records < total, "{:?}", t[0]);
    assert!(
        !t[0].last.is_empty(),
        "the slow reader read on after its last overrun"
    );
    assert!(t[1].records > 0);
    if t[1].records < total {
        assert!(
            t[1].overruns > 0,
            "records lost without an overrun: {:?}",
            t[1]
        );
    }
}

/// Reader in another process: the parent writes, this child (the same test
/// binary, run with `--ignored`) follows the file and checks every record.
#[test]
#[ignore = "helper run as a child process by cross_process_reader"]
fn child_reader() {
    let path = PathBuf::from(std::env::var("LQ_STRESS_VSL").expect("LQ_STRESS_VSL"));
    let expect: u64 = std::env::var("LQ_STRESS_EXPECT").unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut seen = 0;
    let mut r = VslReader::open(&path, StartAt::Oldest).unwrap();
    while seen < expect {
        match r.next_event() {
            ReadEvent::Record(rec) => {
                check(&rec).unwrap();
                seen += 1;
            }
            ReadEvent::Overrun { .. } => panic!("overrun in an oversized ring"),
            ReadEvent::Idle => {
                assert!(Instant::now() < deadline, "only {seen} of {expect} records");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    println!("child saw {seen} records");
}

#[test]
fn cross_process_reader() {
    let dir = workdir("xproc");
    let path = vsl_path(&dir);
    let cfg = VslConfig {
        space: 8 << 20,
        buffer: 1024,
        ..VslConfig::default()
    };
    let vsl = Vsl::create(&path, &cfg).unwrap();
    let count = 3000;
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_reader", "--nocapture"])
        .env("LQ_STRESS_VSL", &path)
        .env(
            "LQ_STRESS_EXPECT",
            (u64::from(WRITERS) * u64::from(count)).to_string(),
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let vsl = vsl.clone();
            std::thread::spawn(move || write_all(vsl, w, count, 5))
        })
        .collect();
    for h in writers {
        h.join().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(stdout.contains("child saw 12000 records"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}
