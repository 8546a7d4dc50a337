#!/usr/bin/env bash
# Coverage-guided fuzzing of rlun's parsers (the targets in fuzz/).
#
#   scripts/fuzz.sh                 every target for 20 s (scripts/test.sh runs 10 s: CI's short version)
#   scripts/fuzz.sh 3600            every target for an hour
#   scripts/fuzz.sh 600 session pdu only these targets, 10 minutes each
#
# Environment:
#   RLUN_FUZZ_JOBS=N          targets run side by side (default 1)
#   RLUN_FUZZ_TOOLCHAIN=name  rustup toolchain to build with (default nightly)
#   RLUN_FUZZ_SEED=N          libFuzzer's -seed (default 0: random)
#   RLUN_FUZZ_SANITIZER=address   also build with AddressSanitizer (slower;
#                             rlun's parsers are safe Rust, so the default is
#                             none: panics, overflows and aborts are what the
#                             fuzzer catches)
#
# libFuzzer needs a nightly compiler (sanitizer-coverage flags). When none is
# installed the script says so and exits 0: it never downloads a toolchain.
# It drives libfuzzer-sys with `cargo +nightly build` itself (the flags
# cargo-fuzz would pass), so no extra tool has to be installed.
#
# Per target it prints executions per second, coverage (libFuzzer's cov/ft),
# corpus growth and crashes. New inputs go to fuzz/target/corpus/<target>
# (not committed; copy good ones to fuzz/corpus/<target> by hand), crashes to
# fuzz/artifacts/<target>/. Exits non-zero when any target crashed, naming
# the reproducer and the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-20}
shift || true
ALL_TARGETS=(pdu text negotiate login session scsi url config nbd iser_header)
if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
else
    TARGETS=("${ALL_TARGETS[@]}")
fi
JOBS=${RLUN_FUZZ_JOBS:-1}
TOOLCHAIN=${RLUN_FUZZ_TOOLCHAIN:-nightly}
# libFuzzer's random seed; 0 lets it pick one. The test command passes a
# fixed one so that its short run explores the same inputs every time.
SEED=${RLUN_FUZZ_SEED:-0}
SANITIZER=${RLUN_FUZZ_SANITIZER:-none}

case "$SECONDS_PER_TARGET" in
'' | *[!0-9]* | 0)
    echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]  (targets: ${ALL_TARGETS[*]})" >&2
    exit 2
    ;;
esac
for t in "${TARGETS[@]}"; do
    if [ ! -f "fuzz/fuzz_targets/$t.rs" ]; then
        echo "fuzz: unknown target '$t' (targets: ${ALL_TARGETS[*]})" >&2
        exit 2
    fi
done

# Never let rustup fetch a toolchain on our behalf.
export RUSTUP_AUTO_INSTALL=0
if ! command -v rustup >/dev/null 2>&1; then
    echo "fuzz: SKIPPED: rustup is not installed, so there is no nightly toolchain to build libFuzzer targets with"
    exit 0
fi
if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
    echo "fuzz: SKIPPED: no '$TOOLCHAIN' Rust toolchain on this machine (rustup toolchain list:" \
        "$(rustup toolchain list 2>/dev/null | tr '\n' ' ')); libFuzzer's coverage flags need one," \
        "and this script does not download toolchains"
    exit 0
fi
HOST=$(rustup run "$TOOLCHAIN" rustc -vV | sed -n 's/^host: //p')

# The flags cargo-fuzz uses: SanitizerCoverage with 8-bit counters, the PC
# table and comparison tracing (libFuzzer's value profile), plus debug
# assertions and overflow checks so arithmetic overflow is a finding.
# --target keeps them off build scripts and proc macros.
RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
case "$SANITIZER" in
none) ;;
address) RUSTFLAGS="$RUSTFLAGS -Zsanitizer=address" ;;
*)
    echo "fuzz: RLUN_FUZZ_SANITIZER must be none or address, not '$SANITIZER'" >&2
    exit 2
    ;;
esac
export RUSTFLAGS

echo "fuzz: building ${#TARGETS[@]} target(s) with $(rustup run "$TOOLCHAIN" rustc --version) (sanitizer: $SANITIZER)"
build_start=$(date +%s)
bins=()
for t in "${TARGETS[@]}"; do bins+=(--bin "$t"); done
cargo "+$TOOLCHAIN" build --release --manifest-path fuzz/Cargo.toml --target "$HOST" "${bins[@]}"
echo "fuzz: build took $(($(date +%s) - build_start)) s"

BIN_DIR=fuzz/target/$HOST/release
LOG_DIR=fuzz/target/logs
mkdir -p "$LOG_DIR"

# Inputs that may grow large (several PDUs with data) get more room.
max_len() {
    case "$1" in
    pdu | login | session) echo 65536 ;;
    negotiate | text) echo 16384 ;;
    *) echo 4096 ;;
    esac
}

run_target() {
    local t=$1
    local work=fuzz/target/corpus/$t seeds=fuzz/corpus/$t artifacts=fuzz/artifacts/$t/
    mkdir -p "$work" "$seeds" "$artifacts"
    local rc=0
    # timeout: a hung target is a finding too (libFuzzer's own -timeout
    # catches a slow input; this catches anything else).
    timeout --kill-after=30 $((SECONDS_PER_TARGET + 120)) \
        "$BIN_DIR/$t" "$work" "$seeds" \
        -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 -seed="$SEED" \
        -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
        -artifact_prefix="$artifacts" >"$LOG_DIR/$t.log" 2>&1 || rc=$?
    echo "$rc" >"$LOG_DIR/$t.rc"
}

echo "fuzz: running each target for $SECONDS_PER_TARGET s ($JOBS at a time); logs in $LOG_DIR/"
running=0
for t in "${TARGETS[@]}"; do
    run_target "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

final_stat() { sed -n "s/^stat::$2: *//p" "$LOG_DIR/$1.log" | tail -1; }
failed=()
printf '\n%-10s %12s %10s %8s %8s %8s  %s\n' target executions exec/s cov ft corpus result
for t in "${TARGETS[@]}"; do
    log=$LOG_DIR/$t.log
    rc=$(cat "$LOG_DIR/$t.rc")
    # Last status line: "#1234  DONE   cov: 567 ft: 890 corp: 12/3456b ..."
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    if [ "$rc" = 0 ]; then
        result=ok
    else
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        if [ -n "$artifact" ]; then
            result="CRASH: reproducer $artifact (replay: $BIN_DIR/$t $artifact)"
        elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            result="HUNG: killed after $((SECONDS_PER_TARGET + 120)) s, see $log"
        else
            result="FAILED (exit $rc), see $log"
        fi
        failed+=("$t")
    fi
    printf '%-10s %12s %10s %8s %8s %8s  %s\n' "$t" "$(final_stat "$t" number_of_executed_units)" \
        "$(final_stat "$t" average_exec_per_sec)" "${cov:--}" "${ft:--}" "${corp:--}" "$result"
done

if [ "${#failed[@]}" -gt 0 ]; then
    for t in "${failed[@]}"; do
        echo
        echo "fuzz: $t failed; the end of $LOG_DIR/$t.log:"
        grep -v -E '^#[0-9]+' "$LOG_DIR/$t.log" | tail -40
    done
    echo
    echo "fuzz: FAILED: ${failed[*]}"
    exit 1
fi
echo "fuzz: no crashes"
