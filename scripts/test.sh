#!/usr/bin/env bash
# The whole test suite, installing what it needs first. `.ci/run` calls this.
#
#   ./scripts/test.sh
#
# 0. the README's first commands, as written, on the toolchain as it is
# 1. the pinned Rust toolchain (rust-toolchain.toml) and its wasm32-wasip2 target
#    (and wasm32-unknown-unknown, for the Extism plugin the comparison bench runs),
#    componentize-py for the Python guests, Node.js (when missing) and the npm
#    packages for the JavaScript guests, bubblewrap for the sandbox tests, and
#    docker-registry (the CNCF distribution registry) and skopeo (another OCI
#    client) for the registry tests, chromium with the pinned playwright-core
#    (host/tests/browser) for the dashboard's browser tests, and the pinned `claude`
#    CLI and the pinned `codex` CLI (host/tests/agents) for the egress and
#    Codex hook tests
# 2. house habits: rustfmt's formatting, and clippy clean with -D warnings and every
#    unsafe block explained (clippy::undocumented_unsafe_blocks)
# 3. host unit tests, guests built from source by build scripts, integration and
#    CLI tests, and the benchmarks run once as smoke tests (cargo test --all-targets),
#    then the serve suite once more on a PostgreSQL store (LOOPBOX_TEST_ENGINE)
#    and little-loops' shipped loops validated (tests/conformance/corpus.py)
# 4. the guests' own native unit tests (Rust, and the Python CCW logic), and the
#    Python and JavaScript SDKs' (with mypy and tsc)
# 5. the benchmarks built in release mode (cargo bench --no-run), as they run for BENCHMARKS.md
set -euo pipefail
cd "$(dirname "$0")/.."

# On CI (a fresh clone on a small disk) incremental caches never pay for themselves,
# and the debug build is deleted before the release one (step 5).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
# A failing test's message, not pages of backtrace, is what CI's excerpt of the
# log must show (rerun one test with RUST_BACKTRACE=1 for its backtrace).
export RUST_BACKTRACE=0

toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if ! rustup toolchain list | grep -q "^$toolchain"; then
  rustup toolchain install "$toolchain" --profile minimal
fi

# The README's first commands, as written and as a newcomer runs them: before
# anything below is installed (no wasm target added by hand, no componentize-py,
# no npm packages), so a regression in the first experience fails here.
sed -n '/^## First commands/,/^```$/p' README.md | grep -E '^(cargo|rm) ' | grep -v 'scripts/test.sh' | while read -r cmd; do
  echo "+ $cmd" >&2
  bash -c "$cmd" </dev/null
done

rustup target add wasm32-wasip2 wasm32-unknown-unknown --toolchain "$toolchain"
rustup component add clippy rustfmt --toolchain "$toolchain"

# Python guests are built with a pinned componentize-py.
cpy="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/componentize-py"
if ! "$cpy" --version 2>/dev/null | grep -q "0.25.1"; then
  python3 -m pip install --quiet --disable-pip-version-check componentize-py==0.25.1
  if command -v pyenv >/dev/null; then pyenv rehash; fi
fi


# pytest, which little-loops' pre-patch check runs (`python -m pytest`) in the
# conformance cases and fsm::prepatch, in both tools.
if ! python3 -c 'import pytest' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check pytest==8.3.5
fi

# Debian packages: bubblewrap for the OS sandbox tests (Landlock comes with the
# kernel), Node.js with npm for the JavaScript guests when they are missing, and
# an OCI registry for host/tests/it/registry.rs, which starts it on loopback.
apt_install() {
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "$@"
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq "$@"
  fi
}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then apt_install nodejs npm; fi
if ! command -v bwrap >/dev/null; then apt_install bubblewrap; fi
if ! [ -x /usr/bin/docker-registry ]; then apt_install docker-registry; fi
if ! command -v skopeo >/dev/null; then apt_install skopeo; fi
# The dashboard's browser tests drive Debian's chromium (no browser download).
if ! [ -x /usr/bin/chromium ]; then apt_install chromium; fi
# PostgreSQL for the PostgreSQL store's tests (db::engine::pg_server starts one per
# test binary on loopback). Its server refuses to run as root: the tests run it as
# the system user loopbox-pg when they run as root.
if ! [ -x /usr/lib/postgresql/15/bin/postgres ] && ! command -v postgres >/dev/null; then apt_install postgresql; fi
# The egress tests run real clients in the sandbox: curl, git and Debian's python3.
if ! command -v curl >/dev/null; then apt_install curl; fi
if ! [ -x /usr/bin/python3 ]; then apt_install python3; fi
# The PostgreSQL TLS test makes its certificates with openssl.
if ! command -v openssl >/dev/null; then apt_install openssl; fi
if [ "$(id -u)" = 0 ] && ! id loopbox-pg >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin loopbox-pg
fi

