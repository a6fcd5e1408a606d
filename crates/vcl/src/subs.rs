//! The built-in VCL subroutines of Varnish 7.1, the return actions legal in
//! each, and the sets of subroutines (`SubMask`) that the variable table and
//! vmod `$Restrict` declarations refer to.
//!
//! The action table was checked against `varnishd -C` of Varnish 7.1.1.

use std::fmt;

/// One of the built-in (state machine) subroutines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BuiltinSub {
    Recv,
    Pipe,
    Pass,
    Hash,
    Purge,
    Miss,
    Hit,
    Deliver,
    Synth,
    BackendFetch,
    BackendResponse,
    BackendError,
    Init,
    Fini,
}

/// All built-in subroutines, in bit order.
pub const ALL_BUILTIN_SUBS: [BuiltinSub; 14] = [
    BuiltinSub::Recv,
    BuiltinSub::Pipe,
    BuiltinSub::Pass,
    BuiltinSub::Hash,
    BuiltinSub::Purge,
    BuiltinSub::Miss,
    BuiltinSub::Hit,
    BuiltinSub::Deliver,
    BuiltinSub::Synth,
    BuiltinSub::BackendFetch,
    BuiltinSub::BackendResponse,
    BuiltinSub::BackendError,
    BuiltinSub::Init,
    BuiltinSub::Fini,
];

/// A return action (`return (ACTION)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Abandon,
    Deliver,
    Error,
    Fail,
    Fetch,
    Hash,
    Lookup,
    Ok,
    Pass,
    Pipe,
    Purge,
    Restart,
    Retry,
    Synth,
    Vcl,
}

/// Every action, sorted by name (the order Varnish lists legal returns in).
pub const ALL_ACTIONS: [Action; 15] = [
    Action::Abandon,
    Action::Deliver,
    Action::Error,
    Action::Fail,
    Action::Fetch,
    Action::Hash,
    Action::Lookup,
    Action::Ok,
    Action::Pass,
    Action::Pipe,
    Action::Purge,
    Action::Restart,
    Action::Retry,
    Action::Synth,
    Action::Vcl,
];

/// Arguments an action takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionArgs {
    /// No parentheses allowed.
    None,
    /// `(INT [, STRING])`: `synth` and `error`.
    StatusReason,
    /// `(LABEL)`: a `vcl` label name.
    Label,
}

impl Action {
    /// The action's keyword.
    pub fn name(self) -> &'static str {
        match self {
            Action::Abandon => "abandon",
            Action::Deliver => "deliver",
            Action::Error => "error",
            Action::Fail => "fail",
            Action::Fetch => "fetch",
            Action::Hash => "hash",
            Action::Lookup => "lookup",
            Action::Ok => "ok",
            Action::Pass => "pass",
            Action::Pipe => "pipe",
            Action::Purge => "purge",
            Action::Restart => "restart",
            Action::Retry => "retry",
            Action::Synth => "synth",
            Action::Vcl => "vcl",
        }
    }

    /// Looks an action up by keyword.
    pub fn from_name(name: &str) -> Option<Action> {
        ALL_ACTIONS.iter().copied().find(|a| a.name() == name)
    }

    /// The arguments this action takes.
    pub fn args(self) -> ActionArgs {
        match self {
            Action::Synth | Action::Error => ActionArgs::StatusReason,
            Action::Vcl => ActionArgs::Label,
            _ => ActionArgs::None,
        }
    }

    /// Bit for `ActionMask`.
    pub const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of return actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ActionMask(pub u16);

impl ActionMask {
    /// Builds a mask from a list of actions.
    pub const fn of(actions: &[Action]) -> ActionMask {
        let mut bits = 0;
        let mut i = 0;
        while i < actions.len() {
            bits |= actions[i].bit();
            i += 1;
        }
        ActionMask(bits)
    }

    /// Membership test.
    pub fn contains(self, a: Action) -> bool {
        self.0 & a.bit() != 0
    }

    /// The actions in the set, sorted by name.
    pub fn iter(self) -> impl Iterator<Item = Action> {
        ALL_ACTIONS.into_iter().filter(move |a| self.contains(*a))
    }
}

