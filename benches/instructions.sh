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
#                  where the runs fall; misses through the cache are not
#                  measured, its hits are: serve-hit 4k below.) The
#                  server is counted, not fio (callgrind_control zeroes and
#                  dumps the server's counters around each fio run)
#   serve-hit 4k   the same reads over the first INSTR_HIT_MIB (64) MiB of the
#                  LUN through `rlun serve --cache write-through --cache-size
#                  256M`, warmed by one sequential 4 KiB pass after each
#                  start, so every counted read is a cache hit, vs
#                  `qemu-nbd --cache=writeback iscsi://` (qemu's default):
#                  qemu has no cache of its own for a network block driver
#                  (its cache modes only pick O_DIRECT and flushes for host
#                  files), so its reads still go to the LUN; the row shows
#                  what a hit costs against a peer that cannot hit
#   mount 4k       4 KiB random reads at QD 32 by fio (libaio, O_DIRECT) of
#                  MNT/lun1 of `rlun mount` (its defaults, run in the
#                  foreground) vs nbdfuse's file over `qemu-nbd --cache=none
#                  iscsi://` (the pairing of benches/fuse.sh). Counted: the
#                  rlun mount process, and nbdfuse and qemu-nbd summed (rlun
#                  does the work of both; a note under the table splits the
#                  sum). Needs /dev/fuse, fusermount3 and nbdfuse, else the
#                  case prints "SKIP: reason" instead of its two rows. The
#                  mounts are removed lazily (fusermount3 -uz) after each
#                  run and at exit, however slow or dead the server is
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
#   INSTR_CASES="randread-4k read-128k cp-1M nbd-4k nbd-4k-hit mount-4k"
#                               the cases to run
#   INSTR_HIT_MIB=64            the region serve-hit reads (rlun's cache holds
#                               7/8 of its 256 MiB); 16 with --quick
#   INSTR_MOUNT_ARGS="..."      more options for `rlun mount`
#   INSTR_QD=32                 queue depth of bench, iscsi-perf and fio. At 1
#                               each request is handled alone, so the slope no
#                               longer depends on how many completions a wake-up
#                               finds: the figure to compare two rlun builds with
#   INSTR_SERVE_ARGS="..."      more options for `rlun serve` (e.g.
#                               --metrics-listen 127.0.0.1:9860)
#   RLUN=target/release/rlun    rlun binary (built with cargo build --release
#                               when it is the default and missing)
#   INSTR_QUICK=1               (or --quick) 1 s and 2 s runs, 16 and 80 MiB (and a
#                               16 MiB serve-hit region): checks that the
#                               script works and its table is well formed, as
#                               scripts/test.sh runs it; the figures are rough
#
# Needs root (tgtd), tgt, libiscsi-bin (iscsi-perf), qemu-utils +
# qemu-block-extra (qemu-img with iscsi://), valgrind, strace, time, fio;
# for mount 4k also fuse3 (fusermount3, /dev/fuse) and libnbd-bin (nbdfuse).
set -euo pipefail
if [[ "${RLUN:-}" == */* ]]; then RLUN=$(realpath -m -- "$RLUN"); fi
cd "$(dirname "$0")/.."

QUICK=${INSTR_QUICK:-0}
[ "${1:-}" = --quick ] && QUICK=1
if [ "$QUICK" = 1 ]; then
    SHORT=${INSTR_SHORT:-1} LONG=${INSTR_LONG:-2}
    CP_SHORT=${INSTR_CP_SHORT_MIB:-16} CP_LONG=${INSTR_CP_LONG_MIB:-80}
else
    SHORT=${INSTR_SHORT:-2} LONG=${INSTR_LONG:-6}
    CP_SHORT=${INSTR_CP_SHORT_MIB:-128} CP_LONG=${INSTR_CP_LONG_MIB:-512}
fi
CASES=${INSTR_CASES:-randread-4k read-128k cp-1M nbd-4k nbd-4k-hit mount-4k}
QD=${INSTR_QD:-32}
HIT_MIB=${INSTR_HIT_MIB:-$([ "$QUICK" = 1 ] && echo 16 || echo 64)}
RLUN_DEFAULT=target/release/rlun
RLUN=${RLUN:-$RLUN_DEFAULT}
IQN=iqn.2026-11.org.example:instr

die() {
    echo "instructions.sh: $*" >&2
    exit 1
}
# unmount DIR: lazily, whether its server is alive, dead or gone (a dead
# FUSE mount fails every stat, so nothing is tested first).
unmount() {
    grep -q " $1 " /proc/mounts 2>/dev/null || return 0
    fusermount3 -uz "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
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
tgtd_pid='' bg_pid=''
descendants() { # pid: its children, their children...
    local kid
    for kid in $(pgrep -P "$1" || true); do
        echo "$kid"
        descendants "$kid"
    done
}
# Each measurement runs in a background subshell (run_bg), so that a signal
# ends the wait for it at once. The front ends (serve, mount) die with that
# subshell (setpriv --pdeathsig); its other descendants (timeout running fio
# or an initiator) are told to stop; the mounts are removed here, lazily,
# before the work directory goes.
cleanup() {
    local mnt kids
    if [ -n "$bg_pid" ]; then
        kids=$(descendants "$bg_pid")
        kill -9 "$bg_pid" 2>/dev/null || true
        # shellcheck disable=SC2086 # a list of pids
        [ -z "$kids" ] || kill -TERM $kids 2>/dev/null || true
        wait "$bg_pid" 2>/dev/null || true
    fi
    for mnt in "$work/mnt-rlun" "$work/mnt-nbdfuse"; do unmount "$mnt"; done
    if [ -n "$tgtd_pid" ]; then
        kill -9 "$tgtd_pid" 2>/dev/null || true
        wait "$tgtd_pid" 2>/dev/null || true
    fi
    rm -rf --one-file-system "$work"
    rm -f "${cp_files[@]}"
}
cp_files=()
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

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

# User-space instructions of a callgrind run (every thread), less the
# zeroing of new I/O buffer pool arenas (rlun_iscsi::iobuf::Pool::take's
# zeroed allocations): 4 MiB zeroed once per arena for the life of the
# process, and whether a copy needs one arena or two depends on timing
# (one buffer more in flight at the peak), so it would not cancel in the
# slope of two runs. It swung `cp` by about 9 million instructions from one
# run to the next, more than the copies' difference.
cg_instr() { # outfile-prefix
    python3 -c '
import glob, re, sys
total = 0
for f in glob.glob(sys.argv[1] + "*"):
    names, fn, cfn, call, counted = {}, "", "", False, False
    def name(s):
        m = re.match(r"\((\d+)\)(?: (.*))?", s)
        if not m:
            return s
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), s)
    for line in open(f, errors="replace"):
        if line.startswith(("summary:", "totals:")):
            if not counted:
                total += int(line.split()[1])
            counted = True
        elif line.startswith("fn="):
            fn, call = name(line[3:].strip()), False
        elif line.startswith("cfn="):
            cfn = name(line[4:].strip())
        elif line.startswith("calls="):
            call = True
        elif call:
            call = False
            if "iobuf::Pool::take" in fn and ("zalloc" in cfn or "alloc_zeroed" in cfn):
                total -= int(line.split()[1])
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

# --- the front ends: NBD servers and FUSE mounts that fio reads through -------
# fio_ios SECONDS: 4 KiB random reads at QD $QD through the front end
# ($fio_target: fio's nbd engine and a URI, or libaio with O_DIRECT on a file
# of a FUSE mount), over the first $fio_size of the LUN; prints fio's I/O count.
fio_ios() {
    timeout -k 5 $(($1 * 10 + 120)) fio --name=randread "${fio_target[@]}" --rw=randread --bs=4k \
        --iodepth="$QD" --runtime="$1" --time_based --size="$fio_size" --norandommap \
        --output-format=json --output="$work/fio.json" >"$work/fio.log" 2>&1 ||
        die "fio on ${fio_target[*]} failed: $(tail -5 "$work/fio.log")"
    python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['jobs'][0]['read']['total_ios'])" "$work/fio.json"
}
# fio_warm: one sequential pass over the region in 4 KiB reads, the size the
# case reads (a cache may let large sequential reads bypass it), so that a
# cache that holds the region answers every read that follows.
fio_warm() {
    timeout -k 5 600 fio --name=warm "${fio_target[@]}" --rw=read --bs=4k --iodepth="$QD" \
        --size="$fio_size" --output="$work/fio.log" >/dev/null 2>&1 ||
        die "warming ${fio_target[*]} failed: $(tail -5 "$work/fio.log")"
}
# fio_prime: a few random reads (QD x 8), the first open's and connection's
# one-time costs, before the counting starts.
fio_prime() {
    timeout -k 5 600 fio --name=prime "${fio_target[@]}" --rw=randread --bs=4k --iodepth="$QD" \
        --size="$fio_size" --norandommap --number_ios=$((QD * 8)) --output="$work/fio.log" >/dev/null 2>&1 ||
        die "fio on ${fio_target[*]} failed: $(tail -5 "$work/fio.log")"
}
# spawn NAME CG CMD...: starts CMD (under callgrind, out file $work/sv-NAME,
# when CG is 1), killed with this script; appends its pid and NAME to
# $front_pids and $front_names.
spawn() {
    local name=$1 cg=$2 wrap=()
    shift 2
    [ "$cg" = 1 ] && wrap=(valgrind --tool=callgrind --trace-children=no "--callgrind-out-file=$work/sv-$name" -q)
    setpriv --pdeathsig KILL "${wrap[@]}" "$@" >"$work/$name.log" 2>&1 </dev/null &
    front_pids+=("$!") front_names+=("$name")
}
# wait_for TEST... : waits (up to 120 s: valgrind starts slowly) until TEST
# succeeds, or dies when one of the front end's processes has exited.
wait_for() {
    local pid i
    for _ in $(seq 1200); do
        "$@" 2>/dev/null && return 0
        for i in "${!front_pids[@]}"; do
            pid=${front_pids[$i]}
            kill -0 "$pid" 2>/dev/null ||
                die "${front_names[$i]} exited: $(tail -5 "$work/${front_names[$i]}.log")"
        done
        sleep 0.1
    done
    die "${front_names[*]} did not start ($*): $(tail -3 "$work/${front_names[-1]}.log")"
}
# start_front KIND CG: starts a front end on the null LUN, its processes
# under callgrind when CG is 1; sets $front_pids, $front_names (the
# processes counted), $fio_target and $front_mnt (a FUSE mount point, or
# empty).
#   qemu-nbd       qemu-nbd --cache=none iscsi://
#   qemu-nbd-wb    qemu-nbd --cache=writeback iscsi:// (qemu's default)
#   rlun-serve     rlun serve --cache none
#   rlun-serve-hit rlun serve --cache write-through (256 MiB)
#   nbdfuse        nbdfuse over qemu-nbd --cache=none iscsi://: both counted
#   rlun-mount     rlun mount (defaults), in the foreground
start_front() {
    local kind=$1 cg=$2
    front_pids=() front_names=() front_mnt=
    rm -f "$work/nbd.sock"
    case $kind in
    qemu-nbd | qemu-nbd-wb)
        spawn qemu-nbd "$cg" qemu-nbd -t -k "$work/nbd.sock" -f raw \
            "--cache=$([ "$kind" = qemu-nbd ] && echo none || echo writeback)" "$url"
        fio_target=(--ioengine=nbd --uri="nbd+unix:///?socket=$work/nbd.sock")
        wait_for test -S "$work/nbd.sock"
        ;;
    rlun-serve | rlun-serve-hit)
        local cache=(--cache none)
        [ "$kind" = rlun-serve-hit ] && cache=(--cache write-through --cache-size 256M)
        # shellcheck disable=SC2086 # INSTR_SERVE_ARGS is a list of words
        spawn rlun "$cg" "$RLUN" serve "$url" --socket "$work/nbd.sock" "${cache[@]}" ${INSTR_SERVE_ARGS:-}
        fio_target=(--ioengine=nbd --uri="nbd+unix:///lun1?socket=$work/nbd.sock")
        wait_for test -S "$work/nbd.sock"
        ;;
    nbdfuse)
        spawn qemu-nbd "$cg" qemu-nbd -t -k "$work/nbd.sock" -f raw --cache=none "$url"
        wait_for test -S "$work/nbd.sock"
        front_mnt=$work/mnt-nbdfuse
        mkdir -p "$front_mnt"
        spawn nbdfuse "$cg" nbdfuse "$front_mnt/lun" --unix "$work/nbd.sock"
        fio_target=(--ioengine=libaio --direct=1 --filename="$front_mnt/lun")
        wait_for test -e "$front_mnt/lun"
        ;;
    rlun-mount)
        front_mnt=$work/mnt-rlun
        mkdir -p "$front_mnt"
        # shellcheck disable=SC2086 # INSTR_MOUNT_ARGS is a list of words
        spawn rlun "$cg" "$RLUN" mount "$url" "$front_mnt" ${INSTR_MOUNT_ARGS:-}
        fio_target=(--ioengine=libaio --direct=1 --filename="$front_mnt/lun1")
        wait_for test -e "$front_mnt/lun1"
        ;;
    esac
}
# stop_front: kills the front end's processes and removes its mount (lazily:
# a slow or dead server cannot hold it up).
stop_front() {
    local pid
    for pid in "${front_pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${front_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    [ -z "$front_mnt" ] || unmount "$front_mnt"
    front_pids=() front_names=() front_mnt=
}
# Context switches of processes so far, summed over their threads.
proc_cs() {
    local pid
    for pid in "$@"; do cat /proc/"$pid"/task/*/status 2>/dev/null; done |
        awk '/^(non)?voluntary_ctxt_switches:/ {n += $2} END {print n + 0}'
}
cg_control() { # -z|-d: zero or dump the counters of every counted process
    local pid
    for pid in "${front_pids[@]}"; do
        callgrind_control "$1" "$pid" >"$work/cg_control.log" 2>&1 ||
            die "callgrind_control $1 $pid failed: $(cat "$work/cg_control.log")"
    done
}
# cg_dumped: the instructions of each counted process's last dump, as
# "total name=n name=n".
cg_dumped() {
    local name n total=0 each=()
    for name in "${front_names[@]}"; do
        # shellcheck disable=SC2012 # the dump files' names are ours
        n=$(cg_instr "$(ls -t "$work/sv-$name".* | head -1)")
        total=$((total + n)) each+=("$name=$n")
    done
    echo "$total ${each[*]}"
}
# measure_front KIND SHORT LONG HIT: the front end's "instr/IO sys/IO cs/IO"
# (then, per process, "name=instr/IO" when it has several). Its processes
# run under callgrind, their counters zeroed once a first fio run is done
# and dumped after a short and after a long fio run (callgrind_control), so
# start-up and each fio connection cancel in the slope; then plainly, with
# strace attached for one long run (system calls) and /proc read around
# another (switches); with --quick those two runs are short ones. HIT=1: fio reads a region of $HIT_MIB MiB, warmed by
# one pass first (after every start), else 64 GiB of the LUN.
measure_front() {
    local kind=$1 short=$2 long=$3 hit=$4 plain=$3 io_s io_l in_s in_l io_st n_st io_cs cs0 cs1 strace_pid pid sp=()
    fio_size=64g
    [ "$hit" = 1 ] && fio_size=${HIT_MIB}m
    start_front "$kind" 1
    if [ "$hit" = 1 ]; then fio_warm; fi
    fio_prime
    cg_control -z
    io_s=$(fio_ios "$short")
    cg_control -d
    in_s=$(cg_dumped)
    io_l=$(fio_ios "$long")
    cg_control -d
    in_l=$(cg_dumped)
    stop_front
    rm -f "$work"/sv-*
    [ "$QUICK" = 1 ] && plain=$short # --quick: the plain runs are short too
    start_front "$kind" 0
    if [ "$hit" = 1 ]; then fio_warm; fi
    for pid in "${front_pids[@]}"; do sp+=(-p "$pid"); done
    strace -f -c -o "$work/strace" "${sp[@]}" 2>/dev/null &
    strace_pid=$!
    sleep 0.5 # strace attaches
    io_st=$(fio_ios "$plain")
    kill -INT "$strace_pid"
    wait "$strace_pid" || true
    n_st=$(strace_calls "$work/strace")
    cs0=$(proc_cs "${front_pids[@]}")
    io_cs=$(fio_ios "$plain")
    cs1=$(proc_cs "${front_pids[@]}")
    stop_front
    python3 -c '
import sys
io_s, io_l, io_st, n_st, io_cs, cs0, cs1 = map(int, sys.argv[1:8])
in_s, in_l = sys.argv[8].split(), sys.argv[9].split()
if io_l <= io_s:
    sys.exit(f"instructions.sh: the long run did no more I/Os ({io_l}) than the short one ({io_s})")
slope = lambda a, b: (int(b) - int(a)) / (io_l - io_s)
out = [f"{slope(in_s[0], in_l[0]):.0f}", f"{n_st / io_st:.2f}", f"{(cs1 - cs0) / io_cs:.3f}"]
if len(in_s) > 2:
    for s, l in zip(in_s[1:], in_l[1:]):
        name, a = s.split("=")
        out.append("%s=%.0f" % (name, slope(a, l.split("=")[1])))
print(" ".join(out))' \
        "$io_s" "$io_l" "$io_st" "$n_st" "$io_cs" "$cs0" "$cs1" "$in_s" "$in_l"
}

# Why a case cannot run here, or nothing.
skip_reason() { # case
    case $1 in
    mount-4k)
        command -v fusermount3 >/dev/null || { echo "no fusermount3 (fuse3)"; return; }
        command -v nbdfuse >/dev/null || { echo "no nbdfuse (libnbd-bin)"; return; }
        [ -c /dev/fuse ] || { echo "no /dev/fuse"; return; }
        [ -r /dev/fuse ] && [ -w /dev/fuse ] || echo "/dev/fuse not usable by $(id -un)"
        ;;
    esac
}

ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.2f}' if b > 0 else 'n/a')" "$1" "$2"; }

