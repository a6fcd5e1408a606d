//! Object heads, lookup, waiting lists, expiry and bans.
