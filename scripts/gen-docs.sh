#!/usr/bin/env bash
# Regenerate what is generated from the clap definitions and committed:
# the man pages (man/) and the shell completion scripts
# (packaging/completions/). tests/man_pages.rs fails when they are stale.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q
bin=target/debug/rlun
"$bin" generate-man man
mkdir -p packaging/completions
"$bin" completions bash >packaging/completions/rlun.bash
"$bin" completions zsh >packaging/completions/_rlun
"$bin" completions fish >packaging/completions/rlun.fish
echo "regenerated man/ and packaging/completions/"
