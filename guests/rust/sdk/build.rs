//! `wit_bindgen::generate!` reads the contract at compile time without telling cargo,
//! so a changed contract would leave stale bindings (and components the host
//! refuses with a type mismatch). This makes cargo rebuild the SDK when it changes.

fn main() {
    println!("cargo:rerun-if-changed=../../../wit/released/0.4.0");
}
