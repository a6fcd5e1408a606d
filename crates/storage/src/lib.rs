//! Storage backends (stevedores): where object bodies live.