impl BuiltinSub {
    /// The subroutine's VCL name (`vcl_recv`, ...).
    pub fn name(self) -> &'static str {
        match self {
            BuiltinSub::Recv => "vcl_recv",
            BuiltinSub::Pipe => "vcl_pipe",
            BuiltinSub::Pass => "vcl_pass",
            BuiltinSub::Hash => "vcl_hash",
            BuiltinSub::Purge => "vcl_purge",
            BuiltinSub::Miss => "vcl_miss",
            BuiltinSub::Hit => "vcl_hit",
            BuiltinSub::Deliver => "vcl_deliver",
            BuiltinSub::Synth => "vcl_synth",
            BuiltinSub::BackendFetch => "vcl_backend_fetch",
            BuiltinSub::BackendResponse => "vcl_backend_response",
            BuiltinSub::BackendError => "vcl_backend_error",
            BuiltinSub::Init => "vcl_init",
            BuiltinSub::Fini => "vcl_fini",
        }
    }

    /// The name without the `vcl_` prefix (`recv`, `backend_fetch`, ...).
    pub fn short_name(self) -> &'static str {
        &self.name()[4..]
    }

    /// Looks a built-in subroutine up by its full name (`vcl_recv`).
    pub fn from_name(name: &str) -> Option<BuiltinSub> {
        ALL_BUILTIN_SUBS.iter().copied().find(|s| s.name() == name)
    }

    /// Bit for `SubMask`.
    pub const fn bit(self) -> u16 {
        1 << (self as u16)
    }

    /// Index (0..14), usable to index per-sub tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The return actions legal in this subroutine (Varnish 7.1).
    pub fn actions(self) -> ActionMask {
        use Action::*;
        match self {
            BuiltinSub::Recv => {
                ActionMask::of(&[Fail, Synth, Pass, Pipe, Hash, Purge, Restart, Vcl])
            }
            BuiltinSub::Pipe => ActionMask::of(&[Fail, Synth, Pipe]),
            BuiltinSub::Pass => ActionMask::of(&[Fail, Synth, Restart, Fetch]),
            BuiltinSub::Hash => ActionMask::of(&[Fail, Lookup]),
            BuiltinSub::Purge => ActionMask::of(&[Fail, Synth, Restart]),
            BuiltinSub::Miss => ActionMask::of(&[Fail, Synth, Restart, Pass, Fetch]),
            BuiltinSub::Hit => ActionMask::of(&[Fail, Synth, Restart, Pass, Deliver]),
            BuiltinSub::Deliver => ActionMask::of(&[Fail, Synth, Restart, Deliver]),
            BuiltinSub::Synth => ActionMask::of(&[Fail, Restart, Deliver]),
            BuiltinSub::BackendFetch => ActionMask::of(&[Fail, Fetch, Abandon, Error]),
            BuiltinSub::BackendResponse => {
                ActionMask::of(&[Fail, Deliver, Retry, Abandon, Pass, Error])
            }
            BuiltinSub::BackendError => ActionMask::of(&[Fail, Deliver, Retry, Abandon]),
            BuiltinSub::Init => ActionMask::of(&[Ok, Fail]),
            BuiltinSub::Fini => ActionMask::of(&[Ok]),
        }
    }
}

impl fmt::Display for BuiltinSub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of built-in subroutines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SubMask(pub u16);

impl SubMask {
    /// The empty set.
    pub const NONE: SubMask = SubMask(0);
    /// Varnish's "client": every client-side subroutine.
    pub const CLIENT: SubMask = SubMask(
        BuiltinSub::Recv.bit()
            | BuiltinSub::Pipe.bit()
            | BuiltinSub::Pass.bit()
            | BuiltinSub::Hash.bit()
            | BuiltinSub::Purge.bit()
            | BuiltinSub::Miss.bit()
            | BuiltinSub::Hit.bit()
            | BuiltinSub::Deliver.bit()
            | BuiltinSub::Synth.bit(),
    );
    /// Varnish's "backend": the `vcl_backend_*` subroutines.
    pub const BACKEND: SubMask = SubMask(
        BuiltinSub::BackendFetch.bit()
            | BuiltinSub::BackendResponse.bit()
            | BuiltinSub::BackendError.bit(),
    );
    /// "client, backend": every per-task subroutine.
    pub const BOTH: SubMask = SubMask(Self::CLIENT.0 | Self::BACKEND.0);
    /// `vcl_init` and `vcl_fini`.
    pub const HOUSEKEEPING: SubMask = SubMask(BuiltinSub::Init.bit() | BuiltinSub::Fini.bit());
    /// "all": every built-in subroutine.
    pub const ALL: SubMask = SubMask(Self::BOTH.0 | Self::HOUSEKEEPING.0);

