//! A router: picks a backend by URL with patterns compiled once in
//! `main`, and keys the cache on the route.

use std::sync::OnceLock;

use lacquer_guest::{Regex, backend, hash_data, log, req};

static ROUTES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();

/// Runs once at load; the compiled pattern ids live in the snapshot.
#[unsafe(no_mangle)]
pub extern "C" fn main() {
    let routes = [("^/api/", "api"), ("\\.(css|js|png|jpg)$", "static")]
        .into_iter()
        .filter_map(|(p, b)| Regex::new(p).map(|r| (r, b)))
        .collect();
    let _ = ROUTES.set(routes);
}

#[unsafe(no_mangle)]
pub extern "C" fn on_recv() {
    let url = req().url();
    let to = ROUTES
        .get()
        .and_then(|rs| rs.iter().find(|(r, _)| r.is_match(&url)))
        .map_or("default", |(_, b)| b);
    if !backend(to) {
        log("router: backend refused (max_backends)");
    }
    req().set("X-Route", to);
    hash_data(to.as_bytes());
}
