#!/usr/bin/env bash
# Deterministic side-by-side benchmark: what the initiator itself costs per
# I/O, counted rather than timed. `rlun bench` and libiscsi's iscsi-perf (the
# reference initiator) read the same null LUN of one private tgtd on
# loopback, in the same run.
#
# Cases:
#   randread 4k    4 KiB random reads, queue depth 32, of tgtd's null LUN
#                  (1 TiB, no data behind it): rlun bench vs iscsi-perf
#   read 128k      128 KiB sequential reads, the same
#   serve 4k       4 KiB random reads at QD 32 by fio's nbd engine through
#                  `rlun serve --cache none` vs `qemu-nbd --cache=none
#                  iscsi://` (libiscsi): both straight through to the LUN.
#                  (With rlun's default cache every read of the 1 TiB LUN
#                  misses, and the cost per miss changes once the cache is
#                  full and each miss evicts, so a slope would depend on
#                  where the runs fall; the cache is not measured here.) The
#                  server is counted, not fio (callgrind_control zeroes and
#                  dumps the server's counters around each fio run)
#   cp 1M          a whole LUN (a tmpfs file of random bytes) copied to nowhere:
#                  `rlun cp --bs 1M LUN /dev/null` vs `qemu-img convert` into
#                  qemu's null-co driver (libiscsi underneath); an I/O is one
#                  MiB copied, whatever each tool's transfer size
#
# Per case and initiator:
#   instr/IO    user-space instructions per I/O, from callgrind: two runs of
#               different lengths, (instr(long) - instr(short)) /
#               (I/Os(long) - I/Os(short)), so start-up, login and exit cancel
#   sys/IO      system calls per I/O, from `strace -f -c` of one long run
#               (start-up included: a few hundred calls against tens of
#               thousands; a slope of two strace runs proved noisier, as the
#               runs' pace under strace varies)
#   cs/IO       context switches (voluntary + involuntary, all threads) per
#               I/O, from getrusage (/usr/bin/time) of one plain long run:
#               the one figure that depends on the run's pace
# and the ratios rlun / iscsi-perf (lower is better for rlun).
#
# I/O counts: rlun's from its --json output ("ios"); iscsi-perf's from its
# own output: it runs for -t N seconds and prints its average IOPS over them,
# so it did IOPS x N I/Os (plus the 32 still in flight at the end, the same in
# both runs, so they cancel in the slope).
#
# What bounds the figures: callgrind and strace slow the initiator down (about
# 50x and 2-10x) while tgtd keeps its pace, so more completions arrive per
# wake-up than in a plain run; the counts are exact for the run they count,
# and both initiators are counted the same way, but a plain run batches less
# (compare sys/IO with the plain runs' cs/IO). Kernel instructions are not
# counted (callgrind sees user space only): compare.sh's CPU seconds per GiB
# covers them, noisily.
#
# Environment:
#   INSTR_SHORT=2 INSTR_LONG=6  seconds of the short and the long run
#   INSTR_CP_SHORT_MIB=128 INSTR_CP_LONG_MIB=512   sizes of the two copies
#   INSTR_CASES="randread-4k read-128k cp-1M nbd-4k"   the cases to run
#   INSTR_QD=32                 queue depth of bench, iscsi-perf and fio. At 1
#                               each request is handled alone, so the slope no
#                               longer depends on how many completions a wake-up
#                               finds: the figure to compare two rlun builds with
#   INSTR_SERVE_ARGS="..."      more options for `rlun serve` (e.g.
#                               --metrics-listen 127.0.0.1:9860)
#   RLUN=target/release/rlun    rlun binary (built with cargo build --release
#                               when it is the default and missing)
#   INSTR_QUICK=1               (or --quick) 1 s and 2 s runs, 16 and 48 MiB: checks that the
#                               script works and its table is well formed, as
#                               scripts/test.sh runs it; the figures are rough
#
# Needs root (tgtd), tgt, libiscsi-bin (iscsi-perf), qemu-utils +
# qemu-block-extra (qemu-img with iscsi://), valgrind, strace, time.
set -euo pipefail
if [[ "${RLUN:-}" == */* ]]; then RLUN=$(realpath -m -- "$RLUN"); fi
cd "$(dirname "$0")/.."

QUICK=${INSTR_QUICK:-0}
[ "${1:-}" = --quick ] && QUICK=1
if [ "$QUICK" = 1 ]; then
    SHORT=${INSTR_SHORT:-1} LONG=${INSTR_LONG:-2}
    CP_SHORT=${INSTR_CP_SHORT_MIB:-16} CP_LONG=${INSTR_CP_LONG_MIB:-48}
else
    SHORT=${INSTR_SHORT:-2} LONG=${INSTR_LONG:-6}
    CP_SHORT=${INSTR_CP_SHORT_MIB:-128} CP_LONG=${INSTR_CP_LONG_MIB:-512}
fi
CASES=${INSTR_CASES:-randread-4k read-128k cp-1M nbd-4k}
QD=${INSTR_QD:-32}
RLUN_DEFAULT=target/release/rlun
RLUN=${RLUN:-$RLUN_DEFAULT}
IQN=iqn.2026-11.org.example:instr

die() {
    echo "instructions.sh: $*" >&2
    exit 1
}

[ "$LONG" -gt "$SHORT" ] || die "INSTR_LONG ($LONG) must exceed INSTR_SHORT ($SHORT)"
[ "$CP_LONG" -gt "$CP_SHORT" ] || die "INSTR_CP_LONG_MIB ($CP_LONG) must exceed INSTR_CP_SHORT_MIB ($CP_SHORT)"
for tool in tgtd tgtadm iscsi-perf qemu-img qemu-nbd fio callgrind_control valgrind strace /usr/bin/time timeout setpriv python3 ss; do
    command -v "$tool" >/dev/null || die "'$tool' not found: run scripts/install-test-deps.sh"
done
[ "$(id -u)" = 0 ] || die "run as root (tgtd)"

source benches/lib.sh
bench_build_rlun

work=$(mktemp -d /tmp/rlun-instr.XXXXXX)
tgtd_pid= server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -9 "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ -n "$tgtd_pid" ]; then
        kill -9 "$tgtd_pid" 2>/dev/null || true
        wait "$tgtd_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
    rm -f "${cp_files[@]}"
}
cp_files=()
trap cleanup EXIT

bench_start_tgtd "$work"
tgtadm_ --op new --mode target --tid 1 -T "$IQN"
tgtadm_ --op new --mode logicalunit --tid 1 --lun 1 --bstype null -b /dev/null
# The copies' two LUNs: files of CP_SHORT and CP_LONG MiB of random bytes
# (so that no zero detection shortcuts a copy), on tmpfs when it has room.
cp_dir=/dev/shm
shm_free_mib=$(df -Pm /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
[ -n "$shm_free_mib" ] && [ "$shm_free_mib" -gt $((CP_SHORT + CP_LONG + 512)) ] || cp_dir=/var/tmp
for mib in "$CP_SHORT" "$CP_LONG"; do
    f=$(mktemp "$cp_dir/rlun-instr-lun.XXXXXX")
    cp_files+=("$f")
    dd if=/dev/urandom of="$f" bs=1M count="$mib" status=none
done
tgtadm_ --op new --mode logicalunit --tid 1 --lun 2 -b "${cp_files[0]}"
tgtadm_ --op new --mode logicalunit --tid 1 --lun 3 -b "${cp_files[1]}"
tgtadm_ --op bind --mode target --tid 1 -I ALL
url="iscsi://127.0.0.1:$port/$IQN/1"
cp_url() { # MiB
    echo "iscsi://127.0.0.1:$port/$IQN/$([ "$1" = "$CP_SHORT" ] && echo 2 || echo 3)"
}

# --- one run of one initiator under a counter -------------------------------
# run TOOL PATTERN BS LEN WRAPPER... : runs the initiator under WRAPPER
# (a command prefix) and prints its I/O count. LEN is seconds, or for the
# copies (rlun-cp, qemu-img) the size in MiB of the LUN they copy, whose
# I/Os are counted as MiB (rlun cp --bs 1M).
run() {
    local tool=$1 pattern=$2 bs=$3 secs=$4 rc=0
    shift 4
    case $tool in
    rlun)
        timeout -k 5 $((secs * 100 + 120)) "$@" "$RLUN" bench "$url" --pattern "$pattern" \
            --bs "$bs" --qd "$QD" --duration "${secs}s" --json >"$work/out" 2>"$work/err" || rc=$?
        [ "$rc" = 0 ] || die "rlun bench ($*) exited $rc: $(tail -5 "$work/err")"
        python3 -c '
import json, sys
lines = [l for l in open(sys.argv[1]) if l.lstrip().startswith("{")]
if not lines:
    sys.exit("instructions.sh: no JSON from rlun bench")
print(json.loads(lines[-1])["ios"])' "$work/out"
        ;;
    iscsi-perf)
        local args=(-m "$QD" -b $(($(numfmt --from=iec "${bs^^}") / 512)) -t "$secs")
        [ "$pattern" = randread ] && args+=(-r)
        timeout -k 5 $((secs * 100 + 120)) "$@" iscsi-perf "${args[@]}" "$url" \
            >"$work/out" 2>"$work/err" || rc=$?
        [ "$rc" = 0 ] || die "iscsi-perf ($*) exited $rc: $(tr '\r' '\n' <"$work/out" | tail -3; tail -3 "$work/err")"
        python3 -c '
import re, sys
out = open(sys.argv[1], errors="replace").read()
avgs = re.findall(r"iops average (\d+)", out)
if not avgs:
    sys.exit("instructions.sh: no iops average from iscsi-perf")
print(int(avgs[-1]) * int(sys.argv[2]))' "$work/out" "$secs"
        ;;
    rlun-cp)
        timeout -k 5 $((secs * 10 + 120)) "$@" "$RLUN" cp -q --bs 1M "$(cp_url "$secs")" /dev/null \
            >"$work/out" 2>"$work/err" || rc=$?
        [ "$rc" = 0 ] || die "rlun cp ($*) exited $rc: $(tail -5 "$work/err")"
        echo "$secs"
        ;;
    qemu-img)
        timeout -k 5 $((secs * 10 + 120)) "$@" qemu-img convert -n -f raw "$(cp_url "$secs")" \
            --target-image-opts "driver=null-co,size=$((secs << 20))" >"$work/out" 2>"$work/err" || rc=$?
        [ "$rc" = 0 ] || die "qemu-img convert ($*) exited $rc: $(tail -5 "$work/err")"
        echo "$secs"
        ;;
    esac
}

# User-space instructions of a callgrind run (every thread).
cg_instr() { # outfile-prefix
    python3 -c '
import glob, sys
total = 0
for f in glob.glob(sys.argv[1] + "*"):
    for line in open(f, errors="replace"):
        if line.startswith(("summary:", "totals:")):
            total += int(line.split()[1])
            break
print(total)' "$1"
}
# System calls of an strace -c summary (its "total" line's calls column).
strace_calls() { # file
    awk '$NF == "total" {print $4; exit}' "$1"
}

# measure TOOL PATTERN BS SHORT LONG: prints "instr/IO sys/IO cs/IO".
measure() {
    local tool=$1 pattern=$2 bs=$3 SHORT=$4 LONG=$5 secs io_s io_l in_s in_l io_st n_st io_cs n_cs
    for secs in "$SHORT" "$LONG"; do
        rm -f "$work"/cg.*
        io_l=$(run "$tool" "$pattern" "$bs" "$secs" \
            valgrind --tool=callgrind "--callgrind-out-file=$work/cg.%p" -q)
        in_l=$(cg_instr "$work/cg.")
        if [ "$secs" = "$SHORT" ]; then io_s=$io_l in_s=$in_l; fi
    done
    io_st=$(run "$tool" "$pattern" "$bs" "$LONG" strace -f -c -o "$work/strace")
    n_st=$(strace_calls "$work/strace")
    io_cs=$(run "$tool" "$pattern" "$bs" "$LONG" /usr/bin/time -f '%c %w' -o "$work/time")
    n_cs=$(tail -1 "$work/time" | awk '{print $1 + $2}')
    python3 -c '
import sys
io_s, in_s, io_l, in_l, io_st, n_st, io_cs, n_cs = map(int, sys.argv[1:])
if io_l <= io_s:
    sys.exit(f"instructions.sh: the long run did no more I/Os ({io_l}) than the short one ({io_s})")
if min(io_st, io_cs) <= 0:
    sys.exit("instructions.sh: a counted run did no I/O")
print(f"{(in_l - in_s) / (io_l - io_s):.0f} {n_st / io_st:.2f} {n_cs / io_cs:.3f}")' \
        "$io_s" "$in_s" "$io_l" "$in_l" "$io_st" "$n_st" "$io_cs" "$n_cs"
}

# --- the NBD servers: fio's nbd engine reads through them ---------------------
# fio_ios URI SECONDS: 4 KiB random reads at QD 32 over the null LUN through
# the server; prints fio's I/O count.
fio_ios() {
    timeout $(($2 * 10 + 120)) fio --name=randread --ioengine=nbd --uri="$1" --rw=randread --bs=4k \
        --iodepth="$QD" --runtime="$2" --time_based --size=64g --norandommap \
        --output-format=json --output="$work/fio.json" >"$work/fio.log" 2>&1 ||
        die "fio on $1 failed: $(tail -5 "$work/fio.log")"
    python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['jobs'][0]['read']['total_ios'])" "$work/fio.json"
}
# start_server KIND WRAPPER...: starts rlun serve or qemu-nbd on the null LUN
# under WRAPPER, sets $server_pid and $server_uri.
start_server() {
    local kind=$1
    shift
    rm -f "$work/nbd.sock"
    case $kind in
    rlun-serve)
        # shellcheck disable=SC2086 # INSTR_SERVE_ARGS is a list of words
        setpriv --pdeathsig KILL "$@" "$RLUN" serve "$url" --socket "$work/nbd.sock" --cache none \
            ${INSTR_SERVE_ARGS:-} >"$work/server.log" 2>&1 </dev/null &
        server_uri="nbd+unix:///lun1?socket=$work/nbd.sock"
        ;;
    qemu-nbd)
        setpriv --pdeathsig KILL "$@" qemu-nbd -t -k "$work/nbd.sock" -f raw --cache=none "$url" \
            >"$work/server.log" 2>&1 </dev/null &
        server_uri="nbd+unix:///?socket=$work/nbd.sock"
        ;;
    esac
    server_pid=$!
    for _ in $(seq 600); do
        [ -S "$work/nbd.sock" ] && return 0
        kill -0 "$server_pid" 2>/dev/null || die "$kind exited: $(tail -5 "$work/server.log")"
        sleep 0.1
    done
    die "$kind did not listen: $(tail -5 "$work/server.log")"
}
stop_server() {
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}
# Context switches of a process so far, summed over its threads.
proc_cs() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches:/ {n += $2} END {print n + 0}'
}
cg_control() { # -z|-d pid: zero or dump a callgrind run's counters
    callgrind_control "$1" "$2" >"$work/cg_control.log" 2>&1 ||
        die "callgrind_control $1 $2 failed: $(cat "$work/cg_control.log")"
}
# measure_server KIND SHORT LONG: the server's "instr/IO sys/IO cs/IO". The
# server runs under callgrind, its counters zeroed once it listens and dumped
# after a short and after a long fio run (callgrind_control), so start-up and
# each fio connection cancel in the slope; then plainly, with strace attached
# for one long run (system calls) and /proc read around another (switches).
measure_server() {
    local kind=$1 short=$2 long=$3 io_s io_l in_s in_l io_st n_st io_cs cs0 cs1 strace_pid
    start_server "$kind" valgrind --tool=callgrind "--callgrind-out-file=$work/sv" -q
    fio_ios "$server_uri" 1 >/dev/null # the first connection's one-time costs, before the counting
    cg_control -z "$server_pid"
    io_s=$(fio_ios "$server_uri" "$short")
    cg_control -d "$server_pid"
    in_s=$(cg_instr "$(ls -t "$work"/sv.* | head -1)")
    io_l=$(fio_ios "$server_uri" "$long")
    cg_control -d "$server_pid"
    in_l=$(cg_instr "$(ls -t "$work"/sv.* | head -1)")
    stop_server
    rm -f "$work"/sv*
    start_server "$kind"
    strace -f -c -o "$work/strace" -p "$server_pid" 2>/dev/null &
    strace_pid=$!
    sleep 1
    io_st=$(fio_ios "$server_uri" "$long")
    kill -INT "$strace_pid"
    wait "$strace_pid" || true
    n_st=$(strace_calls "$work/strace")
    cs0=$(proc_cs "$server_pid")
    io_cs=$(fio_ios "$server_uri" "$long")
    cs1=$(proc_cs "$server_pid")
    stop_server
    python3 -c '
import sys
io_s, in_s, io_l, in_l, io_st, n_st, io_cs, cs0, cs1 = map(int, sys.argv[1:])
if io_l <= io_s:
    sys.exit(f"instructions.sh: the long run did no more I/Os ({io_l}) than the short one ({io_s})")
print(f"{(in_l - in_s) / (io_l - io_s):.0f} {n_st / io_st:.2f} {(cs1 - cs0) / io_cs:.3f}")' \
        "$io_s" "$in_s" "$io_l" "$in_l" "$io_st" "$n_st" "$io_cs" "$cs0" "$cs1"
}

ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.2f}' if b > 0 else 'n/a')" "$1" "$2"; }

rows=()
# case | peer tool | its label | rlun tool | its label | pattern bs | lengths
for spec in "randread-4k|iscsi-perf|iscsi-perf|rlun|rlun bench|randread 4k|$SHORT $LONG" \
    "read-128k|iscsi-perf|iscsi-perf|rlun|rlun bench|read 128k|$SHORT $LONG" \
    "cp-1M|qemu-img|qemu-img|rlun-cp|rlun cp|cp 1M|$CP_SHORT $CP_LONG" \
    "nbd-4k|qemu-nbd|qemu-nbd|rlun-serve|rlun serve|serve 4k|$SHORT $LONG"; do
    IFS='|' read -r name peer peer_label mine mine_label pb lens <<<"$spec"
    [[ " $CASES " == *" $name "* ]] || continue
    read -r pattern bs <<<"$pb"
    read -r short long <<<"$lens"
    echo "measuring $name: $peer_label ..." >&2
    if [ "$pattern" = serve ]; then
        res=$(measure_server "$peer" "$short" "$long")
    else
        res=$(measure "$peer" "$pattern" "$bs" "$short" "$long")
    fi
    read -r p_in p_sys p_cs <<<"$res"
    echo "measuring $name: $mine_label ..." >&2
    if [ "$pattern" = serve ]; then
        res=$(measure_server "$mine" "$short" "$long")
    else
        res=$(measure "$mine" "$pattern" "$bs" "$short" "$long")
    fi
    read -r r_in r_sys r_cs <<<"$res"
    rows+=("$(printf '%-14s | %-10s | %10s %9s %8s' "$pb" "$peer_label" "$p_in" "$p_sys" "$p_cs")")
    rows+=("$(printf '%-14s | %-10s | %10s %9s %8s | %8s %8s %8s' "$pb" "$mine_label" "$r_in" "$r_sys" "$r_cs" \
        "$(ratio "$r_in" "$p_in")" "$(ratio "$r_sys" "$p_sys")" "$(ratio "$r_cs" "$p_cs")")")
done

printf '\ntgtd %s on 127.0.0.1:%s, QD %s; callgrind slope of a %ss and a %ss run (reads of the null\n' \
    "$(tgtd -V 2>/dev/null || echo '?')" "$port" "$QD" "$SHORT" "$LONG"
printf 'LUN), of a %s MiB and a %s MiB copy (cp: an I/O is 1 MiB copied, whatever the tool'"'"'s transfers)\n\n' \
    "$CP_SHORT" "$CP_LONG"
header=$(printf '%-14s | %-10s | %10s %9s %8s | %8s %8s %8s' case tool "instr/IO" "sys/IO" "cs/IO" "instr x" "sys x" "cs x")
echo "$header"
printf '%s\n' "${header//?/-}"
printf '%s\n' "${rows[@]}"
echo
echo "instr/IO = user-space instructions per I/O (callgrind, slope between the short and the"
echo "long run), sys/IO = system calls per I/O (strace -f -c of the long run), cs/IO = context"
echo "switches per I/O (getrusage of a plain long run; for the servers /proc around one)."
echo "x = rlun / its peer (lower is better for rlun). serve: the server's figures only (not fio's)."
