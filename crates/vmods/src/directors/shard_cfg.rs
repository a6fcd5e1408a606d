//! The shard director's configuration: the backend changes a task asks
//! for (`.clear()`, `.add_backend()`, `.remove_backend()`) and how
//! `.reconfigure()` folds them into the backend list the hash ring is
//! built from.
//!
//! Changes are kept per task and only take effect at `.reconfigure()` (or
//! when the task ends), so requests running meanwhile keep the old ring.
//! The list keeps Varnish's slot order, because the ring's debug output
//! and its tie-breaking name backends by their position: a removed
//! backend leaves a hole that the next addition fills, and holes left at
//! the end are filled by moving the last backends into them.

use bytes::Bytes;
use lacquer_vcl::exec::Backend;

/// A backend in the shard director's list.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Member {
    pub be: Backend,
    pub ident: Option<Bytes>,
    /// This backend's rampup, else the director's.
    pub rampup: Option<f64>,
    /// Points this backend gets on the ring (replicas × weight when it
    /// was added).
    pub replicas: u32,
}

impl Member {
    /// The name the ring hashes and comparisons use: the ident, else the
    /// backend's name.
    pub fn key(&self) -> &[u8] {
        match &self.ident {
            Some(i) => i,
            None => self.be.name.as_bytes(),
        }
    }
}

/// One change a task asked for.
#[derive(Clone, Debug)]
pub(super) enum Change {
    Clear,
    Add {
        be: Backend,
        ident: Option<Bytes>,
        rampup: Option<f64>,
        weight: f64,
    },
    /// Removes every instance of `be` (no ident), or those named `ident`.
    Remove {
        be: Option<Backend>,
        ident: Option<Bytes>,
    },
}

/// Whether a backend given as (`be`, `ident`) is `m`: the same backend
/// when neither has an ident, else the same name.
fn same(be: Option<&Backend>, ident: Option<&Bytes>, m: &Member) -> bool {
    match (ident, &m.ident) {
        (None, None) => be == Some(&m.be),
        _ => {
            let a: &[u8] = match (ident, be) {
                (Some(i), _) => i,
                (None, Some(b)) => b.name.as_bytes(),
                (None, None) => return false,
            };
            a == m.key()
        }
    }
}

/// Applies `changes` to the list `current`; new backends get `replicas`
/// points per unit of weight. Duplicate additions are skipped with a
/// notice passed to `notice`.
pub(super) fn apply(
    current: &[Member],
    changes: &[Change],
    replicas: u32,
    notice: &mut dyn FnMut(String),
) -> Vec<Member> {
    let last_clear = changes.iter().rposition(|c| matches!(c, Change::Clear));
    let (mut slots, changes): (Vec<Option<Member>>, &[Change]) = match last_clear {
        Some(i) => (Vec::new(), &changes[i + 1..]),
        None => (current.iter().cloned().map(Some).collect(), changes),
    };
    for c in changes {
        match c {
            Change::Clear => {}
            Change::Add {
                be,
                ident,
                rampup,
                weight,
            } => {
                if let Some(m) = slots
                    .iter()
                    .flatten()
                    .find(|m| same(Some(be), ident.as_ref(), m))
                {
                    let id = m
                        .ident
                        .as_ref()
                        .map(|i| format!("/{}", String::from_utf8_lossy(i)))
                        .unwrap_or_default();
                    notice(format!(
                        "backend {}{id} already exists - skipping",
                        m.be.name
                    ));
                    continue;
                }
                let m = Member {
                    be: be.clone(),
                    ident: ident.clone(),
                    rampup: *rampup,
                    replicas: (f64::from(replicas) * weight).min(f64::from(u32::MAX)) as u32,
                };
                match slots.iter().position(Option::is_none) {
                    Some(hole) => slots[hole] = Some(m),
                    None => slots.push(Some(m)),
                }
            }
            Change::Remove { be, ident } => {
                for s in slots.iter_mut() {
                    let hit = s.as_ref().is_some_and(|m| match ident {
                        None => be.as_ref() == Some(&m.be),
                        Some(_) => same(be.as_ref(), ident.as_ref(), m),
                    });
                    if hit {
                        *s = None;
                    }
                }
            }
        }
    }
    // Close the holes: trailing ones go, inner ones take the last backend.
    loop {
        while slots.last().is_some_and(Option::is_none) {
            slots.pop();
        }
        let Some(hole) = slots.iter().position(Option::is_none) else {
            break;
        };
        let last = slots.pop().flatten();
        slots[hole] = last;
    }
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(n: &str, id: u32) -> Backend {
        Backend { id, name: n.into() }
    }

    fn add(b: &Backend, ident: Option<&str>) -> Change {
        Change::Add {
            be: b.clone(),
            ident: ident.map(|i| Bytes::copy_from_slice(i.as_bytes())),
            rampup: None,
            weight: 1.0,
        }
    }

    fn keys(m: &[Member]) -> Vec<String> {
        m.iter()
            .map(|m| String::from_utf8_lossy(m.key()).into_owned())
            .collect()
    }

    /// directors_c00011.vtc: duplicates are skipped with Varnish's notices,
    /// naming the backend already there.
    #[test]
    fn duplicates_are_skipped() {
        let (s1, s2) = (be("s1", 0), be("s2", 1));
        let mut notes = Vec::new();
        let out = apply(
            &[],
            &[
                add(&s1, None),
                add(&s1, Some("s1_1")),
                add(&s1, Some("s1_2")),
                add(&s2, None),
                add(&s2, Some("s1")),
                add(&s2, Some("s1_1")),
                add(&s2, Some("s1_2")),
            ],
            1,
            &mut |n| notes.push(n),
        );
        assert_eq!(keys(&out), ["s1", "s1_1", "s1_2", "s2"]);
        assert_eq!(
            notes,
            [
                "backend s1 already exists - skipping",
                "backend s1/s1_1 already exists - skipping",
                "backend s1/s1_2 already exists - skipping",
            ]
        );
    }

    /// A removed backend's slot is taken by the last one.
    #[test]
    fn holes_take_the_last_backend() {
        let s3 = be("s3", 2);
        let ids: Vec<Change> = (1..=9).map(|i| add(&s3, Some(&i.to_string()))).collect();
        let list = apply(&[], &ids, 1, &mut |_| {});
        let rm = |i: &str| Change::Remove {
            be: None,
            ident: Some(Bytes::copy_from_slice(i.as_bytes())),
        };
        let list = apply(&list, &[rm("8")], 1, &mut |_| {});
        assert_eq!(keys(&list), ["1", "2", "3", "4", "5", "6", "7", "9"]);
        let list = apply(&list, &[rm("2")], 1, &mut |_| {});
        assert_eq!(keys(&list), ["1", "9", "3", "4", "5", "6", "7"]);
        let cleared = apply(&list, &[add(&s3, Some("x")), Change::Clear], 1, &mut |_| {});
        assert!(cleared.is_empty());
    }
}