    /// Builds a mask from a list of subroutines.
    pub const fn of(subs: &[BuiltinSub]) -> SubMask {
        let mut bits = 0;
        let mut i = 0;
        while i < subs.len() {
            bits |= subs[i].bit();
            i += 1;
        }
        SubMask(bits)
    }

    /// Set union.
    pub const fn union(self, other: SubMask) -> SubMask {
        SubMask(self.0 | other.0)
    }

    /// Set intersection.
    pub const fn intersect(self, other: SubMask) -> SubMask {
        SubMask(self.0 & other.0)
    }

    /// Membership test.
    pub fn contains(self, s: BuiltinSub) -> bool {
        self.0 & s.bit() != 0
    }

    /// True if the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The subroutines in the set, in state-machine order.
    pub fn iter(self) -> impl Iterator<Item = BuiltinSub> {
        ALL_BUILTIN_SUBS
            .into_iter()
            .filter(move |s| self.contains(*s))
    }

    /// Human description using Varnish's group names where they apply
    /// (`all`, `client, backend`, `client`, `backend`, or a list).
    pub fn describe(self) -> String {
        if self == Self::ALL {
            return "all".into();
        }
        let mut parts = Vec::new();
        let mut rest = self;
        if rest.0 & Self::CLIENT.0 == Self::CLIENT.0 {
            parts.push("client".to_string());
            rest = SubMask(rest.0 & !Self::CLIENT.0);
        }
        let mut backend = false;
        if rest.0 & Self::BACKEND.0 == Self::BACKEND.0 {
            backend = true;
            rest = SubMask(rest.0 & !Self::BACKEND.0);
        }
        parts.extend(rest.iter().map(|s| s.name().to_string()));
        if backend {
            parts.push("backend".into());
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for s in ALL_BUILTIN_SUBS {
            assert_eq!(BuiltinSub::from_name(s.name()), Some(s));
        }
        assert_eq!(BuiltinSub::BackendFetch.short_name(), "backend_fetch");
        assert_eq!(BuiltinSub::from_name("vcl_foo"), None);
        for a in ALL_ACTIONS {
            assert_eq!(Action::from_name(a.name()), Some(a));
        }
    }

    #[test]
    fn actions_match_varnish() {
        let recv: Vec<_> = BuiltinSub::Recv
            .actions()
            .iter()
            .map(|a| a.name())
            .collect();
        assert_eq!(
            recv,
            [
                "fail", "hash", "pass", "pipe", "purge", "restart", "synth", "vcl"
            ]
        );
        assert!(BuiltinSub::Init.actions().contains(Action::Fail));
        assert!(!BuiltinSub::Fini.actions().contains(Action::Fail));
        assert!(BuiltinSub::BackendFetch.actions().contains(Action::Error));
        assert!(!BuiltinSub::BackendError.actions().contains(Action::Error));
        assert!(!BuiltinSub::Hit.actions().contains(Action::Lookup));
    }

    #[test]
    fn masks() {
        assert!(SubMask::CLIENT.contains(BuiltinSub::Synth));
        assert!(!SubMask::CLIENT.contains(BuiltinSub::BackendFetch));
        assert_eq!(SubMask::ALL.describe(), "all");
        assert_eq!(SubMask::BOTH.describe(), "client, backend");
        assert_eq!(
            SubMask::of(&[BuiltinSub::Pipe])
                .union(SubMask::BACKEND)
                .describe(),
            "vcl_pipe, backend"
        );
        assert_eq!(SubMask::ALL.iter().count(), 14);
    }
}
