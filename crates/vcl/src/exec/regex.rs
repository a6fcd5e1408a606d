//! Compiled VCL regular expressions, `~` matching and Varnish's
//! `regsub()` / `regsuball()` substitution semantics.
//!
//! Varnish uses PCRE2 without UTF mode: patterns and subjects are bytes. We
//! compile with the `regex` crate in byte mode (Unicode off, so `.` is any
//! byte and classes are ASCII) and fall back to Unicode mode, then to
//! `fancy-regex` for PCRE features the `regex` crate lacks (look-around,
//! back-references). The fallback engine works on text: a subject that is
//! not UTF-8 is matched in its lossy form.
//!
//! Substitution follows `VRT_regsub`: `\0`..`\9` insert capture groups
//! (missing groups insert nothing), a backslash before any other character
//! inserts that character, a trailing backslash is literal. `regsuball`
//! searches again from where each match ended, over the whole subject as
//! PCRE does with a start offset: `^` holds only at the subject's start,
//! `\b` and look-behind see the bytes before the offset. Matches after the
//! first must be non-empty (PCRE's NOTEMPTY): at a position where the
//! pattern prefers an empty match, its first non-empty one there is taken,
//! found with a variant of the pattern that has only its non-empty paths.
//!
//! Speed: VCL subjects are short (a URL, a header) and most patterns start
//! with a rare byte, so the per-call set-up of a general engine costs more
//! than the scan. Matchers, tried in order, all with the general engine's
//! leftmost-first semantics:
//! - a plain literal, optionally anchored (`^/static/`, `\.css$`, `gzip`),
//!   is compared or found with `memchr::memmem`;
//! - a pattern that cannot match the empty string runs a small DFA (built
//!   by `regex-automata`, copied into a compact table), anchored, from each
//!   position holding a byte that can start a match (found with `memchr`
//!   or a byte table). The first position with a match is the leftmost
//!   match, and the anchored run gives its end, so no reverse scan is
//!   needed. A search whose runs add up to more than a few times the
//!   subject's length hands over to the general engine, which keeps every
//!   search linear. When many bytes can start a match, `~` runs the
//!   unanchored DFA once over the subject instead. A pattern anchored by
//!   `^` and followed by a literal (`^/api/v[0-9]+`) compares the literal
//!   and builds its DFA for the rest only: far fewer states to build at
//!   VCL load;
//! - the capture groups of a match are read with a one-pass DFA when the
//!   pattern allows it;
//! - everything else, and the hand-over, use the `regex` crate (or
//!   `fancy-regex`).
//!
//! The tests below check the fast matchers against the general engine on
//! random patterns and subjects.

use std::borrow::Cow;

use memchr::memmem;
use regex_automata::dfa::{Automaton, StartKind, dense, onepass};
use regex_automata::meta;
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::util::syntax;
use regex_syntax::hir::{Hir, HirKind, Look};

/// A compiled regular expression.
#[derive(Clone, Debug)]
pub struct Regex {
    source: Box<str>,
    engine: Engine,
    /// Set when the pattern is a plain literal with optional `^` / `$`
    /// anchors (`^/static/`, `\.css$`, `gzip`): matched without the engine.
    literal: Option<Literal>,
    /// Set when the pattern cannot match the empty string and compiles to a
    /// small DFA: matches are found by anchored runs from candidate starts.
    dfa: Option<StartDfa>,
    /// Set when every capture group sits at a fixed distance from the
    /// match's start and end (`;(a|bc)=`, `^/x/(.*)$`): (from start, from
    /// end) for groups 1.., read off the match without any engine.
    fixed_groups: Option<Box<[(usize, usize)]>>,
    /// Set when the pattern has capture groups and is one-pass: the groups
    /// of a match found are read with it instead of the engine.
    onepass: Option<onepass::DFA>,
    /// Set when the pattern can match the empty string: its non-empty
    /// matches only (see [`non_empty`]), for `regsuball`'s searches after
    /// the first match (PCRE's NOTEMPTY).
    not_empty: Option<meta::Regex>,
}

/// The paths of `h` that consume at least one byte, in `h`'s order of
/// preference, so that a leftmost-first search for it finds what PCRE
/// finds for `h` with NOTEMPTY (with the engine's rule for repetition
/// rounds that consume nothing). The order is exact through alternatives
/// (while `budget` lasts) and sequences; a repetition or a part beyond
/// the budget is taken to try its non-empty paths before its empty ones
/// or after all of them (`prefers_empty`), not interleaved.
fn non_empty(h: &Hir, budget: &mut usize) -> Hir {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Hir::fail(),
        HirKind::Literal(_) | HirKind::Class(_) => h.clone(),
        HirKind::Capture(c) => Hir::capture(regex_syntax::hir::Capture {
            index: c.index,
            name: c.name.clone(),
            sub: Box::new(non_empty(&c.sub, budget)),
        }),
        HirKind::Alternation(alts) => {
            Hir::alternation(alts.iter().map(|x| non_empty(x, budget)).collect())
        }
        HirKind::Concat(items) => match items.split_first() {
            Some((a, rest)) => non_empty_pair(a, &Hir::concat(rest.to_vec()), budget),
            None => Hir::fail(),
        },
        HirKind::Repetition(r) => {
            let rest = Hir::repetition(regex_syntax::hir::Repetition {
                min: r.min.saturating_sub(1),
                max: r.max.map(|m| m.saturating_sub(1)),
                greedy: r.greedy,
                sub: r.sub.clone(),
            });
            if r.sub.properties().minimum_len().is_some_and(|n| n > 0) {
                // Every round consumes: at least one round.
                Hir::repetition(regex_syntax::hir::Repetition {
                    min: r.min.max(1),
                    ..r.clone()
                })
            } else if r.max == Some(0) {
                Hir::fail()
            } else if r.max.unwrap_or(r.min) > MAX_EMPTY_ROUNDS {
                // Too many rounds to follow one by one: assumed to consume
                // from the first, to keep the pattern small.
                Hir::concat(vec![non_empty(&r.sub, budget), rest])
            } else if r.max.is_none() {
                non_empty_unbounded(r, budget)
            } else {
                // Each round of a bounded repetition is a copy of its own:
                // one may consume nothing and a later one not.
                non_empty_pair(&r.sub, &rest, budget)
            }
        }
    }
}

/// Rounds of a repetition that can match empty that [`non_empty`] follows
/// one by one.
const MAX_EMPTY_ROUNDS: u32 = 8;

/// [`non_empty`] of an unbounded repetition of a part that can match
/// empty, following the engine: its first `max(min, 1)` rounds are copies
/// of the part, after the last of them an empty round ends the
/// repetition, and the later rounds (one loop) that consume nothing are
/// not taken.
fn non_empty_unbounded(r: &regex_syntax::hir::Repetition, budget: &mut usize) -> Hir {
    let g = &r.sub;
    let looped = Hir::repetition(regex_syntax::hir::Repetition {
        min: 0,
        max: None,
        greedy: r.greedy,
        sub: Box::new(non_empty(g, budget)),
    });
    // From the last copy on: all paths, and the non-empty ones.
    let through = Hir::concat(vec![non_empty(g, budget), looped]);
    let mut any = Hir::alternation(if prefers_empty(g) {
        vec![only_empty(g), through.clone()]
    } else {
        vec![through.clone(), only_empty(g)]
    });
    let mut ne = through;
    for _ in 1..r.min.max(1) {
        let through = Hir::concat(vec![non_empty(g, budget), any.clone()]);
        let past = Hir::concat(vec![only_empty(g), ne]);
        ne = Hir::alternation(if prefers_empty(g) {
            vec![past, through]
        } else {
            vec![through, past]
        });
        any = Hir::concat(vec![g.as_ref().clone(), any]);
    }
    ne
}

/// [`non_empty`] of the sequence `a` then `b`. The branches of `a` (see
/// [`branches`]) are taken one by one, in order; otherwise through `a`
/// non-empty and then anything, or through `a` empty and then `b`
/// non-empty, in `a`'s preference. `budget` bounds the copies of `b` made
/// for branches.
fn non_empty_pair(a: &Hir, b: &Hir, budget: &mut usize) -> Hir {
    if let HirKind::Concat(items) = a.kind()
        && let Some((first, rest)) = items.split_first()
    {
        let mut rest = rest.to_vec();
        rest.push(b.clone());
        return non_empty_pair(first, &Hir::concat(rest), budget);
    }
    if let Some(parts) = branches(a).filter(|parts| *budget >= parts.len()) {
        *budget -= parts.len();
        return Hir::alternation(parts.iter().map(|x| non_empty_pair(x, b, budget)).collect());
    }
    let props = a.properties();
    if props.minimum_len().is_some_and(|n| n > 0) {
        return Hir::concat(vec![a.clone(), b.clone()]);
    }
    if props.maximum_len() == Some(0) {
        return Hir::concat(vec![a.clone(), non_empty(b, budget)]);
    }
    let through_a = Hir::concat(vec![non_empty(a, budget), b.clone()]);
    let past_a = Hir::concat(vec![only_empty(a), non_empty(b, budget)]);
    Hir::alternation(if prefers_empty(a) {
        vec![past_a, through_a]
    } else {
        vec![through_a, past_a]
    })
}

