//! A header rewriter: normalises the request on the way in and strips
//! what the origin should not reveal on the way out.

use std::sync::OnceLock;

use lacquer_guest::{Regex, req, resp};

/// Tracking parameters, compiled in `main` (kept in the snapshot).
static TRACKING: OnceLock<Regex> = OnceLock::new();

#[unsafe(no_mangle)]
pub extern "C" fn main() {
    if let Some(r) = Regex::new("([?&])(utm_[a-z]+|fbclid)=[^&]*") {
        let _ = TRACKING.set(r);
    }
}

fn tracking() -> Option<Regex> {
    TRACKING.get().copied()
}

#[unsafe(no_mangle)]
pub extern "C" fn on_recv() {
    let r = req();
    if let Some(host) = r.get("Host") {
        r.set("Host", &host.to_ascii_lowercase());
    }
    r.unset("X-Forwarded-Host");
    r.set("X-Forwarded-Proto", "https");
    if let Some(t) = tracking() {
        let url = t.replace(&r.url(), "$1", true);
        r.set_url(url.replace("?&", "?").trim_end_matches(['?', '&']));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn on_deliver() {
    let r = resp();
    r.unset("Server");
    r.unset("X-Powered-By");
    r.set("X-Tenant", "rewriter");
}
