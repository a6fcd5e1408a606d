//! Counters under concurrent change: one thread adds and removes backend
//! sections and bumps counters while a reader takes snapshots. Every
//! snapshot must be consistent (whole sections only, with their metadata),
//! and counter increments from several threads must all be counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lacquer_vsl::vsc::tables::{MAIN, Main, VBE, Vbe};
use lacquer_vsl::vsc::{CounterType, Vsc, VscConfig, VscReader, vsc_path};

#[test]
fn snapshots_stay_consistent_while_sections_change() {
    let dir = std::env::temp_dir().join(format!("lq-vscc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = vsc_path(&dir);
    let vsc = Vsc::create(&path, &VscConfig::default()).unwrap();
    let main = Arc::new(vsc.add_section(&MAIN, "MAIN").unwrap());
    let stop = Arc::new(AtomicBool::new(false));

    let churn = {
        let vsc = vsc.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let s = vsc
                    .add_section(&VBE, &format!("VBE.vcl1.b{}", n % 7))
                    .unwrap();
                s.set(Vbe::happy, u64::MAX);
                s.inc(Vbe::req);
                n += 1;
                if n.is_multiple_of(3) {
                    // Keep some alive across iterations.
                    std::mem::forget(s);
                }
                if n > 3000 {
                    break;
                }
            }
        })
    };
    let bumpers: Vec<_> = (0..3)
        .map(|_| {
            let main = main.clone();
            std::thread::spawn(move || {
                for _ in 0..100_000 {
                    main.inc(Main::client_req);
                }
            })
        })
        .collect();

    let reader = VscReader::open(&path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut snaps = 0;
    while Instant::now() < deadline && (snaps < 50 || !churn.is_finished()) {
        // Busy means the directory changed under the reader too often:
        // the documented answer is to try again.
        let snap = match reader.snapshot() {
            Ok(s) => s,
            Err(lacquer_vsl::vsc::VscError::Busy) => continue,
            Err(e) => panic!("snapshot failed: {e}"),
        };
        let vbe: Vec<_> = snap.iter().filter(|c| c.name.starts_with("VBE.")).collect();
        assert_eq!(
            vbe.len() % VBE.fields.len(),
            0,
            "partial section in snapshot"
        );
        for chunk in vbe.chunks(VBE.fields.len()) {
            let prefix = chunk[0].name.rsplit_once('.').unwrap().0;
            for (c, def) in chunk.iter().zip(VBE.fields) {
                assert_eq!(c.name, format!("{prefix}.{}", def.name));
                assert_eq!(c.oneliner, def.oneliner);
            }
            assert_eq!(chunk[0].ctype, CounterType::Bitmap);
        }
        snaps += 1;
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    for b in bumpers {
        b.join().unwrap();
    }
    let snap = reader.snapshot().unwrap();
    let req = snap.iter().find(|c| c.name == "MAIN.client_req").unwrap();
    assert_eq!(req.value, 300_000);
    assert!(snaps >= 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
