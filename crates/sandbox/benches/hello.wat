;; The hello tenant in WAT, for the sandbox bench and the call_cost example:
;; on_recv adds X-Hello and forges a small JSON; empty does nothing;
;; read1000 reads a header 1,000 times (one host call each).
(module
  (import "lacquer" "field_get" (func $field_get (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "header_append" (func $header_append (param i32 i32 i32) (result i32)))
  (import "lacquer" "header_get" (func $header_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "forge" (func $forge (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1 16)
  (data (i32.const 0) "X-Hello: url=")
  (data (i32.const 64) "application/json")
  (data (i32.const 96) "{\"message\":\"Hello from WebAssembly!\"}")
  (data (i32.const 200) "Accept")
  (func (export "on_recv")
    (local $n i32)
    (local.set $n (call $field_get (i32.const 0) (i32.const 0) (i32.const 13) (i32.const 1000)))
    (drop (call $header_append (i32.const 0) (i32.const 0) (i32.add (i32.const 13) (local.get $n))))
    (drop (call $forge (i32.const 0) (i32.const 200) (i32.const 64) (i32.const 16) (i32.const 96) (i32.const 37))))
  (func (export "empty"))
  (func (export "read1000")
    (local $i i32)
    (loop $l
      (drop (call $header_get (i32.const 0) (i32.const 200) (i32.const 6) (i32.const 2048) (i32.const 256)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 1000)))))
)