/// The paths of `h` split into parts tried one after the other, when that
/// is exact: the alternatives of an alternation, and for an optional
/// repetition, the rounds taken or not (`x*` is `xx*` then nothing; for
/// an unbounded one only if its part always consumes, as the engine
/// treats rounds that consume nothing in a loop apart); within a capture
/// group, each part keeps the group.
fn branches(h: &Hir) -> Option<Vec<Hir>> {
    match h.kind() {
        HirKind::Alternation(alts) => Some(alts.clone()),
        HirKind::Repetition(r)
            if r.min == 0
                && r.max != Some(0)
                && (r.max.is_some() || r.sub.properties().minimum_len().is_some_and(|n| n > 0)) =>
        {
            let more = Hir::concat(vec![
                r.sub.as_ref().clone(),
                Hir::repetition(regex_syntax::hir::Repetition {
                    min: 0,
                    max: r.max.map(|m| m - 1),
                    greedy: r.greedy,
                    sub: r.sub.clone(),
                }),
            ]);
            Some(if r.greedy {
                vec![more, Hir::empty()]
            } else {
                vec![Hir::empty(), more]
            })
        }
        HirKind::Capture(c) => Some(
            branches(&c.sub)?
                .into_iter()
                .map(|x| {
                    Hir::capture(regex_syntax::hir::Capture {
                        index: c.index,
                        name: c.name.clone(),
                        sub: Box::new(x),
                    })
                })
                .collect(),
        ),
        _ => None,
    }
}

/// The paths of `h` that consume nothing (their look-arounds still
/// apply).
fn only_empty(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => h.clone(),
        HirKind::Literal(_) | HirKind::Class(_) => Hir::fail(),
        HirKind::Capture(c) => Hir::capture(regex_syntax::hir::Capture {
            index: c.index,
            name: c.name.clone(),
            sub: Box::new(only_empty(&c.sub)),
        }),
        HirKind::Alternation(alts) => Hir::alternation(alts.iter().map(only_empty).collect()),
        HirKind::Concat(items) => Hir::concat(items.iter().map(only_empty).collect()),
        HirKind::Repetition(r) if r.min == 0 => Hir::empty(),
        HirKind::Repetition(r) => only_empty(&r.sub),
    }
}

/// Whether the first path `h` tries consumes nothing (`x*?`, `(|a)`).
fn prefers_empty(h: &Hir) -> bool {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => true,
        HirKind::Literal(_) | HirKind::Class(_) => false,
        HirKind::Capture(c) => prefers_empty(&c.sub),
        HirKind::Alternation(alts) => alts.first().is_some_and(prefers_empty),
        HirKind::Concat(items) => items.iter().all(prefers_empty),
        HirKind::Repetition(r) => {
            r.max == Some(0) || (!r.greedy && r.min == 0) || (r.min > 0 && prefers_empty(&r.sub))
        }
    }
}

