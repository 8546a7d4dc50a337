#!/usr/bin/env bash
# Page cache benchmark: `rlun bench` with and without LunDevice's cache,
# side by side against one private tgtd in one run.
#
# Cases (file LUN on tmpfs, filled from /dev/urandom):
#   (a) 4 KiB random re-reads of a 64 MiB hot region at QD 32: uncached vs
#       --cache write-through (goal: >= 10x IOPS)
#   (b) sequential 4 KiB and 16 KiB reads at QD 1 through the cache with
#       --readahead on vs off (goal: >= 1.2x)
#   (c) 4 KiB sequential writes, write-back vs write-through, at QD 1 and
#       QD 32 (goal: >= 3x); write-back throughput is shown both for the
#       timed run and including the final flush
#   (d) peak RSS (VmHWM) of the rlun process vs --cache-size while 64 KiB
#       reads (and, for write-back, 128 KiB writes) stream through a region
#       larger than the cache (64 KiB: below the 128 KiB from which a
#       pipelined sequential stream bypasses the cache, so every read fills
#       pages)
#   (e) one budget for many LUNs: `rlun serve --cache-size 64M` of a target
#       with 16 LUNs (128 MiB each), all 16 exports read whole at once by
#       nbdcopy (2 GiB through a 64 MiB budget); peak RSS of the server vs
#       the budget (a per-LUN budget would allow 16 x 64 MiB). Needs
#       nbdcopy (libnbd-bin); skipped without it.
#
# Goal for (d) and (e): peak RSS <= cache size + 32 MiB.
#
# Environment:
#   BENCH_SECONDS=5         seconds per run
#   RLUN=target/release/rlun   rlun binary (built when it is the default and missing)
#   BENCH_FILE_MIB=1024     size of the file LUN
#   BENCH_ONLY=e            run case (e) alone
#
# Compare figures only within one run: the machine is shared and noisy.
set -euo pipefail
if [[ "${RLUN:-}" == */* ]]; then RLUN=$(realpath -m -- "$RLUN"); fi
cd "$(dirname "$0")/.."

SECS=${BENCH_SECONDS:-5}
FILE_MIB=${BENCH_FILE_MIB:-1024}
RLUN_DEFAULT=target/release/rlun
RLUN=${RLUN:-$RLUN_DEFAULT}
IQN=iqn.2026-11.org.example:cachebench

die() {
    echo "cache.sh: $*" >&2
    exit 1
}

for tool in tgtd tgtadm timeout setpriv python3 ss; do
    command -v "$tool" >/dev/null || die "'$tool' not found: run scripts/install-test-deps.sh"
done

source benches/lib.sh
bench_build_rlun

work=$(mktemp -d /tmp/rlun-cachebench.XXXXXX)
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

bench_file_lun rlun-cachebench "$FILE_MIB"

bench_start_tgtd "$work"
tgtadm_ --op new --mode target --tid 1 -T "$IQN"
tgtadm_ --op new --mode logicalunit --tid 1 --lun 1 -b "$lun_file"
tgtadm_ --op bind --mode target --tid 1 -I ALL
URL="iscsi://127.0.0.1:$port/$IQN/1"

# --- one rlun bench run: prints the requested JSON fields ----------------------
# usage: bench FIELDS -- BENCH-ARGS...   (FIELDS: comma-separated; cache.X for
# cache stats, "mibs_flush" for MiB/s including the final flush)
bench() {
    local fields=$1 rc=0
    shift 2
    timeout -k 5 $((SECS + 120)) "$RLUN" bench "$URL" --duration "${SECS}s" --json "$@" \
        >"$work/out.json" 2>"$work/err" || rc=$?
    if [ "$rc" != 0 ]; then
        echo "cache.sh: '$RLUN bench $URL $*' failed (exit $rc):" >&2
        cat "$work/err" "$work/out.json" >&2
        exit 1
    fi
    python3 - "$work/out.json" "$fields" <<'PY' || die "bad rlun bench output: $(head -c 2000 "$work/out.json")"
import json, sys
line = [l for l in open(sys.argv[1]) if l.lstrip().startswith("{")][-1]
r = json.loads(line)
out = []
for f in sys.argv[2].split(","):
    if f == "mibs":
        v = r["bytes"] / r["seconds"] / 2**20
    elif f == "mibs_flush":
        v = r["bytes"] / (r["seconds"] + r["flush_seconds"]) / 2**20
    elif f == "rss_mib":
        v = (r["peak_rss_bytes"] or 0) / 2**20
    elif f.startswith("cache."):
        v = (r["cache"] or {}).get(f[6:], 0)
    else:
        v = r[f]
    out.append(f"{v:.1f}" if isinstance(v, float) else str(v))
print(" ".join(out))
PY
}

ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.2f}' if b else 'n/a')" "$1" "$2"; }
verdict() { python3 -c "import sys; print('yes' if float(sys.argv[1]) >= float(sys.argv[2]) else 'NO')" "$1" "$2"; }

printf '\ntgtd %s on 127.0.0.1:%s, %ss per run, file LUN %s MiB at %s, rlun %s\n' \
    "$(tgtd -V 2>/dev/null || echo '?')" "$port" "$SECS" "$FILE_MIB" "$lun_file" "$RLUN"

rows=()
row() { rows+=("$(printf '%-46s | %12s | %12s | %7s | %5s' "$@")"); }

rss_rows=()
# BENCH_ONLY=e: only the 16-LUN case.
if [ "${BENCH_ONLY:-}" != e ]; then
# (a) hot-region re-reads
echo "running (a) hot region ..." >&2
read -r a_off <<<"$(bench iops -- --pattern randread --bs 4k --qd 32 --size 64M)"
read -r a_on a_hits a_miss <<<"$(bench iops,cache.hits,cache.misses -- --pattern randread --bs 4k --qd 32 --size 64M --cache write-through)"
r=$(ratio "$a_on" "$a_off")
row "(a) 4k randread 64M hot, QD32: IOPS" "$a_off" "$a_on" "$r" "$(verdict "$r" 10)"

# (b) sequential reads at QD 1, read-ahead on vs off
for bs in 4k 16k; do
    echo "running (b) sequential $bs ..." >&2
    read -r b_off b_off_cmds <<<"$(bench mibs,cache.read_commands -- --pattern read --bs "$bs" --qd 1 --cache write-through --readahead off)"
    read -r b_on b_on_ra b_on_cmds <<<"$(bench mibs,cache.readahead_hits,cache.read_commands -- --pattern read --bs "$bs" --qd 1 --cache write-through --readahead on)"
    read -r b_raw <<<"$(bench mibs -- --pattern read --bs "$bs" --qd 1)"
    r=$(ratio "$b_on" "$b_off")
    row "(b) seq read $bs QD1: MiB/s ra off | on" "$b_off" "$b_on" "$r" "$(verdict "$r" 1.2)"
    rows+=("    uncached $b_raw MiB/s; read-ahead hits $b_on_ra; READs $b_off_cmds (off) vs $b_on_cmds (on)")
done

# (c) sequential 4k writes, write-back vs write-through
for qd in 1 32; do
    echo "running (c) sequential writes QD$qd ..." >&2
    read -r c_wt <<<"$(bench mibs -- --pattern write --bs 4k --qd "$qd" --allow-write --cache write-through)"
    read -r c_wb c_wbf c_cmds <<<"$(bench mibs,mibs_flush,cache.writebacks -- --pattern write --bs 4k --qd "$qd" --allow-write --cache write-back)"
    r=$(ratio "$c_wb" "$c_wt")
    row "(c) seq write 4k QD$qd: MiB/s w-through | w-back" "$c_wt" "$c_wb" "$r" "$(verdict "$r" 3)"
    rf=$(ratio "$c_wbf" "$c_wt")
    rows+=("    write-back incl. final flush: $c_wbf MiB/s (x$rf); $c_cmds write-back WRITEs")
done

# (d) peak RSS vs cache size
echo "running (d) peak RSS ..." >&2
read -r d_base <<<"$(bench rss_mib -- --pattern read --bs 128k --qd 8)"
rss_rows=("$(printf '    %-34s %10s %14s %10s' 'run' 'cache MiB' 'peak RSS MiB' 'over MiB')")
rss_rows+=("$(printf '    %-34s %10s %14s %10s' 'read 128k, no cache' '-' "$d_base" '-')")
for spec in "read 64 write-through" "read 256 write-through" "read 512 write-through" "write 256 write-back"; do
    read -r pat mib mode <<<"$spec"
    extra=()
    [ "$pat" = write ] && extra+=(--allow-write)
    bs=128k
    [ "$pat" = read ] && bs=64k
    read -r rss cached <<<"$(bench rss_mib,cache.cached_bytes -- --pattern "$pat" --bs "$bs" --qd 8 --cache "$mode" --cache-size "${mib}M" "${extra[@]}")"
    over=$(python3 -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]) - float(sys.argv[3]):.1f}')" "$rss" "$mib" "$d_base")
    rss_rows+=("$(printf '    %-34s %10s %14s %10s' "$pat $bs, $mode" "$mib" "$rss" "$over")")
done

fi

# (e) 16 LUNs, one budget
many_rows=()
if command -v nbdcopy >/dev/null; then
    echo "running (e) 16 LUNs under one budget ..." >&2
    many_file=$(dirname "$lun_file")/rlun-cachebench-many.$$
    head -c $((128 << 20)) "$lun_file" >"$many_file"
    tgtadm_ --op new --mode target --tid 2 -T "$IQN-many"
    for n in $(seq 1 16); do
        tgtadm_ --op new --mode logicalunit --tid 2 --lun "$n" -b "$many_file"
    done
    tgtadm_ --op bind --mode target --tid 2 -I ALL
    # many_run NAME SERVE-ARGS...: serve the 16 LUNs, read all at once, peak RSS.
    many_run() {
        local name=$1 pid t0 t1 c
        shift
        rm -f "$work/many.sock"
        setpriv --pdeathsig KILL "$RLUN" serve "$@" "iscsi://127.0.0.1:$port/$IQN-many" \
            --socket "$work/many.sock" >"$work/many-$name.log" 2>&1 &
        pid=$!
        for _ in $(seq 1 200); do
            [ -S "$work/many.sock" ] && break
            kill -0 "$pid" 2>/dev/null || die "rlun serve exited: $(cat "$work/many-$name.log")"
            sleep 0.1
        done
        [ -S "$work/many.sock" ] || die "rlun serve made no socket: $(cat "$work/many-$name.log")"
        t0=$(date +%s.%N)
        local copiers=()
        # One connection and 2 requests of 256 KiB in flight per LUN: the
        # NBD server's own reply buffers stay small next to the cache.
        for n in $(seq 1 16); do
            timeout 600 nbdcopy -C 1 -R 2 "nbd+unix:///lun$n?socket=$work/many.sock" null: &
            copiers+=($!)
        done
        for c in "${copiers[@]}"; do wait "$c" || die "nbdcopy of a LUN failed: $(tail -5 "$work/many-$name.log")"; done
        t1=$(date +%s.%N)
        many_rss=$(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
        many_mibs=$(python3 -c "import sys; print(f'{2048 / (float(sys.argv[2]) - float(sys.argv[1])):.1f}')" "$t0" "$t1")
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    }
    many_run none --cache none
    e_base=$many_rss
    many_rows+=("$(printf '    %-34s %10s %14s %10s' "serve 16 LUNs, --cache none" - "$e_base" -)")
    many_rows+=("    (16 nbdcopy at once: $many_mibs MiB/s in all)")
    many_run cached --cache-size 64M
    rm -f "$many_file"
    e_ok=$(python3 -c "import sys; print('yes' if float(sys.argv[1]) <= 64 + 32 else 'NO')" "$many_rss")
    many_rows+=("$(printf '    %-34s %10s %14s %10s' "serve 16 LUNs, write-through" 64 "$many_rss" "$e_ok")")
    many_rows+=("    (16 nbdcopy at once: $many_mibs MiB/s in all; 2 GiB through a 64 MiB budget)")
else
    many_rows+=("    skipped: nbdcopy not found (libnbd-bin)")
fi

echo
header=$(printf '%-46s | %12s | %12s | %7s | %5s' case baseline cached ratio goal)
echo "$header"
printf '%s\n' "${header//?/-}"
printf '%s\n' "${rows[@]}"
echo
echo "(d) peak RSS (VmHWM) of rlun bench; 'over' = peak RSS - cache size - the uncached run's peak:"
printf '%s\n' "${rss_rows[@]}"
echo
echo "(e) one --cache-size for 16 LUNs: peak RSS (VmHWM) of rlun serve, within budget + 32 MiB?"
printf '    %-34s %10s %14s %10s\n' run 'cache MiB' 'peak RSS MiB' '<= +32'
printf '%s\n' "${many_rows[@]}"
echo
echo "goals: (a) >= 10x, (b) >= 1.2x, (c) >= 3x; (d), (e) peak RSS <= cache size + 32 MiB."