# run_bg FUNCTION ARGS...: runs a measurement in the background and waits
# for it (a signal interrupts the wait; set -e ends the script when it
# fails); sets $res to what it printed.
run_bg() {
    "$@" >"$work/res" &
    bg_pid=$!
    wait "$bg_pid"
    bg_pid=
    res=$(<"$work/res")
}

rows=() notes=()
# case | peer kind | its label | rlun kind | its label | label | pattern bs | lengths | how
# (how: run = the initiator itself; front = fio through a front end, HIT 0/1)
for spec in "randread-4k|iscsi-perf|iscsi-perf|rlun|rlun bench|randread 4k|randread 4k|$SHORT $LONG|run" \
    "read-128k|iscsi-perf|iscsi-perf|rlun|rlun bench|read 128k|read 128k|$SHORT $LONG|run" \
    "cp-1M|qemu-img|qemu-img|rlun-cp|rlun cp|cp 1M|cp 1M|$CP_SHORT $CP_LONG|run" \
    "nbd-4k|qemu-nbd|qemu-nbd|rlun-serve|rlun serve|serve 4k|- -|$SHORT $LONG|front 0" \
    "nbd-4k-hit|qemu-nbd-wb|qemu-nbd|rlun-serve-hit|rlun serve|serve-hit 4k|- -|$SHORT $LONG|front 1" \
    "mount-4k|nbdfuse|nbdfuse+qemu-nbd|rlun-mount|rlun mount|mount 4k|- -|$SHORT $LONG|front 0"; do
    IFS='|' read -r name peer peer_label mine mine_label label pb lens how <<<"$spec"
    [[ " $CASES " == *" $name "* ]] || continue
    read -r pattern bs <<<"$pb"
    read -r short long <<<"$lens"
    read -r how hit <<<"$how"
    reason=$(skip_reason "$name")
    if [ -n "$reason" ]; then
        echo "skipping $name: $reason" >&2
        rows+=("$(printf '%-14s | SKIP: %s' "$label" "$reason")")
        continue
    fi
    echo "measuring $name: $peer_label ... [${SECONDS} s]" >&2
    if [ "$how" = front ]; then
        run_bg measure_front "$peer" "$short" "$long" "$hit"
    else
        run_bg measure "$peer" "$pattern" "$bs" "$short" "$long"
    fi
    read -r p_in p_sys p_cs p_each <<<"$res"
    [ -z "$p_each" ] || notes+=("$label, $peer_label: instr/IO per process: $p_each")
    echo "measuring $name: $mine_label ... [${SECONDS} s]" >&2
    if [ "$how" = front ]; then
        run_bg measure_front "$mine" "$short" "$long" "$hit"
    else
        run_bg measure "$mine" "$pattern" "$bs" "$short" "$long"
    fi
    read -r r_in r_sys r_cs _ <<<"$res"
    rows+=("$(printf '%-14s | %-16s | %10s %9s %8s' "$label" "$peer_label" "$p_in" "$p_sys" "$p_cs")")
    rows+=("$(printf '%-14s | %-16s | %10s %9s %8s | %8s %8s %8s' "$label" "$mine_label" "$r_in" "$r_sys" "$r_cs" \
        "$(ratio "$r_in" "$p_in")" "$(ratio "$r_sys" "$p_sys")" "$(ratio "$r_cs" "$p_cs")")")
