#!/usr/bin/env bash
# Side-by-side benchmark: libiscsi's iscsi-perf (the reference initiator) and
# `rlun bench`, against the same private tgtd in the same run.
#
# Cases: {128 KiB sequential read, 4 KiB random read} at queue depth 32
#        x {null LUN (tgtd's 1 TiB of zeros), 1 GiB file LUN}.
# For each: throughput (MiB/s), IOPS, CPU seconds and context switches per GiB
# moved, for both initiators, rlun's copied bytes per GiB (its copied_bytes
# counter), and the ratios rlun / iscsi-perf.
#
# Environment:
#   BENCH_SECONDS=10        seconds per run
#   RLUN=target/release/rlun   rlun binary (built with cargo build --release
#                           when it is the default and missing)
#   BENCH_FILE_MIB=1024     size of the file LUN
#   BENCH_SKIP_RLUN=1       measure iscsi-perf only
#   RLUN_BASELINE=path      also run this (older) rlun binary on every case and
#                           add the ratios new / baseline: a before/after check
#                           of a change in the same run
#   BENCH_ROUNDS=1          measure each case this many times, the initiators
#                           taking turns (perf, rlun, baseline, perf, ...), and
#                           report the median of each: on a noisy machine the
#                           turns spread the noise evenly over the binaries
#
# The file LUN lives on tmpfs (/dev/shm) when it has room, else /var/tmp: on
# tmpfs every run reads RAM, so the figures compare initiator + target
# overhead rather than the disk, and the first run is not slower than the
# next because of a cold page cache. It is filled from /dev/urandom so
# nothing can shortcut zero pages.
#
# Compare figures only within one run: the machine is shared and noisy.
set -euo pipefail
# A relative RLUN path is taken from the caller's directory.
if [[ "${RLUN:-}" == */* ]]; then RLUN=$(realpath -m -- "$RLUN"); fi
cd "$(dirname "$0")/.."

SECS=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-1}
FILE_MIB=${BENCH_FILE_MIB:-1024}
QD=32
RLUN_DEFAULT=target/release/rlun
RLUN=${RLUN:-$RLUN_DEFAULT}
SKIP_RLUN=${BENCH_SKIP_RLUN:-0}
BASELINE=${RLUN_BASELINE:-}
if [ -n "$BASELINE" ]; then
    BASELINE=$(realpath -m -- "$BASELINE")
    [ -x "$BASELINE" ] || die "RLUN_BASELINE=$BASELINE is not an executable"
fi
IQN=iqn.2026-11.org.example:bench

die() {
    echo "compare.sh: $*" >&2
    exit 1
}

for tool in tgtd tgtadm iscsi-perf /usr/bin/time timeout setpriv python3 ss; do
    command -v "$tool" >/dev/null || die "'$tool' not found: run scripts/install-test-deps.sh"
done

source benches/lib.sh
[ "$SKIP_RLUN" = 1 ] || bench_build_rlun

work=$(mktemp -d /tmp/rlun-bench.XXXXXX)
tgtd_pid=
cleanup() {
    if [ -n "$tgtd_pid" ]; then
        kill -9 "$tgtd_pid" 2>/dev/null || true
        wait "$tgtd_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
    [ -z "${lun_file:-}" ] || rm -f "$lun_file"
}
trap cleanup EXIT

bench_file_lun rlun-bench "$FILE_MIB"

bench_start_tgtd "$work"
tgtadm_ --op new --mode target --tid 1 -T "$IQN"
tgtadm_ --op new --mode logicalunit --tid 1 --lun 1 --bstype null -b /dev/null
tgtadm_ --op new --mode logicalunit --tid 1 --lun 2 -b "$lun_file"
tgtadm_ --op bind --mode target --tid 1 -I ALL
url() { echo "iscsi://127.0.0.1:$port/$IQN/$1"; }

# --- one iscsi-perf run: prints "iops mib_per_s cpu_s_per_gib" ---------------
run_iscsi_perf() { # url pattern bs_bytes
    local url=$1 pattern=$2 bs=$3 args rc=0
    args=(-m "$QD" -b $((bs / 512)))
    [ "$pattern" = randread ] && args+=(-r)
    /usr/bin/time -f '%U %S %c %w' -o "$work/time" \
        timeout -s INT -k 5 $((SECS + 1)) iscsi-perf "${args[@]}" "$url" >"$work/perf.out" 2>&1 || rc=$?
    # iscsi-perf runs until interrupted (timeout's 124 is the normal end) and
    # reports its running average once a second: one second more than SECS
    # leaves time for the login and gives about SECS reports.
    [ "$rc" = 124 ] || die "iscsi-perf ${args[*]} $url exited $rc: $(tr '\r' '\n' <"$work/perf.out" | tail -5)"
    python3 - "$work/perf.out" "$work/time" "$bs" <<'PY'
import re, sys
out = open(sys.argv[1], errors="replace").read().replace("\r", "\n")
avgs = re.findall(r"iops average (\d+)", out)
if not avgs:
    sys.exit("no 'iops average' in iscsi-perf output:\n" + out[-500:])
iops = float(avgs[-1])
seconds = len(avgs)  # one report line per elapsed second
user, system, invol, vol = map(float, open(sys.argv[2]).read().split("\n")[-2].split())
bs = int(sys.argv[3])
gib = iops * bs * seconds / 2**30
nan = float("nan")
# iscsi-perf reads every payload straight into its buffer: 0 bytes copied.
print(f"{iops:.0f} {iops * bs / 2**20:.1f} {(user + system) / gib if gib else nan:.3f} "
      f"{(invol + vol) / gib if gib else nan:.0f} 0")
PY
}

# --- one rlun bench run: prints "iops mib_per_s cpu_s_per_gib" ---------------
run_rlun() { # url pattern bs_name [binary]
    local url=$1 pattern=$2 bs=$3 bin=${4:-$RLUN} rc=0
    /usr/bin/time -f '%c %w' -o "$work/rtime" \
        timeout -k 5 $((SECS + 60)) "$bin" bench "$url" --pattern "$pattern" --bs "$bs" \
        --qd "$QD" --duration "${SECS}s" --json >"$work/rlun.json" 2>"$work/rlun.err" || rc=$?
    if [ "$rc" != 0 ]; then
        echo "compare.sh: '$bin bench $url --pattern $pattern --bs $bs --qd $QD --duration ${SECS}s --json' failed (exit $rc):" >&2
        cat "$work/rlun.err" "$work/rlun.json" >&2
        exit 1
    fi
    python3 - "$work/rlun.json" "$work/rtime" <<'PY' || die "rlun bench did not print the expected JSON object; it printed: $(head -c 2000 "$work/rlun.json")"
import json, sys
try:
    # The JSON object is the last line that starts with '{'.
    line = [l for l in open(sys.argv[1]) if l.lstrip().startswith("{")][-1]
    r = json.loads(line)
    mib = r["bytes"] / r["seconds"] / 2**20
    gib = r["bytes"] / 2**30
    invol, vol = map(float, open(sys.argv[2]).read().split("\n")[-2].split())
    # An rlun older than the copied-bytes counter: nan.
    copied = r.get("copied_bytes")
    copied = copied / gib if copied is not None and gib else float("nan")
    print(f"{r['iops']:.0f} {mib:.1f} {r['cpu_s_per_gib']:.3f} {(invol + vol) / gib if gib else float('nan'):.0f} {copied:.0f}")
except (IndexError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
    sys.exit(f"compare.sh: bad rlun bench output ({type(e).__name__}: {e})")
PY
}

# Median, field by field, of lines "a b c" (one line per round).
median() { python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
digits = [0, 1, 3, 0, 0]  # iops MiB/s cpu-s/GiB cs/GiB copied-bytes/GiB
print(" ".join(f"{statistics.median(c):.{digits[i]}f}" if not any(x != x for x in c) else "nan"
               for i, c in enumerate(zip(*rows))))'; }

ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.2f}' if b else 'n/a')" "$1" "$2"; }

printf '\ntgtd %s on 127.0.0.1:%s, QD %s, %ss per run, %s round(s) per case (medians), file LUN %s MiB at %s\n\n' \
    "$(tgtd -V 2>/dev/null || echo '?')" "$port" "$QD" "$SECS" "$ROUNDS" "$FILE_MIB" "$lun_file"
header=$(printf '%-22s | %10s %9s %9s %8s | %10s %9s %9s %8s %10s | %8s %8s %8s' \
    case "perf MiB/s" "IOPS" "cpu s/GiB" "cs/GiB" "rlun MiB/s" "IOPS" "cpu s/GiB" "cs/GiB" "copied/GiB" "thr x" "cpu x" "cs x")
[ -z "$BASELINE" ] || header+=$(printf ' | %10s %9s | %8s %8s' "base MiB/s" "cpu s/GiB" "thr/base" "cpu/base")
rows=()
for spec in "read 131072 128k" "randread 4096 4k"; do
    read -r pattern bs bs_name <<<"$spec"
    for lun in 1 2; do
        name="$pattern $bs_name $([ "$lun" = 1 ] && echo null || echo file)"
        echo "running $name ..." >&2
        p_runs= r_runs= b_runs=
        for ((round = 1; round <= ROUNDS; round++)); do
            p_runs+=$(run_iscsi_perf "$(url "$lun")" "$pattern" "$bs")$'\n'
            [ "$SKIP_RLUN" = 1 ] || r_runs+=$(run_rlun "$(url "$lun")" "$pattern" "$bs_name")$'\n'
            if [ -n "$BASELINE" ] && [ "$SKIP_RLUN" != 1 ]; then
                b_runs+=$(run_rlun "$(url "$lun")" "$pattern" "$bs_name" "$BASELINE")$'\n'
            fi
        done
        read -r p_iops p_mib p_cpu p_cs _ <<<"$(median <<<"$p_runs")"
        if [ "$SKIP_RLUN" = 1 ]; then
            r_iops=- r_mib=- r_cpu=- r_cs=- r_copied=- thr=- cpu=- cs=-
        else
            read -r r_iops r_mib r_cpu r_cs r_copied <<<"$(median <<<"$r_runs")"
            thr=$(ratio "$r_mib" "$p_mib")
            cpu=$(ratio "$r_cpu" "$p_cpu")
            cs=$(ratio "$r_cs" "$p_cs")
        fi
        row=$(printf '%-22s | %10s %9s %9s %8s | %10s %9s %9s %8s %10s | %8s %8s %8s' \
            "$name" "$p_mib" "$p_iops" "$p_cpu" "$p_cs" "$r_mib" "$r_iops" "$r_cpu" "$r_cs" "$r_copied" "$thr" "$cpu" "$cs")
        if [ -n "$b_runs" ]; then
            read -r _ b_mib b_cpu _ _ <<<"$(median <<<"$b_runs")"
            row+=$(printf ' | %10s %9s | %8s %8s' "$b_mib" "$b_cpu" \
                "$(ratio "$r_mib" "$b_mib")" "$(ratio "$r_cpu" "$b_cpu")")
        fi
        rows+=("$row")
    done
done

echo "$header"
printf '%s\n' "${header//?/-}"
printf '%s\n' "${rows[@]}"
echo
echo "thr x = rlun MiB/s / iscsi-perf MiB/s (higher is better for rlun);"
echo "cpu x = rlun CPU s per GiB / iscsi-perf CPU s per GiB (lower is better for rlun)."
echo "cs/GiB = context switches (voluntary + involuntary) per GiB moved; cs x = rlun / iscsi-perf."
echo "copied/GiB = bytes rlun copied between the network and the caller's buffer per GiB"
echo "(its copied_bytes counter; iscsi-perf reads payloads in place: 0; nan: counter absent)."
[ -z "$BASELINE" ] || echo "thr/base, cpu/base = this rlun / the baseline rlun ($BASELINE)."