/// The groups of a pattern whose capture groups are all direct parts of
/// its top-level sequence, with fixed-length parts before and after each:
/// (bytes from the match's start, bytes from its end) per group.
fn fixed_groups(hir: &Hir) -> Option<Box<[(usize, usize)]>> {
    let groups = hir.properties().explicit_captures_len();
    if groups == 0 {
        return None;
    }
    let items = match hir.kind() {
        HirKind::Concat(items) => &items[..],
        _ => std::slice::from_ref(hir),
    };
    let fixed = |h: &Hir| {
        let p = h.properties();
        match (p.minimum_len(), p.maximum_len()) {
            (Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        }
    };
    let mut out = vec![None; groups];
    for (k, item) in items.iter().enumerate() {
        if let HirKind::Capture(c) = item.kind() {
            let before: Option<usize> = items[..k].iter().map(fixed).sum();
            let after: Option<usize> = items[k + 1..].iter().map(fixed).sum();
            let slot = out.get_mut((c.index as usize).checked_sub(1)?)?;
            *slot = Some((before?, after?));
        }
    }
    out.into_iter().collect::<Option<Vec<_>>>().map(Into::into)
}

/// Largest DFA (bytes) built for a pattern; bigger ones use the engine.
const DFA_SIZE_LIMIT: usize = 256 * 1024;

/// A pattern that is a literal byte string, possibly anchored.
#[derive(Clone, Debug)]
struct Literal {
    bytes: Box<[u8]>,
    start: bool,
    end: bool,
    /// Searcher for the unanchored case.
    finder: memmem::Finder<'static>,
}

impl Literal {
    /// Recognizes `^?literal$?` where the literal uses no metacharacters
    /// (punctuation may be backslash-escaped).
    fn parse(p: &str) -> Option<Literal> {
        let b = p.as_bytes();
        let start = b.first() == Some(&b'^');
        let mut i = usize::from(start);
        let mut end = false;
        let mut bytes = Vec::with_capacity(b.len());
        while i < b.len() {
            match b[i] {
                b'\\' => {
                    let n = *b.get(i + 1)?;
                    if !n.is_ascii_punctuation() {
                        return None;
                    }
                    bytes.push(n);
                    i += 2;
                }
                b'$' if i + 1 == b.len() => {
                    end = true;
                    i += 1;
                }
                b'.' | b'[' | b']' | b'(' | b')' | b'*' | b'+' | b'?' | b'{' | b'}' | b'|'
                | b'^' | b'$' => return None,
                c => {
                    bytes.push(c);
                    i += 1;
                }
            }
        }
        let finder = memmem::Finder::new(&bytes).into_owned();
        Some(Literal {
            bytes: bytes.into(),
            start,
            end,
            finder,
        })
    }

    /// The first match of a non-empty literal, as a byte range.
    fn find(&self, h: &[u8]) -> Option<(usize, usize)> {
        let n = &self.bytes[..];
        let at = match (self.start, self.end) {
            (true, true) => (h == n).then_some(0),
            (true, false) => h.starts_with(n).then_some(0),
            (false, true) => h.ends_with(n).then(|| h.len() - n.len()),
            (false, false) => self.search(h),
        }?;
        Some((at, at + n.len()))
    }

    /// The first match of a non-empty literal starting at or after `at`:
    /// `^` holds only at the subject's start.
    fn find_from(&self, h: &[u8], at: usize) -> Option<(usize, usize)> {
        if at == 0 {
            return self.find(h);
        }
        let n = self.bytes.len();
        if self.start || h.len() < at + n {
            return None;
        }
        let found = if self.end {
            h.ends_with(&self.bytes).then(|| h.len() - n)
        } else {
            self.search(&h[at..]).map(|p| at + p)
        }?;
        Some((found, found + n))
    }

    fn is_match(&self, h: &[u8]) -> bool {
        let n = &self.bytes[..];
        match (self.start, self.end) {
            (true, true) => h == n,
            (true, false) => h.starts_with(n),
            (false, true) => h.ends_with(n),
            (false, false) => self.search(h).is_some(),
        }
    }

    /// The first occurrence anywhere: `memchr` for one byte (the searcher's
    /// set-up costs more than the scan of a short subject), else the
    /// searcher.
    #[inline]
    fn search(&self, h: &[u8]) -> Option<usize> {
        match self.bytes[..] {
            [b] => memchr::memchr(b, h),
            _ => self.finder.find(h),
        }
    }
}

/// The bytes a match can start with, and the fastest way to find them.
#[derive(Clone, Debug)]
enum FirstBytes {
    One(u8),
    Two(u8, u8),
    Three(u8, u8, u8),
    Table(Box<[bool; 256]>),
}

impl FirstBytes {
    fn new(set: &[bool; 256]) -> FirstBytes {
        let members: Vec<u8> = (0..=255u8).filter(|b| set[usize::from(*b)]).collect();
        match members[..] {
            [a] => FirstBytes::One(a),
            [a, b] => FirstBytes::Two(a, b),
            [a, b, c] => FirstBytes::Three(a, b, c),
            _ => FirstBytes::Table(Box::new(*set)),
        }
    }

    /// The first position at or after `from` holding a possible first byte.
    #[inline]
    fn next(&self, h: &[u8], from: usize) -> Option<usize> {
        let tail = h.get(from..)?;
        let at = match self {
            FirstBytes::One(a) => memchr::memchr(*a, tail),
            FirstBytes::Two(a, b) => memchr::memchr2(*a, *b, tail),
            FirstBytes::Three(a, b, c) => memchr::memchr3(*a, *b, *c, tail),
            FirstBytes::Table(t) => tail.iter().position(|b| t[usize::from(*b)]),
        }?;
        Some(from + at)
    }
}

/// Patterns whose first bytes cover more than this many byte values are
/// left to the engine (nearly every position would be a candidate).
const MAX_FIRST_BYTES: usize = 128;

/// A DFA copied out of `regex-automata`'s dense DFA into a table whose
/// state numbering puts every state that needs attention first (dead,
/// give-up, match states, states the search can skip through), so the hot
/// loop tells a plain state from any other with one comparison. State
/// numbers are premultiplied by the row length (a power of two).
#[derive(Clone, Debug)]
struct Table {
    /// Byte to column (`regex-automata`'s byte classes).
    classes: Box<[u8; 256]>,
    /// `trans[state + class]` is the next state.
    trans: Box<[u32]>,
    /// log2 of the row length.
    shift: u32,
    /// The numbering: dead (0), give-up (one row), match states whose
    /// loop can be skipped, from `first_match_plain` other match states,
    /// from `first_plain_skip` non-match states whose loop can be skipped,
    /// from `first_plain` the rest.
    first_match_plain: u32,
    first_plain_skip: u32,
    first_plain: u32,
    /// Per state (by row): the bytes that leave it, for states that most
    /// bytes lead back to.
    skip: Box<[Skip]>,
    /// Per state (by row): a match ends at the end of the subject.
    eoi_match: Box<[bool]>,
    /// The start state at the beginning of the subject.
    start_text: u32,
    /// The start state after each possible preceding byte (it matters for
    /// `\b`, `(?m)^` and the like); dead when not needed.
    start_after: Box<[u32; 256]>,
}

/// The bytes that leave a state which most other bytes lead back to
/// (`[^;]*`, `.*`, the unanchored start): the search jumps to the next of
/// them with `memchr`, or a byte table when there are more than three.
#[derive(Clone, Debug)]
enum Skip {
    No,
    To1(u8),
    To2(u8, u8),
    To3(u8, u8, u8),
    /// At most [`MAX_FIRST_BYTES`] bytes leave the state.
    ToAny(Box<[bool; 256]>),
    /// No byte leaves the state.
    ToEnd,
}

impl Skip {
    fn new(leaving: &[u8]) -> Skip {
        match *leaving {
            [] => Skip::ToEnd,
            [a] => Skip::To1(a),
            [a, b] => Skip::To2(a, b),
            [a, b, c] => Skip::To3(a, b, c),
            _ if leaving.len() <= MAX_FIRST_BYTES => {
                let mut set = [false; 256];
                for b in leaving {
                    set[usize::from(*b)] = true;
                }
                Skip::ToAny(Box::new(set))
            }
            _ => Skip::No,
        }
    }

    /// The first position at or after `from` holding a byte that leaves
    /// the state (the subject's length if none).
    #[inline]
    fn next(&self, h: &[u8], from: usize) -> usize {
        let tail = &h[from..];
        let at = match self {
            Skip::No => Some(0),
            Skip::To1(a) => memchr::memchr(*a, tail),
            Skip::To2(a, b) => memchr::memchr2(*a, *b, tail),
            Skip::To3(a, b, c) => memchr::memchr3(*a, *b, *c, tail),
            Skip::ToAny(set) => tail.iter().position(|b| set[usize::from(*b)]),
            Skip::ToEnd => None,
        };
        from + at.unwrap_or(tail.len())
    }
}

/// How a run of a [`Table`] ended.
enum Run {
    /// The end of the last match seen (the leftmost-first one when run to
    /// the end), if any.
    Done(Option<usize>),
    /// The DFA met a byte it cannot handle (a Unicode word boundary).
    GiveUp,
}

const DEAD: u32 = 0;

impl Table {
    /// Copies the states of `dfa` reachable from the start states for the
    /// subject's start and, with `after_bytes`, for every preceding byte.
    /// `None` when the table would be large.
    fn build(dfa: &dense::DFA<Vec<u32>>, anchored: bool, after_bytes: bool) -> Option<Table> {
        let mode = if anchored {
            regex_automata::Anchored::Yes
        } else {
            regex_automata::Anchored::No
        };
        let start = |lb: Option<u8>| {
            dfa.start_state(&start::Config::new().anchored(mode).look_behind(lb))
                .ok()
        };
        let text = start(None)?;
        let after = if after_bytes {
            (0..=255u8)
                .map(|b| start(Some(b)))
                .collect::<Option<Vec<_>>>()?
        } else {
            Vec::new()
        };
        // One representative byte per class.
        let mut classes = [0u8; 256];
        let mut reps: Vec<u8> = Vec::new();
        for b in 0..=255u8 {
            let c = dfa.byte_classes().get(b);
            classes[usize::from(b)] = c;
            if usize::from(c) == reps.len() {
                reps.push(b);
            }
        }
        // The reachable states. `seen` maps a state's index in `dfa` to its
        // number here (`UNSEEN` until numbered, 0 while only visited).
        const UNSEEN: u32 = u32::MAX;
        let index = |s: StateID| s.as_usize() >> dfa.stride2();
        let mut seen: Vec<u32> = Vec::new();
        let mut order: Vec<StateID> = Vec::new();
        let mut queue: Vec<StateID> = vec![text];
        queue.extend_from_slice(&after);
        while let Some(s) = queue.pop() {
            if dfa.is_dead_state(s) || dfa.is_quit_state(s) {
                continue;
            }
            let i = index(s);
            if seen.len() <= i {
                seen.resize(i + 1, UNSEEN);
            }
            if seen[i] != UNSEEN {
                continue;
            }
            seen[i] = 0;
            order.push(s);
            queue.extend(reps.iter().map(|b| dfa.next_state(s, *b)));
        }
        // Which states can be skipped through (judged per class), and the
        // numbering: skippable matches, other matches, skippable others,
        // the rest.
        let mut class_size = vec![0usize; reps.len()];
        for c in classes {
            class_size[usize::from(c)] += 1;
        }
        let mut class_leaves = vec![false; reps.len()];
        let mut leaving: Vec<u8> = Vec::with_capacity(MAX_FIRST_BYTES);
        let mut states: Vec<(u8, StateID, Skip)> = order
            .iter()
            .map(|&s| {
                let mut n = 0;
                for ((leaves, b), size) in class_leaves.iter_mut().zip(&reps).zip(&class_size) {
                    *leaves = dfa.next_state(s, *b) != s;
                    n += if *leaves { *size } else { 0 };
                }
                // Most states are left by nearly every byte: no skipping.
                let skip = if n > MAX_FIRST_BYTES {
                    Skip::No
                } else {
                    leaving.clear();
                    leaving.extend(
                        (0..=255u8).filter(|b| class_leaves[usize::from(classes[usize::from(*b)])]),
                    );
                    Skip::new(&leaving)
                };
                let rank = match (dfa.is_match_state(s), matches!(skip, Skip::No)) {
                    (true, false) => 0,
                    (true, true) => 1,
                    (false, false) => 2,
                    (false, true) => 3,
                };
                (rank, s, skip)
            })
            .collect();
        states.sort_by_key(|(rank, ..)| *rank);
        let count = |r: u8| states.iter().filter(|(rank, ..)| *rank == r).count();
        let (n0, n1, n2) = (count(0), count(1), count(2));
        let stride = reps.len().next_power_of_two();
        let shift = stride.trailing_zeros();
        let rows = 2 + order.len();
        if rows * stride * 4 > DFA_SIZE_LIMIT {
            return None;
        }
        for (i, (_, s, _)) in states.iter().enumerate() {
            seen[index(*s)] = u32::try_from((2 + i) << shift).ok()?;
        }
        let num = |s: StateID| -> u32 {
            if dfa.is_quit_state(s) {
                1 << shift
            } else {
                match seen.get(index(s)) {
                    Some(&n) if n != UNSEEN => n,
                    _ => DEAD,
                }
            }
        };
        let mut trans = vec![DEAD; rows * stride];
        let mut eoi_match = vec![false; rows];
        let mut skip = vec![Skip::No; rows];
        for (_, s, state_skip) in states {
            let row = num(s) as usize;
            for (c, &b) in reps.iter().enumerate() {
                trans[row + c] = num(dfa.next_state(s, b));
            }
            eoi_match[row >> shift] = dfa.is_match_state(dfa.next_eoi_state(s));
            skip[row >> shift] = state_skip;
        }
        let mut start_after = Box::new([DEAD; 256]);
        for (slot, s) in start_after.iter_mut().zip(&after) {
            *slot = num(*s);
        }
        let boundary = |n: usize| u32::try_from((2 + n) << shift).ok();
        Some(Table {
            classes: Box::new(classes),
            trans: trans.into(),
            shift,
            first_match_plain: boundary(n0)?,
            first_plain_skip: boundary(n0 + n1)?,
            first_plain: boundary(n0 + n1 + n2)?,
            skip: skip.into(),
            eoi_match: eoi_match.into(),
            start_text: num(text),
            start_after,
        })
    }

    /// The start state for a run beginning at `p`.
    #[inline]
    fn start(&self, h: &[u8], p: usize) -> u32 {
        match p.checked_sub(1) {
            None => self.start_text,
            Some(q) => self.start_after[usize::from(h[q])],
        }
    }

    /// Whether byte `b` can follow state `s` without the match dying.
    fn live(&self, s: u32, b: u8) -> bool {
        self.trans[s as usize + usize::from(self.classes[usize::from(b)])] != DEAD
    }

    /// Runs from state `sid` over `h[p..]`: until the DFA dies (the last
    /// match seen is then the leftmost-first one), or with `earliest` until
    /// the first match. Adds the bytes read to `work`.
    #[inline(always)]
    fn run(&self, h: &[u8], p: usize, mut sid: u32, earliest: bool, work: &mut usize) -> Run {
        let first_match = 2u32 << self.shift;
        let (trans, classes, first_plain) = (&self.trans[..], &*self.classes, self.first_plain);
        let mut last = None;
        let mut i = p;
        while let Some(&b) = h.get(i) {
            sid = trans[sid as usize + usize::from(classes[usize::from(b)])];
            i += 1;
            if sid < first_plain {
                // Matches are reported one byte late: a match state here
                // means a match ended before the byte just read.
                let skips = if sid >= self.first_plain_skip {
                    true
                } else if sid >= first_match {
                    last = Some(i - 1);
                    if earliest {
                        break;
                    }
                    sid < self.first_match_plain
                } else if sid == DEAD {
                    break;
                } else {
                    return Run::GiveUp;
                };
                if skips {
                    // Every byte up to the next one that leaves the state
                    // leads back to it. (A match state that loops holds a
                    // finished match, so the byte or end of subject that
                    // leaves it reports the match's end.)
                    i = self.skip[(sid >> self.shift) as usize].next(h, i);
                }
            }
        }
        *work += i - p + 1;
        if i == h.len()
            && !(earliest && last.is_some())
            && sid != DEAD
            && self.eoi_match[(sid >> self.shift) as usize]
        {
            last = Some(h.len());
        }
        Run::Done(last)
    }
}

/// Matching by DFA runs from candidate starts (see the module docs).
#[derive(Clone, Debug)]
struct StartDfa {
    /// The anchored DFA: a run from a match's start gives its end.
    anchored: Table,
    /// The unanchored DFA, for `is_match` when candidate starts are too
    /// common to visit one by one.
    unanchored: Option<Table>,
    /// Every match begins at the subject's start (`^...`).
    only_at_start: bool,
    /// With `only_at_start`: the literal the pattern begins with after its
    /// `^` (`^/api/v[0-9]+` has `/api/v`), compared directly; the DFAs then
    /// cover only the rest of the pattern, which keeps them small and cheap
    /// to build.
    prefix: Box<[u8]>,
    /// The anchored DFA's start state after `prefix` (the state at the
    /// subject's start when there is no prefix).
    prefix_start: u32,
    /// The bytes that can begin a match after the subject's start:
    /// `(^|;)x` begins with `;` there, with `x` only at the start.
    first: FirstBytes,
    /// The bytes that can begin a match at the subject's start.
    first_at_start: Box<[bool; 256]>,
}

/// The outcome of a search by [`StartDfa`].
enum DfaSearch {
    /// The leftmost-first match.
    Found(usize, usize),
    /// No match.
    None,
    /// No match starts before this position; the engine must decide the
    /// rest (the search ran over its budget or met a byte the DFA cannot
    /// handle).
    HandOver(usize),
}

impl StartDfa {
    /// Builds the matcher, or `None` if the pattern is not suited: it can
    /// match the empty string, its DFA would be large, or nearly any byte
    /// can start a match.
    fn build(hir: &Hir) -> Option<StartDfa> {
        let props = hir.properties();
        if props.minimum_len().is_none_or(|n| n == 0) {
            return None;
        }
        let only_at_start = props.look_set_prefix().contains(Look::Start);
        // `^`, a literal, then more: the DFA is built for the rest.
        let split = match hir.kind() {
            HirKind::Concat(items) if only_at_start && items.len() > 2 => {
                match (items[0].kind(), items[1].kind()) {
                    (HirKind::Look(Look::Start), HirKind::Literal(lit)) => {
                        Some((lit.0.clone(), Hir::concat(items[2..].to_vec())))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let (prefix, rest) = match &split {
            Some((p, rest)) => (p.clone(), rest),
            None => (Box::default(), hir),
        };
        // One NFA, without captures (a DFA has no use for them), for both
        // DFAs.
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .utf8(false)
                    .which_captures(thompson::WhichCaptures::None),
            )
            .build_from_hir(rest)
            .ok()?;
        let dfa = |kind: StartKind| {
            dense::Builder::new()
                .configure(
                    dense::Config::new()
                        .start_kind(kind)
                        .accelerate(false)
                        .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                        .determinize_size_limit(Some(DFA_SIZE_LIMIT)),
                )
                .build_from_nfa(&nfa)
                .ok()
        };
        // The start after a prefix depends on its last byte (for `\b` and
        // the like): that needs the starts after each byte.
        let after_bytes = !only_at_start || !prefix.is_empty();
        let anchored = Table::build(&dfa(StartKind::Anchored)?, true, after_bytes)?;
        let prefix_start = match prefix.last() {
            Some(&b) => anchored.start_after[usize::from(b)],
            None => anchored.start_text,
        };
        // The bytes that can begin a match: those leading out of a start
        // state to a live one, at the start and elsewhere.
        let mut at_start = [false; 256];
        let mut later = [false; 256];
        match prefix.first() {
            Some(&b) => {
                at_start[usize::from(b)] = true;
                later[usize::from(b)] = true;
            }
            None => {
                for b in 0..=255u8 {
                    at_start[usize::from(b)] = anchored.live(anchored.start_text, b);
                }
                let afters: &[u32] = if only_at_start {
                    &[]
                } else {
                    &anchored.start_after[..]
                };
                for &st in afters {
                    for b in 0..=255u8 {
                        later[usize::from(b)] |= anchored.live(st, b);
                    }
                }
            }
        }
        let union = (0..256).filter(|&b| at_start[b] || later[b]).count();
        if union > MAX_FIRST_BYTES {
            return None;
        }
        let first = FirstBytes::new(&later);
        let unanchored = match first {
            FirstBytes::Table(_) if !only_at_start => {
                dfa(StartKind::Unanchored).and_then(|d| Table::build(&d, false, false))
            }
            _ => None,
        };
        Some(StartDfa {
            anchored,
            unanchored,
            only_at_start,
            prefix,
            prefix_start,
            first,
            first_at_start: Box::new(at_start),
        })
    }

    /// With `only_at_start`: the run for the match at the subject's start.
    fn run_at_start(&self, h: &[u8], earliest: bool, work: &mut usize) -> Run {
        if !h.starts_with(&self.prefix) {
            *work += self.prefix.len();
            return Run::Done(None);
        }
        let t = &self.anchored;
        t.run(h, self.prefix.len(), self.prefix_start, earliest, work)
    }

    /// Whether there is a match starting at or after `from`.
    fn is_match(&self, h: &[u8]) -> DfaSearch {
        if let Some(u) = &self.unanchored {
            let mut work = 0;
            return match u.run(h, 0, u.start_text, true, &mut work) {
                Run::Done(Some(e)) => DfaSearch::Found(0, e),
                Run::Done(None) => DfaSearch::None,
                Run::GiveUp => DfaSearch::HandOver(0),
            };
        }
        self.search(h, 0, true)
    }

    /// The leftmost-first match starting at or after `from` (`earliest`:
    /// any match, its end is then not the real one).
    fn search(&self, h: &[u8], from: usize, earliest: bool) -> DfaSearch {
        let t = &self.anchored;
        let mut work = 0;
        if self.only_at_start {
            if from > 0 {
                return DfaSearch::None;
            }
            return match self.run_at_start(h, earliest, &mut work) {
                Run::Done(Some(e)) => DfaSearch::Found(0, e),
                Run::Done(None) => DfaSearch::None,
                Run::GiveUp => DfaSearch::HandOver(0),
            };
        }
        // Enough for any sane pattern; past it the engine's linear-time
        // search is the safer bet.
        let budget = 4 * h.len().saturating_sub(from) + 64;
        let mut p = from;
        if from == 0 {
            // The subject's start, where `^` holds: its own first bytes.
            if h.first()
                .is_some_and(|&b| self.first_at_start[usize::from(b)])
            {
                match t.run(h, 0, t.start_text, earliest, &mut work) {
                    Run::Done(Some(e)) => return DfaSearch::Found(0, e),
                    Run::Done(None) => {}
                    Run::GiveUp => return DfaSearch::HandOver(0),
                }
            }
            p = 1;
        }
        while let Some(c) = self.first.next(h, p) {
            match t.run(h, c, t.start(h, c), earliest, &mut work) {
                Run::Done(Some(e)) => return DfaSearch::Found(c, e),
                Run::Done(None) => {}
                Run::GiveUp => return DfaSearch::HandOver(c),
            }
            p = c + 1;
            if work > budget {
                return DfaSearch::HandOver(p);
            }
        }
        DfaSearch::None
    }
}

#[derive(Clone, Debug)]
enum Engine {
    Bytes(meta::Regex),
    Fancy(fancy_regex::Regex),
}

/// The general engine: the `regex` crate's configuration for byte regexes
/// (leftmost-first, empty matches may split a UTF-8 sequence, its size
/// limits), built from the parsed pattern so it is parsed once. The full
/// DFA is off as in the `regex` crate: `dfa-build` is enabled for
/// [`StartDfa`], and determinizing every pattern twice more at load would
/// dominate VCL load time; the engine's lazy DFA serves its searches.
fn build_engine(hir: &Hir) -> Result<meta::Regex, String> {
    let config = meta::Config::new()
        .match_kind(regex_automata::MatchKind::LeftmostFirst)
        .utf8_empty(false)
        .nfa_size_limit(Some(10 * (1 << 20)))
        .hybrid_cache_capacity(2 * (1 << 20))
        .dfa(false);
    meta::Builder::new()
        .configure(config)
        .build_from_hir(hir)
        .map_err(|e| match e.size_limit() {
            // The `regex` crate's wording.
            Some(limit) => format!("Compiled regex exceeds size limit of {limit} bytes."),
            None => e.to_string(),
        })
}

/// The span from `at` to the end of `subject` (what is before `at` still
/// counts for look-behind assertions such as `^` and `\b`).
fn input_from(subject: &[u8], at: usize) -> regex_automata::Input<'_> {
    regex_automata::Input::new(subject).span(at..subject.len())
}

/// Capture group spans (group 0 is the whole match).
type Groups = [Option<(usize, usize)>; 10];

impl Regex {
    /// Compiles a pattern; the error text is suitable for a VCL compile
    /// error ("Regexp compilation error: ...").
    pub fn new(pattern: &str) -> Result<Regex, String> {
        let compile = |unicode: bool| {
            let sc = syntax::Config::new().unicode(unicode).utf8(false);
            let hir = syntax::parse_with(pattern, &sc).map_err(|e| e.to_string())?;
            build_engine(&hir).map(|r| (hir, r))
        };
        let (mut dfa, mut one, mut fixed, mut not_empty) = (None, None, None, None);
        // A plain literal is matched without any automaton (and has no
        // groups): the fast matchers would never run.
        let literal = Literal::parse(pattern);
        let engine = match compile(false).or_else(|_| compile(true)) {
            Ok((_, r)) if literal.is_some() => Engine::Bytes(r),
            Ok((hir, r)) => {
                dfa = StartDfa::build(&hir);
                fixed = fixed_groups(&hir);
                if r.captures_len() > 1 && fixed.is_none() {
                    one = thompson::Compiler::new()
                        .configure(thompson::Config::new().utf8(false))
                        .build_from_hir(&hir)
                        .ok()
                        .and_then(|nfa| onepass::DFA::builder().build_from_nfa(nfa).ok());
                }
                // Should the variant exceed the engine's limits, an empty
                // match after the first only moves the search on a byte.
                if hir.properties().minimum_len() == Some(0) {
                    not_empty = build_engine(&non_empty(&hir, &mut 256)).ok();
                }
                Engine::Bytes(r)
            }
            Err(first) => match fancy_regex::Regex::new(pattern) {
                Ok(r) => Engine::Fancy(r),
                Err(_) => return Err(first),
            },
        };
        Ok(Regex {
            source: pattern.into(),
            engine,
            literal,
            dfa,
            fixed_groups: fixed,
            onepass: one,
            not_empty,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches anywhere in `subject`. `Err` carries a
    /// matching failure (backtracking limit of the fallback engine), which
    /// Varnish logs and treats as no match.
    pub fn is_match(&self, subject: &[u8]) -> Result<bool, String> {
        if let Some(l) = &self.literal {
            return Ok(l.is_match(subject));
        }
        let mut from = 0;
        if let Some(d) = &self.dfa {
            match d.is_match(subject) {
                DfaSearch::Found(..) => return Ok(true),
                DfaSearch::None => return Ok(false),
                DfaSearch::HandOver(at) => from = at,
            }
        }
        match &self.engine {
            Engine::Bytes(r) => Ok(r.is_match(input_from(subject, from).earliest(true))),
            Engine::Fancy(r) => r
                .is_match(&String::from_utf8_lossy(subject))
                .map_err(|e| format!("Regexp matching returned {e}")),
        }
    }

    /// The first match in `subject` starting at or after `at` (the bytes
    /// before `at` still count for `^`, `\b` and look-behind), as a byte
    /// range; with `not_empty`, the first non-empty one, chosen as PCRE's
    /// NOTEMPTY does.
    fn find(
        &self,
        subject: &[u8],
        at: usize,
        not_empty: bool,
    ) -> Result<Option<(usize, usize)>, String> {
        // A non-empty literal cannot match empty.
        if let Some(l) = self.literal.as_ref().filter(|l| !l.bytes.is_empty()) {
            return Ok(l.find_from(subject, at));
        }
        // The DFA only serves patterns that cannot match empty, so
        // `not_empty` changes nothing for it.
        if let Some(d) = &self.dfa {
            return match d.search(subject, at, false) {
                DfaSearch::Found(s, e) => Ok(Some((s, e))),
                DfaSearch::None => Ok(None),
                DfaSearch::HandOver(p) => self.engine_find(subject, p, not_empty),
            };
        }
        self.engine_find(subject, at, not_empty)
    }

    /// [`Regex::find`] by the general engine, for a match starting at or
    /// after `at`. With `not_empty`, an empty match at a position gives
    /// way to the pattern's first non-empty match there (PCRE backtracks
    /// into the other alternatives: `x*|b` matches `b` in `ab` at 1), and
    /// without one the search goes on from the next position.
    fn engine_find(
        &self,
        subject: &[u8],
        mut at: usize,
        not_empty: bool,
    ) -> Result<Option<(usize, usize)>, String> {
        match &self.engine {
            Engine::Bytes(r) => {
                while at <= subject.len() {
                    let Some(m) = r.find(input_from(subject, at)) else {
                        return Ok(None);
                    };
                    if not_empty && m.is_empty() {
                        if let Some(m) = self.find_not_empty_at(subject, m.start()) {
                            return Ok(Some(m));
                        }
                        at = m.end() + 1;
                        continue;
                    }
                    return Ok(Some((m.start(), m.end())));
                }
                Ok(None)
            }
            // `fancy-regex` has no NOTEMPTY: an empty match only moves the
            // search on by a character (it differs from PCRE only when
            // another alternative could match non-empty at that spot).
            Engine::Fancy(r) => {
                let text = lossless_text(subject)?;
                while at <= text.len() {
                    let m = r
                        .find_from_pos(text, at)
                        .map_err(|e| format!("Regexp matching returned {e}"))?;
                    let Some(m) = m else { return Ok(None) };
                    if not_empty && m.start() == m.end() {
                        at = m.end() + 1;
                        while at < text.len() && !text.is_char_boundary(at) {
                            at += 1;
                        }
                        continue;
                    }
                    return Ok(Some((m.start(), m.end())));
                }
                Ok(None)
            }
        }
    }

    /// The first non-empty match at `at` in the pattern's order of
    /// preference, if any (patterns that can match empty only).
    fn find_not_empty_at(&self, subject: &[u8], at: usize) -> Option<(usize, usize)> {
        let input = input_from(subject, at).anchored(regex_automata::Anchored::Yes);
        let m = self.not_empty.as_ref()?.find(input)?;
        (!m.is_empty()).then_some((m.start(), m.end()))
    }

    /// The capture groups of the match found at `start..end`: the
    /// pattern's preferred match at `start`, or its first non-empty one
    /// there (NOTEMPTY), so an anchored search finds it again.
    fn groups(&self, subject: &[u8], start: usize, end: usize) -> Result<Groups, String> {
        let mut groups = [None; 10];
        groups[0] = Some((start, end));
        if self.literal.is_some() {
            return Ok(groups);
        }
        if let Some(fixed) = &self.fixed_groups {
            let spans = fixed.iter().map(|(before, after)| {
                let (s, e) = (start + before, end.checked_sub(*after)?);
                (s <= e).then_some((s, e))
            });
            let mut whole = true;
            for (g, span) in groups.iter_mut().skip(1).zip(spans) {
                whole &= span.is_some();
                *g = span;
            }
            // Always whole for a real match; the engine decides otherwise.
            if whole {
                return Ok(groups);
            }
        }
        if let Some(op) = &self.onepass {
            let mut slots = [None; 20];
            let n = slots.len().min(op.get_nfa().group_info().slot_len());
            let input = regex_automata::Input::new(subject)
                .range(start..)
                .anchored(regex_automata::Anchored::Yes);
            let mut cache = op.create_cache();
            let found = op.try_search_slots(&mut cache, &input, &mut slots[..n]);
            // A different end: the match is a NOTEMPTY one, after an empty
            // match the pattern prefers at `start`.
            if matches!(found, Ok(Some(_))) && slots[1].map(|e| e.get()) == Some(end) {
                for (i, g) in groups.iter_mut().enumerate().skip(1) {
                    *g = match (
                        slots.get(2 * i).copied().flatten(),
                        slots.get(2 * i + 1).copied().flatten(),
                    ) {
                        (Some(s), Some(e)) => Some((s.get(), e.get())),
                        _ => None,
                    };
                }
                return Ok(groups);
            }
        }
        match &self.engine {
            Engine::Bytes(r) => {
                let mut caps = r.create_captures();
                let input = input_from(subject, start).anchored(regex_automata::Anchored::Yes);
                r.search_captures(&input, &mut caps);
                if start < end && caps.get_match().is_some_and(|m| m.is_empty()) {
                    // A NOTEMPTY match (see `find_not_empty_at`).
                    if let Some(ne) = &self.not_empty {
                        ne.search_captures(&input, &mut caps);
                    }
                }
                let span = |i| caps.get_group(i).map(|s| (s.start, s.end));
                if caps.is_match() {
                    debug_assert_eq!(span(0), Some((start, end)), "{}", self.source);
                    for (i, g) in groups.iter_mut().enumerate().skip(1) {
                        *g = span(i);
                    }
                }
            }
            Engine::Fancy(r) => {
                let text = lossless_text(subject)?;
                let caps = r
                    .captures_from_pos(text, start)
                    .map_err(|e| format!("Regexp matching returned {e}"))?;
                if let Some(caps) = caps {
                    for (i, g) in groups.iter_mut().enumerate().skip(1) {
                        *g = caps.get(i).map(|m| (m.start(), m.end()));
                    }
                }
            }
        }
        Ok(groups)
    }

    /// `regsub(subject, re, sub)` (`all == false`) or `regsuball`, appending
    /// the result to `out`.
    pub fn substitute(
        &self,
        subject: &[u8],
        sub: &[u8],
        all: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let groups_wanted = sub
            .windows(2)
            .any(|w| w[0] == b'\\' && (b'1'..=b'9').contains(&w[1]));
        // `last`: the end of the last match (the subject before it is in
        // `out`). Matches after the first must be non-empty (PCRE's
        // NOTEMPTY); DFA patterns cannot match empty at all.
        let (mut last, mut next) = match (&self.literal, &self.dfa) {
            (None, Some(d)) => {
                match self.substitute_dfa(d, subject, sub, all, groups_wanted, out)? {
                    None => return Ok(()),
                    Some((last, at)) => (last, self.engine_find(subject, at, true)?),
                }
            }
            _ => (0, self.find(subject, 0, false)?),
        };
        while let Some((start, end)) = next {
            self.replace(subject, last, (start, end), sub, groups_wanted, out)?;
            last = end;
            if !all {
                break;
            }
            next = self.find(subject, end, true)?;
        }
        out.extend_from_slice(&subject[last..]);
        Ok(())
    }

    /// Appends `subject[from..start]`, then the substitution expanded for
    /// the match at `start..end`.
    fn replace(
        &self,
        subject: &[u8],
        from: usize,
        (start, end): (usize, usize),
        sub: &[u8],
        groups_wanted: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        out.extend_from_slice(&subject[from..start]);
        let groups = if groups_wanted {
            self.groups(subject, start, end)?
        } else {
            let mut g = [None; 10];
            g[0] = Some((start, end));
            g
        };
        expand(sub, subject, &groups, out);
        Ok(())
    }

    /// [`Regex::substitute`] by DFA runs over the whole subject, without
    /// re-entering the search at each match. As in PCRE, each search after
    /// a match starts where it ended but still sees the whole subject:
    /// `^` holds only at its start and `\b` looks at the byte before.
    /// `Some((last, at))` hands the rest over to the engine: the subject up
    /// to `last` is written and no match starts in `last..at`.
    fn substitute_dfa(
        &self,
        d: &StartDfa,
        subject: &[u8],
        sub: &[u8],
        all: bool,
        groups_wanted: bool,
        out: &mut Vec<u8>,
    ) -> Result<Option<(usize, usize)>, String> {
        let t = &d.anchored;
        let budget = 4 * subject.len() + 64;
        let (mut last, mut p, mut work) = (0, 0, 0);
        loop {
            let c = if d.only_at_start {
                // Only a match at the subject's start, so at most one.
                (p == 0).then_some(0)
            } else if p == 0 {
                // The subject's start, where `^` holds: its own first
                // bytes, then the others after it.
                match subject.first() {
                    Some(&b) if d.first_at_start[usize::from(b)] => Some(0),
                    _ => d.first.next(subject, 1),
                }
            } else {
                d.first.next(subject, p)
            };
            let Some(c) = c else { break };
            let run = if d.only_at_start {
                d.run_at_start(subject, false, &mut work)
            } else {
                t.run(subject, c, t.start(subject, c), false, &mut work)
            };
            match run {
                Run::Done(Some(e)) => {
                    self.replace(subject, last, (c, e), sub, groups_wanted, out)?;
                    (last, p) = (e, e);
                    if !all {
                        break;
                    }
                }
                Run::Done(None) if d.only_at_start => break,
                Run::Done(None) => p = c + 1,
                Run::GiveUp => return Ok(Some((last, c))),
            }
            if work > budget {
                return Ok(Some((last, p)));
            }
        }
        out.extend_from_slice(&subject[last..]);
        Ok(None)
    }
}

/// The subject as text for the fallback engine; offsets into a lossy
/// conversion would not match the subject's bytes, so that is an error.
fn lossless_text(subject: &[u8]) -> Result<&str, String> {
    match String::from_utf8_lossy(subject) {
        Cow::Borrowed(t) => Ok(t),
        Cow::Owned(_) => Err("Regexp subject is not valid UTF-8".into()),
    }
}

/// Appends the substitution string with `\N` references expanded.
fn expand(sub: &[u8], subject: &[u8], groups: &Groups, out: &mut Vec<u8>) {
    let mut i = 0;
    while i < sub.len() {
        let c = sub[i];
        if c != b'\\' || i + 1 == sub.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let n = sub[i + 1];
        if n.is_ascii_digit() {
            if let Some((s, e)) = groups[usize::from(n - b'0')] {
                out.extend_from_slice(&subject[s..e]);
            }
        } else {
            out.push(n);
        }
        i += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(pattern: &str, subject: &str, with: &str, all: bool) -> String {
        let mut out = Vec::new();
        Regex::new(pattern)
            .unwrap()
            .substitute(subject.as_bytes(), with.as_bytes(), all, &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn matching() {
        let r = Regex::new("^/static").unwrap();
        assert!(r.is_match(b"/static/x.png").unwrap());
        assert!(!r.is_match(b"/x/static").unwrap());
        let ci = Regex::new("(?i)\\.JPG$").unwrap();
        assert!(ci.is_match(b"/a.jpg").unwrap());
        // Byte semantics: '.' matches a non-UTF-8 byte.
        assert!(Regex::new("^a.b$").unwrap().is_match(b"a\xffb").unwrap());
        assert!(Regex::new("(").is_err());
        assert_eq!(r.as_str(), "^/static");
    }

    #[test]
    fn literal_fast_path_agrees_with_engine() {
        let pats = [
            "^/static/",
            "\\.css$",
            "gzip",
            "^$",
            "",
            "^exact$",
            "a\\.b",
            "#",
            "\\?$",
        ];
        let subjects: [&[u8]; 9] = [
            b"/static/x.css",
            b"a.css",
            b"x-gzip",
            b"",
            b"exact",
            b"a.b?",
            b"#frag",
            b"/q?",
            b"nothing",
        ];
        for p in pats {
            let r = Regex::new(p).unwrap();
            assert!(r.literal.is_some(), "{p}");
            let engine = regex::bytes::Regex::new(p).unwrap();
            for s in subjects {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
            }
        }
        for p in ["^a.b", "a|b", "\\d", "^(x)$", "a+", "x{2}", "^a$b"] {
            let r = Regex::new(p).unwrap();
            assert!(r.dfa.is_some(), "{p}");
            let engine = regex::bytes::Regex::new(p).unwrap();
            for s in [
                &b"a.b"[..],
                b"axb",
                b"b",
                b"7",
                b"x",
                b"xx",
                b"aa",
                b"a$b",
                b"",
            ] {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
            }
            assert!(Regex::new(p).unwrap().literal.is_none(), "{p}");
        }
    }

    #[test]
    fn lookaround_falls_back() {
        let r = Regex::new("^/(?!admin)").unwrap();
        assert!(r.is_match(b"/shop").unwrap());
        assert!(!r.is_match(b"/admin").unwrap());
        assert_eq!(sub("(a)(?=b)", "abac", "[\\1]", true), "[a]bac");
        let back = Regex::new("^(\\w+)-\\1$").unwrap();
        assert!(back.is_match(b"ab-ab").unwrap());
        assert!(!back.is_match(b"ab-cd").unwrap());
    }

    #[test]
    fn regsub_semantics() {
        assert_eq!(sub("b", "abcb", "X", false), "aXcb");
        assert_eq!(sub("b", "abcb", "X", true), "aXcX");
        assert_eq!(sub("z", "abc", "X", true), "abc");
        assert_eq!(
            sub(
                "^(\\w+)\\.example\\.com$",
                "www.example.com",
                "\\1 \\0",
                false
            ),
            "www www.example.com"
        );
        // Missing group inserts nothing; escaped non-digit is literal.
        assert_eq!(sub("(a)|(b)", "b", "<\\1|\\2>", false), "<|b>");
        assert_eq!(sub("a", "a", "\\n\\\\x\\", false), "n\\x\\");
        // `^` holds only at the subject's start, also for later matches.
        assert_eq!(sub("^a", "aaab", "b", true), "baab");
        // An empty first match is replaced once; later ones must be
        // non-empty.
        assert_eq!(sub("x*", "abc", "-", true), "-abc");
        assert_eq!(sub("[0-9]*", "12ab34", "#", true), "#ab#");
        assert_eq!(sub(", *", "a, b,c", ";", true), "a;b;c");
    }

    #[test]
    fn regsuball_searches_the_whole_subject_after_a_match() {
        // Each checked against varnishd 7.1.1: a search after a match
        // starts where it ended, but `^`, `\b` and look-behind still see
        // the subject before it.
        let cases = [
            ("^a", "aaa", "b", "baa"),
            ("(^|;)a", "a;a;x", "Z", "ZZ;x"),
            ("\\bab", "abab", "X", "Xab"),
            ("^x", "xxab", "-", "-xab"),
            ("^a|b", "aab", "-", "-a-"),
            ("(?m)^a", "aab", "-", "-ab"),
            ("(?m)^a", "a\naa", "-", "-\n-a"),
            ("(?i)(^|,)A", "a,b", "Z", "Z,b"),
            // Literal and engine paths.
            ("^a", "aaa", "\\0\\0", "aaaa"),
            ("^[ab]", "abab", "-", "-bab"),
            ("(?<=a)b", "abab", "-", "a-a-"),
            ("^(a)", "aa", "<\\1>", "<a>a"),
        ];
        for (p, s, with, want) in cases {
            assert_eq!(sub(p, s, with, true), want, "{p} on {s:?}");
        }
    }

    #[test]
    fn later_matches_are_not_empty_as_pcre_notempty() {
        // Each checked against varnishd 7.1.1. After an empty match, the
        // pattern's other alternatives are tried at the same position
        // before moving on, and no later match may be empty, not even at
        // the subject's end.
        let cases = [
            ("x*|b", "ab", "-", "-a-"),
            ("", "abc", "-", "-abc"),
            ("b*", "abc", "-", "-a-c"),
            ("\\b", "foo bar", "|", "|foo bar"),
            ("b|$", "ab", "-", "a-"),
            ("$", "ab", "-", "ab-"),
            ("(x*)(b)?", "abb", "<\\1\\2>", "<>a<b><b>"),
            ("x*?(b)", "abb", "<\\1>", "a<b><b>"),
            ("(?:|a)b*", "ab", "-", "--"),
            // Optional and bounded repetitions of parts that can match
            // empty.
            ("( *|a)?;?", "ab;", "<\\1>", "<><a>b<>"),
            ("(?:a|( ?)){1,2}b?", "xab", "<\\1>", "<>x<>"),
            ("(x?|;)?b?", "a;b", "<\\1>", "<>a<;>"),
        ];
        for (p, s, with, want) in cases {
            assert_eq!(sub(p, s, with, true), want, "{p} on {s:?}");
        }
        // `regsub` replaces the first match, empty or not.
        assert_eq!(sub("$", "ab", "-", false), "ab-");
        assert_eq!(sub("x*|b", "ab", "-", false), "-ab");
        assert_eq!(sub("^a", "aaa", "b", false), "baa");
    }

    #[test]
    fn literal_substitution_matches_engine_semantics() {
        assert_eq!(sub("^www\\.", "www.example.com", "", false), "example.com");
        assert_eq!(sub("^www\\.", "a.www.b", "", true), "a.www.b");
        assert_eq!(sub("^a", "aaab", "b", true), "baab");
        assert_eq!(sub("\\?$", "/x?", "", true), "/x");
        assert_eq!(sub("o", "foo", "[\\0\\1]", true), "f[o][o]");
        assert_eq!(sub("^ab$", "ab", "X", true), "X");
        assert_eq!(sub("zz", "abc", "X", true), "abc");
    }

    #[test]
    fn cookie_cleanup() {
        // The classic "strip Google Analytics cookies" idiom.
        assert_eq!(
            sub(
                "(^|;\\s*)(_ga|_gid)=[^;]*",
                "_ga=1; sess=2; _gid=3",
                "",
                true
            ),
            "; sess=2"
        );
    }

    /// A small deterministic generator (xorshift) for the property tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[self.below(xs.len())]
        }
    }

    /// A random pattern over a small alphabet, so that matches are common.
    fn random_pattern(rng: &mut Rng, depth: u32) -> String {
        let mut out = String::new();
        if depth == 0 && rng.below(6) == 0 {
            out.push_str("(?i)");
        }
        if rng.below(5) == 0 {
            out.push('^');
        }
        for _ in 0..1 + rng.below(4) {
            let atom = match rng.below(if depth < 2 { 12 } else { 10 }) {
                0..=3 => rng
                    .pick(&["a", "b", ";", " ", "=", "\\.", "A", "1"])
                    .to_string(),
                4 => rng
                    .pick(&["[ab]", "[^;]", "[; ]", "[a-z]", "[^ab=]"])
                    .to_string(),
                5 => rng.pick(&[".", "\\s", "\\d", "\\w", "\\S"]).to_string(),
                6 => rng
                    .pick(&["\\b", "$", "(?m:^)", "(?m:$)", "\\B"])
                    .to_string(),
                7 => "x".to_string(),
                8 | 9 => rng.pick(&["a", "b", ";"]).to_string(),
                _ => {
                    let alts = 1 + rng.below(3);
                    let inner: Vec<String> =
                        (0..alts).map(|_| random_pattern(rng, depth + 1)).collect();
                    let open = if rng.below(2) == 0 { "(" } else { "(?:" };
                    format!("{open}{})", inner.join("|"))
                }
            };
            out.push_str(&atom);
            let q = ["", "", "", "*", "+", "?", "{1,3}", "*?", "+?", "{2}"];
            out.push_str(q[rng.below(q.len())]);
        }
        if rng.below(6) == 0 {
            out.push('$');
        }
        if depth == 0 && rng.below(4) == 0 {
            let other = random_pattern(rng, 1);
            out = format!("{out}|{other}");
        }
        out
    }

    fn random_subject(rng: &mut Rng) -> Vec<u8> {
        let alphabet: &[u8] = b"abAB; =.\n1x\xff";
        let n = rng.below(40);
        let mut v: Vec<u8> = (0..n)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        if rng.below(8) == 0 {
            // Long runs stress the hand-over to the engine.
            v.extend(std::iter::repeat_n(b'a', 300));
        }
        v
    }

    /// The reference the fast matchers must agree with: the `regex`
    /// crate's engine, and for PCRE's NOTEMPTY (beyond any automaton) a
    /// backtracking matcher over the parsed pattern.
    struct Reference {
        engine: regex::bytes::Regex,
        hir: Hir,
    }

    impl Reference {
        /// `None` if the `regex` crate rejects the pattern.
        fn new(pattern: &str, unicode: bool) -> Option<Reference> {
            let engine = regex::bytes::RegexBuilder::new(pattern)
                .unicode(unicode)
                .build()
                .ok()?;
            let hir = regex_syntax::ParserBuilder::new()
                .unicode(unicode)
                .utf8(false)
                .build()
                .parse(pattern)
                .ok()?;
            Some(Reference { engine, hir })
        }

        /// `regsub`/`regsuball`: each search after a match starts where it
        /// ended, on the whole subject, and where the engine finds an empty
        /// match the backtracker looks for a non-empty one at the same
        /// position. `None` when the backtracker gives up.
        fn substitute(&self, subject: &[u8], sub: &[u8], all: bool) -> Option<Vec<u8>> {
            let mut out = Vec::new();
            let (mut last, mut from, mut not_empty) = (0, 0, false);
            while from <= subject.len() {
                let Some(c) = self.engine.captures_at(subject, from) else {
                    break;
                };
                let m = c.get(0).unwrap();
                let groups = if not_empty && m.is_empty() {
                    match Backtrack::not_empty_at(&self.hir, subject, m.start())? {
                        Some(groups) => groups,
                        None => {
                            from = m.start() + 1;
                            continue;
                        }
                    }
                } else {
                    let mut groups = [None; 10];
                    for (i, g) in groups.iter_mut().enumerate() {
                        *g = c.get(i).map(|m| (m.start(), m.end()));
                    }
                    groups
                };
                let (start, end) = groups[0].unwrap();
                out.extend_from_slice(&subject[last..start]);
                expand(sub, subject, &groups, &mut out);
                (last, from) = (end, end);
                if !all {
                    break;
                }
                not_empty = true;
            }
            out.extend_from_slice(&subject[last..]);
            Some(out)
        }
    }

    /// A backtracking matcher over a parsed byte pattern that tries its
    /// paths in PCRE's order. Rounds of a repetition that consume nothing
    /// follow the `regex` crate's engines (an unbounded repetition's
    /// rounds past the first and the minimum share automaton states, so
    /// one that consumed nothing ends the repetition), not PCRE's: the
    /// two differ on patterns like `(a*?|b)*`, whatever the fast matchers
    /// do.
    struct Backtrack<'h> {
        h: &'h [u8],
        steps: std::cell::Cell<usize>,
        groups: std::cell::RefCell<Groups>,
    }

    /// Steps after which the backtracker gives up (nested repetitions on
    /// long subjects).
    const BACKTRACK_STEPS: usize = 100_000;

    impl Backtrack<'_> {
        /// The groups of the first non-empty match at `at` in the pattern's
        /// order of preference; `None` when it took too many steps.
        fn not_empty_at(hir: &Hir, h: &[u8], at: usize) -> Option<Option<Groups>> {
            let b = Backtrack {
                h,
                steps: Default::default(),
                groups: Default::default(),
            };
            let mut end = None;
            let found = b.m(hir, at, &mut |e| {
                end = Some(e);
                e > at
            });
            if b.steps.get() > BACKTRACK_STEPS {
                return None;
            }
            let mut groups = b.groups.into_inner();
            groups[0] = end.map(|e| (at, e));
            Some(found.then_some(groups))
        }

        /// Whether `hir` matches at `at` with `k` accepting where it ends.
        fn m(&self, hir: &Hir, at: usize, k: &mut dyn FnMut(usize) -> bool) -> bool {
            use regex_automata::util::look::{Look as L, LookMatcher};
            use regex_syntax::hir::Class;
            self.steps.set(self.steps.get() + 1);
            if self.steps.get() > BACKTRACK_STEPS {
                return false;
            }
            match hir.kind() {
                HirKind::Empty => k(at),
                HirKind::Literal(l) => self.h[at..].starts_with(&l.0) && k(at + l.0.len()),
                HirKind::Class(Class::Bytes(c)) => {
                    let hit = self.h.get(at).is_some_and(|b| {
                        c.ranges().iter().any(|r| (r.start()..=r.end()).contains(b))
                    });
                    hit && k(at + 1)
                }
                HirKind::Class(Class::Unicode(_)) => panic!("not a byte pattern"),
                HirKind::Look(l) => {
                    let look = L::from_repr(l.as_repr()).unwrap();
                    LookMatcher::new().matches(look, self.h, at) && k(at)
                }
                HirKind::Capture(c) => {
                    let i = c.index as usize;
                    self.m(&c.sub, at, &mut |e| {
                        let saved = self.groups.borrow()[i];
                        self.groups.borrow_mut()[i] = Some((at, e));
                        k(e) || {
                            self.groups.borrow_mut()[i] = saved;
                            false
                        }
                    })
                }
                HirKind::Concat(items) => self.seq(items, at, k),
                HirKind::Alternation(alts) => alts.iter().any(|a| self.m(a, at, k)),
                HirKind::Repetition(r) => self.rep(r, at, 0, k),
            }
        }

        fn seq(&self, items: &[Hir], at: usize, k: &mut dyn FnMut(usize) -> bool) -> bool {
            match items.split_first() {
                None => k(at),
                Some((a, rest)) => self.m(a, at, &mut |p| self.seq(rest, p, k)),
            }
        }

        /// Repetition `r` after `n` rounds.
        fn rep(
            &self,
            r: &regex_syntax::hir::Repetition,
            at: usize,
            n: u32,
            k: &mut dyn FnMut(usize) -> bool,
        ) -> bool {
            if n < r.min {
                return self.round(r, at, n, k);
            }
            // Greedy: another round first; lazy: the rest first.
            [r.greedy, !r.greedy].into_iter().any(|round| {
                if round {
                    self.round(r, at, n, k)
                } else {
                    k(at)
                }
            })
        }

        fn round(
            &self,
            r: &regex_syntax::hir::Repetition,
            at: usize,
            n: u32,
            k: &mut dyn FnMut(usize) -> bool,
        ) -> bool {
            // Round `n` (from 0) of an unbounded repetition past the
            // first and the minimum runs the same automaton states as the
            // one before: when that consumed nothing, it is not taken.
            let is_loop = |n: u32| r.max.is_none() && n >= r.min.max(1);
            r.max.is_none_or(|max| n < max)
                && self.m(&r.sub, at, &mut |p| {
                    if p > at {
                        self.rep(r, p, n + 1, k)
                    } else if is_loop(n) {
                        false
                    } else if is_loop(n + 1) {
                        k(p)
                    } else {
                        self.rep(r, p, n + 1, k)
                    }
                })
        }
    }

    #[test]
    fn fast_matchers_agree_with_engine_on_random_inputs() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut with_dfa, mut with_literal, mut with_prefix, mut checked) = (0, 0, 0, 0);
        let mut compared = 0;
        for _ in 0..1200 {
            let p = random_pattern(&mut rng, 0);
            let Some(reference) = Reference::new(&p, false) else {
                continue;
            };
            let engine = &reference.engine;
            let r = Regex::new(&p).unwrap();
            with_dfa += usize::from(r.dfa.is_some());
            with_literal += usize::from(r.literal.is_some());
            with_prefix += usize::from(r.dfa.as_ref().is_some_and(|d| !d.prefix.is_empty()));
            for _ in 0..16 {
                let s = random_subject(&mut rng);
                checked += 1;
                assert_eq!(
                    r.is_match(&s).unwrap(),
                    engine.is_match(&s),
                    "{p:?} on {s:?}"
                );
                for all in [false, true] {
                    for with in [&b"<\\0>"[..], b"[\\1|\\2]", b""] {
                        let mut out = Vec::new();
                        r.substitute(&s, with, all, &mut out).unwrap();
                        if let Some(want) = reference.substitute(&s, with, all) {
                            compared += 1;
                            assert_eq!(out, want, "{p:?} on {s:?} with {with:?}, all={all}");
                        }
                    }
                }
            }
        }
        // The generator must exercise every matcher.
        assert!(with_dfa > 400, "{with_dfa} patterns had a DFA");
        assert!(with_literal > 20, "{with_literal} patterns were literals");
        assert!(
            with_prefix > 15,
            "{with_prefix} patterns had a literal prefix"
        );
        assert!(checked > 15_000);
        // Substitutions the reference could judge (the backtracker never
        // gave up on these).
        assert!(compared > 110_000, "{compared} substitutions compared");
    }

    #[test]
    fn anchored_literal_prefixes_agree_with_engine() {
        // The DFA covers only what follows the literal; the rest may match
        // empty, look behind into the prefix, or need the subject's end.
        let pats = [
            ("^/section12/item[0-9]+", "/section12/item"),
            ("^/api/v[0-9]+/(users|orders)", "/api/v"),
            ("^ab*", "a"),
            ("^ab\\b", "ab"),
            ("^ab\\B[a-z]", "ab"),
            ("^a;(?m:$)", "a;"),
            ("^x[0-9]*$", "x"),
            ("^Bearer +([^ ]+)", "Bearer"),
        ];
        let subjects: [&[u8]; 12] = [
            b"/section12/item42?x=1",
            b"/section12/item",
            b"/section12/items",
            b"/api/v2/users/9",
            b"/api/v/users",
            b"abbbc",
            b"a",
            b"ab cd",
            b"abc",
            b"a;\nx",
            b"x123",
            b"Bearer  tok-1 x",
        ];
        for (p, prefix) in pats {
            let r = Regex::new(p).unwrap();
            let d = r.dfa.as_ref().unwrap_or_else(|| panic!("{p} has no DFA"));
            assert_eq!(&d.prefix[..], prefix.as_bytes(), "{p}");
            let reference = Reference::new(&format!("(?-u){p}"), true).unwrap();
            let engine = &reference.engine;
            for s in subjects {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
                for all in [false, true] {
                    let mut out = Vec::new();
                    r.substitute(s, b"<\\0|\\1>", all, &mut out).unwrap();
                    assert_eq!(
                        Some(out),
                        reference.substitute(s, b"<\\0|\\1>", all),
                        "{p} on {s:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn production_patterns_agree_with_engine() {
        let pats = [
            "(^|;\\s*)(_ga|_gid|_gat|__utm[a-z]+|_fbp|_hj[a-zA-Z_0-9]+)=[^;]*",
            "; +",
            ";(session|lang|cart_id)=",
            ";[^ ][^;]*",
            "^[; ]+|[; ]+$",
            "(utm_[a-z]+|gclid|fbclid|mc_[a-z]+)=[^&]*&?",
            "[?&]+$",
            "(?i)ipad|tablet|kindle|playbook",
            "(?i)mobile|android|iphone|ipod|blackberry|opera mini",
            "\\.(css|js|jpg|jpeg|png|gif|ico|svg|webp|woff|woff2|ttf|eot|mp4|mp3|pdf)(\\?.*)?$",
            "^/(admin|login|logout|cart|checkout|account)",
            "^(text/|application/(json|javascript|xml))",
            ":[0-9]+$",
            "#.*$",
            "\\bfoo\\b",
            "(?m)^x",
        ];
        let subjects: [&[u8]; 8] = [
            b"_ga=GA1.2.3; session=abc; _gid=GA1.5; _hjSessionUser_1=eyJ; lang=en",
            b";session=a;  lang=b; cart_id=9;x=1",
            b"/a/b.css?v=1&utm_source=x&gclid=y&id=2",
            b"Mozilla/5.0 (Linux; Android 14) Mobile Safari; iPad; Bot",
            b"text/html; charset=utf-8",
            b"example.com:8080#frag",
            b"foo foobar xfoo foo\nx",
            b"",
        ];
        for p in pats {
            let r = Regex::new(p).unwrap();
            assert!(r.dfa.is_some() || r.literal.is_some(), "{p}");
            let reference = Reference::new(&format!("(?-u){p}"), true).unwrap();
            let engine = &reference.engine;
            for s in subjects {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
                for all in [false, true] {
                    let mut out = Vec::new();
                    r.substitute(s, b"<\\1>", all, &mut out).unwrap();
                    assert_eq!(
                        Some(out),
                        reference.substitute(s, b"<\\1>", all),
                        "{p} on {s:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn long_candidate_runs_hand_over_to_the_engine() {
        // Every `a` starts a run to the end of the subject: the DFA gives
        // up after its budget and the engine finishes in linear time.
        let r = Regex::new("a+b").unwrap();
        assert!(r.dfa.is_some());
        let mut s = vec![b'a'; 10_000];
        let d = r.dfa.as_ref().unwrap();
        assert!(matches!(d.search(&s, 0, true), DfaSearch::HandOver(p) if p < 100));
        assert!(!r.is_match(&s).unwrap());
        s.push(b'b');
        let mut out = Vec::new();
        r.substitute(&s, b"X", true, &mut out).unwrap();
        assert_eq!(out, b"X");
        // The same in a substitution, with matches before and after the
        // hand-over.
        let mut s = b"ab-".to_vec();
        s.extend(std::iter::repeat_n(b'a', 10_000));
        s.extend_from_slice(b"-ab-aab");
        let mut out = Vec::new();
        r.substitute(&s, b"X", true, &mut out).unwrap();
        let mut want = b"X-".to_vec();
        want.extend(std::iter::repeat_n(b'a', 10_000));
        want.extend_from_slice(b"-X-X");
        assert_eq!(out, want);
    }
}
