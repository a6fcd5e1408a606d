# Each Host is a tenant with its own WebAssembly program (vmod wasm).
# Build the programs first (see examples/tenants/Cargo.toml), then run
#   lacquerd -a 127.0.0.1:6081 -f "$PWD/examples/tenants/tenants.vcl" -n /tmp/lq-tenants
# from the repository root (the JSON names files relative to itself).
vcl 4.1;
import wasm;

backend default { .host = "127.0.0.1"; .port = "8080"; }
backend api { .host = "127.0.0.1"; .port = "8081"; }
backend static { .host = "127.0.0.1"; .port = "8082"; }

sub vcl_init {
    wasm.load_tenants("examples/tenants/tenants.json");
}

sub vcl_recv {
    if (wasm.fork(req.http.Host)) {
        # A tenant that traps or runs out of budget fails the request
        # here: vcl_recv's failure is a 503, other tenants are unaffected.
        wasm.run();
        if (wasm.want_result() == "backend") {
            # A cacheable forge: stored like a backend response (made in
            # vcl_backend_error below on a miss), later requests hit.
            set req.backend_hint = wasm.vm_backend();
            return (hash);
        }
        if (wasm.want_result() == "synth") {
            return (synth(wasm.want_status()));
        }
        if (wasm.want_result() == "pass") {
            return (pass);
        }
    }
}

sub vcl_hash {
    if (wasm.active()) {
        wasm.apply_hash();
    }
}

sub vcl_deliver {
    if (wasm.active()) {
        wasm.run();
    }
}

sub vcl_backend_error {
    # A fetch through wasm.vm_backend(): the tenant's response, with its TTL.
    if (wasm.run() == 1) {
        return (deliver);
    }
}

sub vcl_synth {
    if (wasm.active()) {
        # Writes a response the tenant forged into resp.
        wasm.run();
        return (deliver);
    }
}
