//! Policies shipped inside the `loopbox` binary, addressed as `builtin:NAME`.
//! The build script compiles them from `guests/rust` to components.

/// `(name, component bytes)` for each builtin.
pub const BUILTINS: &[(&str, &[u8])] = &[
    (
        "ralph",
        include_bytes!(concat!(env!("OUT_DIR"), "/ralph.wasm")),
    ),
    (
        "todo-enforcer",
        include_bytes!(concat!(env!("OUT_DIR"), "/todo-enforcer.wasm")),
    ),
    (
        "fix-forward",
        include_bytes!(concat!(env!("OUT_DIR"), "/fix-forward.wasm")),
    ),
    ("fsm", include_bytes!(concat!(env!("OUT_DIR"), "/fsm.wasm"))),
];

pub fn get(name: &str) -> Option<&'static [u8]> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

pub fn names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}
