#!/usr/bin/env bash
# SIGKILL `rlun mount` at random moments of buffered and O_DIRECT fio
# writes, ROUNDS times (default 200), and fail if any round leaves a dead
# mount ("Transport endpoint is not connected") or a hung fio 5 s after the
# kill. The short version (6 rounds) runs with `cargo test --test fuse_kill`.
#
#   sudo scripts/fuse-kill-stress.sh [ROUNDS]
#
# Needs root, tgtd, fio and fusermount3 (scripts/install-test-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-200}
RLUN_KILL_ROUNDS=$rounds exec cargo test --test fuse_kill -- --nocapture
