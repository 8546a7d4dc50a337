#!/usr/bin/env bash
# rlun's test command: the one the README names and CI runs (through .ci/run).
#
#   scripts/test.sh              install test deps, lint, build, run all tests
#   RLUN_SKIP_LAB=1 scripts/test.sh   (once the VM lab exists) skip it
#
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "install test dependencies"
scripts/install-test-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --all-targets -- -D warnings

# Integration tests run the debug binary cargo builds for them
# (CARGO_BIN_EXE_rlun; dependencies are optimised by the dev profile). The
# release build is only checked in CI, to keep local loops short;
# benches/compare.sh builds it itself.
if [ "${CI:-}" = "true" ]; then
    step "cargo build --release"
    cargo build --release
fi

# Unit tests, integration tests against private tgtd instances, etc.
# Each binary prints a "test result:" line.
step "cargo test"
cargo test --all-targets
cargo test --doc

# VM lab (kernel paths: iSER over soft-RoCE to LIO, kernel nbd) goes here,
# skipped when RLUN_SKIP_LAB=1.

step "all tests passed"
