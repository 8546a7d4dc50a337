#!/usr/bin/env bash
# rlun's test command: the one the README names and CI runs (through .ci/run).
#
#   scripts/test.sh              install test deps, lint, build, run all tests
#   RLUN_SKIP_LAB=1 scripts/test.sh   the same without the VM lab (tests/lab)
#   RLUN_SKIP_PACKAGING=1 ...         without tests/packaging (the .deb/.rpm
#                                     build, install and checks; needs root)
#   RLUN_SOAK=0 ...                   without the 2-minute fault soak
#
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step is stamped with the seconds since the start, so a slow CI run
# shows which step grew.
started=$(date +%s)
step() { printf '\n==> [%4d s] %s\n' "$(($(date +%s) - started))" "$*"; }

step "install test dependencies"
scripts/install-test-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

# Every crate of the workspace: rlun, rlun-iscsi (the sans-IO core) and
# rlun-sys (the one crate with unsafe code); also rlun without its `rdma`
# feature, which drops the iSER transport.
step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p rlun --no-default-features --all-targets -- -D warnings

# Integration tests run the debug binary cargo builds for them
# (CARGO_BIN_EXE_rlun; dependencies are optimised by the dev profile). The
# release build is only checked in CI, to keep local loops short;
# benches/compare.sh builds it itself.
if [ "${CI:-}" = "true" ]; then
    step "cargo build --release"
    cargo build --release
fi

# Unit tests of the three crates, integration tests against private tgtd
# instances, the architecture check (tests/architecture: layers, import
# cycles, file sizes, unsafe only in rlun-sys), doc tests (the worked
# example of rlun-iscsi's crate docs among them). Each binary prints a
# "test result:" line.
step "cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc

# The deterministic benchmark (benches/instructions.sh) in its short form:
# each case once, briefly, against a private tgtd, with the binary cargo test
# built. It checks that the script works and prints a well-formed table of
# positive figures, not what the figures are (they are only meaningful from a
# release build and the full run lengths). Needs root (tgtd).
if [ "$(id -u)" != 0 ]; then
    step "benches/instructions.sh --quick: skipped (needs root)"
else
    step "benches/instructions.sh --quick"
    instr_bin=target/debug/rlun
    [ "${CI:-}" = "true" ] && instr_bin=target/release/rlun
    instr_out=$(RLUN=$instr_bin benches/instructions.sh --quick)
    printf '%s\n' "$instr_out"
    python3 - "$instr_out" <<'PY'
import sys
rows = [l.split("|") for l in sys.argv[1].splitlines() if l.count("|") >= 2 and not l.startswith("case ")]
cases = {}
for r in rows:
    figures = r[2].split() + (r[3].split() if len(r) > 3 else [])
    try:
        ok = len(figures) in (3, 6) and all(float(f) > 0 for f in figures)
    except ValueError:
        ok = False
    if not ok:
        sys.exit(f"instructions.sh: bad row {'|'.join(r)!r}")
    cases.setdefault(r[0].strip(), []).append(len(figures))
# Each case: its peer's row (3 figures), then rlun's with the 3 ratios.
if len(cases) < 3 or any(v != [3, 6] for v in cases.values()):
    sys.exit(f"instructions.sh: expected a peer row and an rlun row per case, got {cases}")
# Every case is there, or says why it was skipped ("case | SKIP: reason").
skipped = {l.split("|")[0].strip() for l in sys.argv[1].splitlines() if l.count("|") == 1 and "| SKIP: " in l}
want = {"randread 4k", "read 128k", "cp 1M", "serve 4k", "serve-hit 4k", "mount 4k"}
if want - set(cases) - skipped:
    sys.exit(f"instructions.sh: cases missing from the table: {sorted(want - set(cases) - skipped)}")
PY
fi

# Coverage-guided fuzzing (fuzz/, scripts/fuzz.sh): every parser that takes
# network or user input runs under libFuzzer for a short fixed time, all
# targets side by side on the machine's cores. Needs a nightly toolchain:
# without one the script prints why it skips and succeeds. A crash fails the
# run and names its reproducer. RLUN_FUZZ_SECONDS sets the time per target.
step "fuzz (${RLUN_FUZZ_SECONDS:-10} s per target)"
RLUN_FUZZ_SEED=${RLUN_FUZZ_SEED:-1} RLUN_FUZZ_JOBS=${RLUN_FUZZ_JOBS:-$(nproc)} scripts/fuzz.sh "${RLUN_FUZZ_SECONDS:-10}"

# Fault soak (scripts/soak.sh): fio verify through a mount and an NBD export
# while tgtd is killed, reset, paused, degraded and corrupted; fails on any
# I/O or verify error, an unclean rlun exit or RSS growth. Two minutes here
# (one pass over every fault); RLUN_SOAK=10m runs longer, RLUN_SOAK=0 skips.
# Needs root (network namespace, FUSE mount).
if [ "${RLUN_SOAK:-2m}" = 0 ]; then
    step "fault soak: skipped (RLUN_SOAK=0)"
elif [ "$(id -u)" != 0 ]; then
    step "fault soak: skipped (needs root)"
else
    step "fault soak (${RLUN_SOAK:-2m})"
    scripts/soak.sh "${RLUN_SOAK:-2m}"
fi

# Packaging (tests/packaging/run.sh): build the .deb and .rpm, inspect them
# (lintian, rpm), install the .deb, run it as root, under a test
# NOTIFY_SOCKET as the units run it and as an unprivileged user, purge it,
# run the .rpm's binary. Needs root; the packages are built with dpkg-deb
# and rpmbuild (scripts/package.sh). In CI it
# packages the release binary built above. RLUN_SKIP_PACKAGING=1 skips it.
if [ "${RLUN_SKIP_PACKAGING:-}" = 1 ]; then
    step "packaging: skipped (RLUN_SKIP_PACKAGING=1)"
else
    step "packaging (tests/packaging/run.sh)"
    RLUN_PACKAGE_NO_BUILD=$([ "${CI:-}" = "true" ] && echo 1 || echo 0) tests/packaging/run.sh
fi

# VM lab (tests/lab): the kernel paths the host kernel lacks (soft-RoCE, LIO
# iSCSI/iSER target, kernel nbd, open-iscsi) in one small VM, one boot for all
# scenarios. RLUN_SKIP_LAB=1 skips it for quick local loops. In CI (or with
# RLUN_LAB_SELFTEST=1) the same run also proves that a broken scenario and a
# VM that does not boot fail the runner.
step "VM lab runner unit tests"
python3 -m unittest discover -s tests/lab -p 'test_*.py'
if [ "${RLUN_SKIP_LAB:-}" = 1 ]; then
    step "VM lab: skipped (RLUN_SKIP_LAB=1)"
else
    if [ "${CI:-}" = "true" ] || [ "${RLUN_LAB_SELFTEST:-}" = 1 ]; then
        # One boot for every scenario plus one broken on purpose: the run
        # must pass all but that one, and report that one readably; then a
        # VM that does not boot must fail the runner (tests/lab/selftest.sh).
        step "VM lab (tests/lab/selftest.sh: every scenario, one broken on purpose, and a failed boot)"
        tests/lab/selftest.sh
    else
        step "VM lab (tests/lab/lab.py)"
        python3 tests/lab/lab.py
    fi
fi

step "all tests passed"
