#!/usr/bin/env bash
# The whole test suite, installing what it needs first. `.ci/run` calls this.
#
#   ./scripts/test.sh
#
# 1. the pinned Rust toolchain (rust-toolchain.toml) and its wasm32-wasip2 target,
#    and bubblewrap for the sandbox tests
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

# The OS sandbox tests need bubblewrap (Landlock comes with the kernel).
if ! command -v bwrap >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq bubblewrap
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq bubblewrap
  fi
fi

cargo test --workspace --all-targets --locked
(cd guests/rust && cargo test --locked --target-dir ../../target/guests-native)
