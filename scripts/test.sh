#!/usr/bin/env bash
# The whole test suite, installing what it needs first. `.ci/run` calls this.
#
#   ./scripts/test.sh
#
# 1. the pinned Rust toolchain (rust-toolchain.toml) and its wasm32-wasip2 target
# 2. host unit tests, guests built from source by build scripts, integration and
#    CLI tests, and the benchmark run once as a smoke test (cargo test --all-targets)
# 3. the guests' own native unit tests
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if ! rustup toolchain list | grep -q "^$toolchain"; then
  rustup toolchain install "$toolchain" --profile minimal
fi
rustup target add wasm32-wasip2 --toolchain "$toolchain"

cargo test --workspace --all-targets --locked
(cd guests/rust && cargo test --locked --target-dir ../../target/guests-native)