done

printf '\ntgtd %s on 127.0.0.1:%s, QD %s; callgrind slope of a %ss and a %ss run (reads of the null\n' \
    "$(tgtd -V 2>/dev/null || echo '?')" "$port" "$QD" "$SHORT" "$LONG"
printf 'LUN), of a %s MiB and a %s MiB copy (cp: an I/O is 1 MiB copied, whatever the tool'"'"'s transfers)\n\n' \
    "$CP_SHORT" "$CP_LONG"
header=$(printf '%-14s | %-16s | %10s %9s %8s | %8s %8s %8s' case tool "instr/IO" "sys/IO" "cs/IO" "instr x" "sys x" "cs x")
echo "$header"
printf '%s\n' "${header//?/-}"
printf '%s\n' "${rows[@]}"
echo
echo "instr/IO = user-space instructions per I/O (callgrind, slope between the short and the"
echo "long run), sys/IO = system calls per I/O (strace -f -c of the long run), cs/IO = context"
echo "switches per I/O (getrusage of a plain long run; for serve and mount /proc around one)."
echo "x = rlun / its peer (lower is better for rlun). serve, mount: fio reads 4 KiB at random"
echo "through the front end; its processes are counted, not fio (mount: nbdfuse and qemu-nbd"
echo "summed, as rlun mount does the work of both). serve-hit: fio re-reads a ${HIT_MIB} MiB region"
echo "that rlun serve --cache write-through holds (warmed first: every read a hit); qemu-nbd has"
echo "no cache of its own for iscsi://, so its reads still go to the LUN."
if [ "${#notes[@]}" -gt 0 ]; then printf '%s\n' "${notes[@]}"; fi
