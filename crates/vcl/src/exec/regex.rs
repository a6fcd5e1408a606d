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
//! restarts matching on the remainder after each match, so `^` anchors at
//! every restart and, as PCRE's NOTEMPTY, later matches must be non-empty.
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
    /// The bytes that can begin a match after the subject's start (or a
    /// restart of `regsuball`): `(^|;)x` begins with `;` there, with `x` only
    /// at the start.
    first: FirstBytes,
    /// The bytes that can begin a match at the subject's start or a
    /// restart.
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

    /// With `only_at_start`: the run for a match beginning at `at`, taken as
    /// the subject's start (`^` matches there).
    fn run_at_start(&self, h: &[u8], at: usize, earliest: bool, work: &mut usize) -> Run {
        if !h[at..].starts_with(&self.prefix) {
            *work += self.prefix.len();
            return Run::Done(None);
        }
        let t = &self.anchored;
        t.run(h, at + self.prefix.len(), self.prefix_start, earliest, work)
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
            return match self.run_at_start(h, 0, earliest, &mut work) {
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
        let (mut dfa, mut one, mut fixed) = (None, None, None);
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

    /// The first match in `subject` as a byte range; with `not_empty`, the
    /// first non-empty one.
    fn find(&self, subject: &[u8], not_empty: bool) -> Result<Option<(usize, usize)>, String> {
        // A non-empty literal cannot match empty.
        if let Some(l) = self.literal.as_ref().filter(|l| !l.bytes.is_empty()) {
            return Ok(l.find(subject));
        }
        // The DFA only serves patterns that cannot match empty, so
        // `not_empty` changes nothing for it.
        if let Some(d) = &self.dfa {
            return match d.search(subject, 0, false) {
                DfaSearch::Found(s, e) => Ok(Some((s, e))),
                DfaSearch::None => Ok(None),
                DfaSearch::HandOver(p) => self.engine_find(subject, p, not_empty),
            };
        }
        self.engine_find(subject, 0, not_empty)
    }

    /// [`Regex::find`] by the general engine, for a match starting at or
    /// after `at`.
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
                    if not_empty && m.start() == m.end() {
                        at = m.end() + 1;
                        continue;
                    }
                    return Ok(Some((m.start(), m.end())));
                }
                Ok(None)
            }
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

    /// The capture groups of the match found at `start..end` (the
    /// leftmost-first match at `start`, so the engine finds it again).
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
            if let Ok(Some(_)) = op.try_search_slots(&mut cache, &input, &mut slots[..n]) {
                debug_assert_eq!(
                    slots[1].map(|e: regex_automata::util::primitives::NonMaxUsize| e.get()),
                    Some(end),
                    "{}",
                    self.source
                );
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
                r.search_captures(&input_from(subject, start), &mut caps);
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
        // Matches after the first must be non-empty (PCRE's NOTEMPTY).
        let (mut rest, mut next) = match (&self.literal, &self.dfa) {
            (None, Some(d)) => {
                match self.substitute_dfa(d, subject, sub, all, groups_wanted, out)? {
                    None => return Ok(()),
                    Some((origin, at)) => {
                        let rest = &subject[origin..];
                        (rest, self.engine_find(rest, at, origin > 0)?)
                    }
                }
            }
            _ => (subject, self.find(subject, false)?),
        };
        while let Some((start, end)) = next {
            self.replace(rest, start, end, sub, groups_wanted, out)?;
            rest = &rest[end..];
            if !all {
                break;
            }
            next = self.find(rest, true)?;
        }
        out.extend_from_slice(rest);
        Ok(())
    }

    /// Appends `rest` up to the match at `start..end`, then the expanded
    /// substitution.
    fn replace(
        &self,
        rest: &[u8],
        start: usize,
        end: usize,
        sub: &[u8],
        groups_wanted: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        out.extend_from_slice(&rest[..start]);
        let groups = if groups_wanted {
            self.groups(rest, start, end)?
        } else {
            let mut g = [None; 10];
            g[0] = Some((start, end));
            g
        };
        expand(sub, rest, &groups, out);
        Ok(())
    }

    /// [`Regex::substitute`] by DFA runs over the whole subject: each
    /// remainder after a match is searched as a subject of its own (its
    /// start is the subject's start for `^` and `\b`) without slicing or
    /// re-entering the search. `Some((origin, at))` hands the rest over to
    /// the engine: the remainder starting at `origin` has no match before
    /// `at` (relative to it).
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
        let (mut origin, mut p, mut work) = (0, 0, 0);
        loop {
            let c = if d.only_at_start {
                (p == origin).then_some(origin)
            } else if p == origin {
                // A restart is a start (`^` holds there): its own first
                // bytes, then the others after it.
                match subject.get(origin) {
                    Some(&b) if d.first_at_start[usize::from(b)] => Some(origin),
                    _ => d.first.next(subject, origin + 1),
                }
            } else {
                d.first.next(subject, p)
            };
            let Some(c) = c else { break };
            let run = if d.only_at_start {
                d.run_at_start(subject, c, false, &mut work)
            } else {
                let sid = if c == origin {
                    t.start_text
                } else {
                    t.start(subject, c)
                };
                t.run(subject, c, sid, false, &mut work)
            };
            match run {
                Run::Done(Some(e)) => {
                    let rest = &subject[origin..];
                    self.replace(rest, c - origin, e - origin, sub, groups_wanted, out)?;
                    (origin, p) = (e, e);
                    if !all {
                        break;
                    }
                }
                Run::Done(None) if d.only_at_start => break,
                Run::Done(None) => p = c + 1,
                Run::GiveUp => return Ok(Some((origin, c - origin))),
            }
            if work > budget {
                return Ok(Some((origin, p - origin)));
            }
        }
        out.extend_from_slice(&subject[origin..]);
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
        // `^` re-anchors on the remainder after each match.
        assert_eq!(sub("^a", "aaab", "b", true), "bbbb");
        // An empty first match is replaced once; later ones must be
        // non-empty.
        assert_eq!(sub("x*", "abc", "-", true), "-abc");
        assert_eq!(sub("[0-9]*", "12ab34", "#", true), "#ab#");
        assert_eq!(sub(", *", "a, b,c", ";", true), "a;b;c");
    }

    #[test]
    fn literal_substitution_matches_engine_semantics() {
        assert_eq!(sub("^www\\.", "www.example.com", "", false), "example.com");
        assert_eq!(sub("^www\\.", "a.www.b", "", true), "a.www.b");
        assert_eq!(sub("^a", "aaab", "b", true), "bbbb");
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

    /// `regsub`/`regsuball` done with the general engine only: the
    /// reference the fast matchers must agree with.
    fn reference_substitute(
        r: &regex::bytes::Regex,
        subject: &[u8],
        sub: &[u8],
        all: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = subject;
        let mut not_empty = false;
        loop {
            let mut at = 0;
            let mut found = None;
            while at <= rest.len() {
                let Some(c) = r.captures_at(rest, at) else {
                    break;
                };
                let m = c.get(0).unwrap();
                if not_empty && m.start() == m.end() {
                    at = m.end() + 1;
                    continue;
                }
                found = Some(c);
                break;
            }
            let Some(c) = found else { break };
            let mut groups = [None; 10];
            for (i, g) in groups.iter_mut().enumerate() {
                *g = c.get(i).map(|m| (m.start(), m.end()));
            }
            let (start, end) = groups[0].unwrap();
            out.extend_from_slice(&rest[..start]);
            expand(sub, rest, &groups, &mut out);
            rest = &rest[end..];
            if !all {
                break;
            }
            not_empty = true;
        }
        out.extend_from_slice(rest);
        out
    }

    #[test]
    fn fast_matchers_agree_with_engine_on_random_inputs() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut with_dfa, mut with_literal, mut with_prefix, mut checked) = (0, 0, 0, 0);
        for _ in 0..1200 {
            let p = random_pattern(&mut rng, 0);
            let Ok(engine) = regex::bytes::RegexBuilder::new(&p).unicode(false).build() else {
                continue;
            };
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
                        assert_eq!(
                            out,
                            reference_substitute(&engine, &s, with, all),
                            "{p:?} on {s:?} with {with:?}, all={all}"
                        );
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
            let engine = regex::bytes::Regex::new(&format!("(?-u){p}")).unwrap();
            for s in subjects {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
                for all in [false, true] {
                    let mut out = Vec::new();
                    r.substitute(s, b"<\\0|\\1>", all, &mut out).unwrap();
                    assert_eq!(
                        out,
                        reference_substitute(&engine, s, b"<\\0|\\1>", all),
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
            let engine = regex::bytes::Regex::new(&format!("(?-u){p}")).unwrap();
            for s in subjects {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
                for all in [false, true] {
                    let mut out = Vec::new();
                    r.substitute(s, b"<\\1>", all, &mut out).unwrap();
                    assert_eq!(
                        out,
                        reference_substitute(&engine, s, b"<\\1>", all),
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