# JavaScript guests are built with the componentize-js pinned in the lockfile. Not
# `npm ci`: it rejects lockfiles written on one platform that lack other platforms'
# optional native packages; `install --no-save` installs the locked versions and
# leaves the lockfile alone.
(cd guests/js && npm install --no-save --no-audit --no-fund --loglevel=error)
# playwright-core, pinned in host/tests/browser's lockfile (no native packages: `npm ci`).
(cd host/tests/browser && npm ci --no-audit --no-fund --loglevel=error)
# The real `claude` and `codex` CLIs, pinned in host/tests/agents' lockfile (which lists every
# platform's native package, so `npm ci` takes it), for the egress tests
# (host/tests/it/egress_clients.rs), which run claude against a local fake
# provider, and the Codex hook tests (host/tests/it/hook/codex.rs). Claude's
# postinstall puts the native binary in place; `--version` shows it did (in a
# throwaway home, with every non-essential request of claude's turned off).
(cd host/tests/agents && npm ci --no-audit --no-fund --loglevel=error \
  && HOME="$(mktemp -d)" DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
     node_modules/.bin/claude --version)

cargo fmt --all --check
(cd guests/rust && cargo fmt --all --check)
cargo clippy --workspace --all-targets --locked -- -D warnings -W clippy::undocumented_unsafe_blocks
cargo test --workspace --all-targets --locked
# The serve suite again on a PostgreSQL store (one PostgreSQL for the binary, a
# schema per server, `loopbox worker` processes driving the runs). The tests of
# the shared store itself (failover, fencing, PostgreSQL restarts, runs resume)
# ran above already: they make their own stores whatever the engine.
LOOPBOX_TEST_ENGINE=postgres cargo test -p loopbox --test it --locked serve:: -- --skip serve::scale:: --skip serve::pg_restart::
# little-loops' own loops (its 1.167.0 wheel, fetched from PyPI): all 109 it ships
# must validate, and all 103 of the 1.156.0 wheel still do.
python3 tests/conformance/corpus.py --loopbox "${CARGO_TARGET_DIR:-target}/debug/loopbox" --min 109
python3 tests/conformance/corpus.py --loopbox "${CARGO_TARGET_DIR:-target}/debug/loopbox" --version 1.156.0 --min 103
(cd guests/rust && cargo test --locked --target-dir ../../target/guests-native)
(cd guests/python/ccw && python3 -B -m unittest -q)
# The Python and JavaScript SDKs: their unit tests (the Python ones on the bindings
# componentize-py generates from wit/), mypy over the Python SDK and the `loopbox new`
# template, tsc over the SDK's TypeScript declarations and the TypeScript guest.
(cd guests/python/sdk && python3 -B -m unittest -q)
if ! python3 -m mypy --version 2>/dev/null | grep -q "^mypy 2.4.1 "; then
  python3 -m pip install --quiet --disable-pip-version-check mypy==2.4.1
fi
pybindings=$(mktemp -d)
"$cpy" -d wit -w loop-policy bindings "$pybindings" >/dev/null
MYPYPATH="$pybindings:guests/python/sdk" python3 -m mypy --strict --cache-dir "$pybindings/.mypy_cache" \
  guests/python/sdk/loopbox_policy host/templates/python/app.py
rm -rf "$pybindings"
(cd guests/js/sdk && node --test)
(cd guests/js && node_modules/.bin/tsc -p .)
if [ -n "${CI:-}" ]; then
  rm -rf "${CARGO_TARGET_DIR:-target}/debug" target/guests-native
  df -h "${CARGO_TARGET_DIR:-target}" | tail -1 | awk '{print "disk before the release build: " $4 " free"}'
fi
cargo bench --workspace --no-run --locked
