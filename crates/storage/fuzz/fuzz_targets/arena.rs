//! The file store's extent allocator under arbitrary allocate, free and
//! shrink sequences: extents never overlap, counts stay consistent, and
//! freeing everything leaves one free extent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lacquer_storage::file::Arena;

fuzz_target!(|data: &[u8]| {
    let Some((&g, ops)) = data.split_first() else {
        return;
    };
    let granularity = u64::from(g % 16) + 1;
    let size = 512 * granularity;
    let mut a = Arena::new(size, granularity);
    let mut live: Vec<(u64, u64)> = Vec::new();
    for op in ops.chunks(3) {
        let arg = u64::from(op.get(1).copied().unwrap_or(0)) << 8
            | u64::from(op.get(2).copied().unwrap_or(0));
        match op[0] % 3 {
            0 => {
                if let Some((off, len)) = a.alloc(arg) {
                    assert!(off + len <= size);
                    assert!(live.iter().all(|&(o, l)| off + len <= o || o + l <= off));
                    live.push((off, len));
                }
            }
            1 if !live.is_empty() => {
                let (off, len) = live.swap_remove(arg as usize % live.len());
                assert_eq!(a.free(off), len);
            }
            _ if !live.is_empty() => {
                let i = arg as usize % live.len();
                let (off, len) = live[i];
                let freed = a.shrink(off, arg);
                live[i] = (off, len - freed);
            }
            _ => {}
        }
        let used: u64 = live.iter().map(|&(_, l)| l).sum();
        assert_eq!(a.counts().free_bytes + used, size);
    }
    for (off, _) in live {
        a.free(off);
    }
    assert_eq!(a.counts().extents, 1);
});
