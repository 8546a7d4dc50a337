#!/usr/bin/env bash
# Side-by-side benchmark of the NBD server: `rlun serve` and `qemu-nbd
# iscsi://` (libiscsi), serving the same LUN of one private tgtd, in the
# same run, read by the same NBD clients.
#
# Cases:
#   nbdcopy    the whole LUN to null: (libnbd, multi-conn, many requests in flight)
#   randread   fio's nbd engine, 4 KiB random reads over the LUN, queue depth 32
#   hot        fio 4 KiB random reads at QD 32 over the first BENCH_HOT_MIB MiB
#              (a region the cache holds), rlun with its cache (warmed by
#              one pass) vs rlun with --cache none vs qemu-nbd
#   hot-lean   the hot case, rlun cached vs --cache none, with a leaner fio
#              client (FIO_LEAN: two jobs, no per-I/O clock reads, batched
#              submissions), for when fio's own cost per request is the limit
# Prints MiB/s or IOPS per server and the ratios, and for each case the
# serving process's context switches and CPU seconds per GiB moved (from
# /proc, all its threads), tgtd's and the client's CPU seconds per GiB, and
# how busy server, tgtd and client were (% of one core), which are less
# noisy than the rates on a busy machine and show what limits each case.
# "hot/uncached" is the issue's hot-cache figure: rlun's cached re-reads
# over the same reads through `rlun serve --cache none`.
#
# Environment:
#   BENCH_SECONDS=10           seconds of each fio run
#   BENCH_FILE_MIB=1024        size of the file LUN (on tmpfs when it fits)
#   BENCH_HOT_MIB=64           the hot region
#   BENCH_ROUNDS=1             repeat every case this often (best kept)
#   RLUN=target/release/rlun   rlun binary (built when it is the default and missing)
#   RLUN_SERVE_ARGS=           extra `rlun serve` options (e.g. --cache none)
#
# Needs root (tgtd), tgt, qemu-utils + qemu-block-extra (qemu-nbd with
# iscsi://), libnbd-bin (nbdcopy) and fio with its nbd engine. Compare
# figures only within one run: the machine is shared and noisy.
set -euo pipefail
if [[ "${RLUN:-}" == */* ]]; then RLUN=$(realpath -m -- "$RLUN"); fi
cd "$(dirname "$0")/.."

SECS=${BENCH_SECONDS:-10}
FILE_MIB=${BENCH_FILE_MIB:-1024}
HOT_MIB=${BENCH_HOT_MIB:-64}
ROUNDS=${BENCH_ROUNDS:-1}
RLUN_DEFAULT=target/release/rlun
RLUN=${RLUN:-$RLUN_DEFAULT}
IQN=iqn.2026-11.org.example:nbdbench

die() {
    echo "nbd.sh: $*" >&2
    exit 1
}

for tool in tgtd tgtadm qemu-nbd nbdcopy fio setpriv python3 ss timeout; do
    command -v "$tool" >/dev/null || die "'$tool' not found: run scripts/install-test-deps.sh"
done
fio --enghelp 2>/dev/null | grep -qw nbd || die "this fio has no nbd engine"
[ "$(id -u)" = 0 ] || die "run as root (tgtd)"
source benches/lib.sh
bench_build_rlun

work=$(mktemp -d /tmp/rlun-nbdbench.XXXXXX)
tgtd_pid= qemu_pid= rlun_pid= rlun_nc_pid=
cleanup() {
    for pid in $rlun_pid $rlun_nc_pid $qemu_pid $tgtd_pid; do
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
    [ -z "${lun_file:-}" ] || rm -f "$lun_file"
}
trap cleanup EXIT

bench_file_lun rlun-nbdbench "$FILE_MIB"
bench_start_tgtd "$work"
tgtadm_ --op new --mode target --tid 1 -T "$IQN"
tgtadm_ --op new --mode logicalunit --tid 1 --lun 1 -b "$lun_file"
tgtadm_ --op bind --mode target --tid 1 -I ALL
url="iscsi://127.0.0.1:$port/$IQN/1"

wait_socket() { # path pid log
    for _ in $(seq 200); do
        [ -S "$1" ] && nbdcopy --version >/dev/null && return 0
        kill -0 "$2" 2>/dev/null || die "server exited: $(cat "$3")"
        sleep 0.1
    done
    die "no socket $1: $(cat "$3")"
}

# --- the servers -------------------------------------------------------------------
# shellcheck disable=SC2086
setpriv --pdeathsig KILL "$RLUN" serve ${RLUN_SERVE_ARGS:-} "$url" --socket "$work/rlun.sock" \
    >"$work/rlun.log" 2>&1 </dev/null &
rlun_pid=$!
setpriv --pdeathsig KILL "$RLUN" serve --cache none "$url" --socket "$work/rlun-nc.sock" \
    >"$work/rlun-nc.log" 2>&1 </dev/null &
rlun_nc_pid=$!
setpriv --pdeathsig KILL qemu-nbd -t -k "$work/qemu.sock" -f raw --cache=none "$url" \
    >"$work/qemu-nbd.log" 2>&1 </dev/null &
qemu_pid=$!
wait_socket "$work/rlun.sock" "$rlun_pid" "$work/rlun.log"
wait_socket "$work/rlun-nc.sock" "$rlun_nc_pid" "$work/rlun-nc.log"
wait_socket "$work/qemu.sock" "$qemu_pid" "$work/qemu-nbd.log"
rlun_uri="nbd+unix:///lun1?socket=$work/rlun.sock"
rlun_nc_uri="nbd+unix:///lun1?socket=$work/rlun-nc.sock"
qemu_uri="nbd+unix:///?socket=$work/qemu.sock"
size=$(stat -c %s "$lun_file")

# --- the cases ----------------------------------------------------------------------
best() { # keep the larger of two numbers
    python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$1" "$2"
}
ratio() {
    python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.2f}' if b else 'n/a')" "$1" "$2"
}

# What a process has spent so far: "<context switches> <CPU ticks>", the
# switches summed over its threads, the CPU time (user + system, all
# threads) from /proc/PID/stat.
proc_cost() { # pid
    local cs=0 t v n
    for t in /proc/"$1"/task/*/status; do
        while read -r v n; do
            case $v in voluntary_ctxt_switches: | nonvoluntary_ctxt_switches:) cs=$((cs + n)) ;; esac
        done <"$t" 2>/dev/null || true
    done
    echo "$cs $(awk '{print $14 + $15}' /proc/"$1"/stat)"
}
# Run a client command, its CPU time (user + system, with its children)
# and wall time written to $work/client as "<CPU s> <wall s>".
timed() { # command args...
    python3 -c '
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.run(sys.argv[2:]).returncode
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{u.ru_utime + u.ru_stime} {time.monotonic() - t}")
sys.exit(rc)
' "$work/client" "$@"
}
# The cost of one case per GiB moved, kept in $work/cost.NAME as
# "<server context switches/GiB> <server CPU s/GiB> <tgtd CPU s/GiB>
# <client CPU s/GiB> <server %core> <tgtd %core> <client %core>" (the last
# round's). "%core" is CPU time over wall time: near 100 (or more for a
# multi-threaded process) means that process is the limit.
cost_per_gib() { # name server-pid server-before server-after tgtd-before tgtd-after bytes
    python3 -c "
import os, sys
cs0, t0 = map(int, sys.argv[3].split()); cs1, t1 = map(int, sys.argv[4].split())
g0, g1 = int(sys.argv[5].split()[1]), int(sys.argv[6].split()[1])
gib = int(sys.argv[7]) / 2**30
hz = os.sysconf('SC_CLK_TCK')
ccpu, wall = map(float, open(sys.argv[8]).read().split())
s, g = (t1 - t0) / hz, (g1 - g0) / hz
print(f'{(cs1 - cs0) / gib:.0f} {s / gib:.2f} {g / gib:.2f} {ccpu / gib:.2f}'
      f' {100 * s / wall:.0f} {100 * g / wall:.0f} {100 * ccpu / wall:.0f}')
" "$@" "$work/client" >"$work/cost.$1"
}

nbdcopy_mib_s() { # name server-pid uri -> MiB/s
    local c0 g0
    c0=$(proc_cost "$2") g0=$(proc_cost "$tgtd_pid")
    timed timeout 600 nbdcopy "$3" null: || die "nbdcopy from $3 failed"
    cost_per_gib "$1" "$2" "$c0" "$(proc_cost "$2")" "$g0" "$(proc_cost "$tgtd_pid")" "$size"
    python3 -c "import sys; print(f'{$size / float(open(sys.argv[1]).read().split()[1]) / 2**20:.1f}')" \
        "$work/client"
}

# fio's nbd engine, 4 KiB random reads at QD 32 per job; extra fio options
# after the size (e.g. --numjobs=2: one connection per job).
fio_iops() { # name server-pid uri size-bytes [fio options...] -> IOPS (all jobs)
    local c0 g0
    c0=$(proc_cost "$2") g0=$(proc_cost "$tgtd_pid")
    timed timeout $((SECS + 120)) fio --name=randread --ioengine=nbd --uri="$3" --rw=randread --bs=4k \
        --iodepth=32 --runtime="$SECS" --time_based --size="$4" --norandommap \
        --group_reporting --output-format=json --output="$work/fio.json" "${@:5}" >"$work/fio.log" 2>&1 ||
        die "fio on $3 failed: $(cat "$work/fio.log")"
    cost_per_gib "$1" "$2" "$c0" "$(proc_cost "$2")" "$g0" "$(proc_cost "$tgtd_pid")" \
        "$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['jobs'][0]['read']['io_bytes'])" "$work/fio.json")"
    python3 -c "import json, sys; print(round(json.load(open(sys.argv[1]))['jobs'][0]['read']['iops']))" \
        "$work/fio.json"
}

declare -A r
run_case() { # name command args... (the command gets the name first)
    local name=$1 v
    shift
    r[$name]=0
    for _ in $(seq "$ROUNDS"); do
        v=$("$1" "$name" "${@:2}")
        r[$name]=$(best "${r[$name]}" "$v")
    done
}
cost() { # name field (see cost_per_gib) -> value
    awk -v f="$2" '{print $f}' "$work/cost.$1"
}
busy() { # name -> "server/tgtd/client" % of a core
    awk '{print $5 "/" $6 "/" $7}' "$work/cost.$1"
}

# fio options of the lean client of the hot-lean rows: two jobs (two
# connections, one per core), no per-I/O clock reads, submissions batched.
FIO_LEAN=(--numjobs=2 --gtod_reduce=1 --iodepth_batch_submit=16 --iodepth_batch_complete_min=1
    --iodepth_batch_complete_max=32)

echo "LUN: $((size / 1048576)) MiB file on $(dirname "$lun_file"), tgtd on 127.0.0.1:$port; $(uptime)" >&2
run_case copy_rlun nbdcopy_mib_s "$rlun_pid" "$rlun_uri"
run_case copy_qemu nbdcopy_mib_s "$qemu_pid" "$qemu_uri"
run_case rand_rlun fio_iops "$rlun_pid" "$rlun_uri" "$size"
run_case rand_qemu fio_iops "$qemu_pid" "$qemu_uri" "$size"
hot=$((HOT_MIB * 1048576))
# Warm rlun's cache: one sequential pass over the hot region in 4 KiB
# requests, the size the hot case reads (a cache may let large sequential
# requests bypass it).
timeout 300 fio --name=warm --ioengine=nbd --uri="$rlun_uri" --rw=read --bs=4k --iodepth=32 \
    --size="$hot" --output=/dev/null || die "warming the cache failed"
run_case hot_rlun fio_iops "$rlun_pid" "$rlun_uri" "$hot"
run_case hot_nocache fio_iops "$rlun_nc_pid" "$rlun_nc_uri" "$hot"
run_case hot_qemu fio_iops "$qemu_pid" "$qemu_uri" "$hot"
run_case lean_rlun fio_iops "$rlun_pid" "$rlun_uri" "$hot" "${FIO_LEAN[@]}"
run_case lean_nocache fio_iops "$rlun_nc_pid" "$rlun_nc_uri" "$hot" "${FIO_LEAN[@]}"

row() { printf '%-44s %14s %14s %8s\n' "$@"; }
# Per case: the servers' context switches and CPU per GiB, tgtd's and the
# client's CPU per GiB, and how busy each process was (CPU time over wall
# time, % of one core): whichever is near 100 is the limit.
details() { # name-a name-b
    row "  server context switches per GiB" "$(cost "$1" 1)" "$(cost "$2" 1)" \
        "$(ratio "$(cost "$1" 1)" "$(cost "$2" 1)")"
    row "  server CPU seconds per GiB" "$(cost "$1" 2)" "$(cost "$2" 2)" \
        "$(ratio "$(cost "$1" 2)" "$(cost "$2" 2)")"
    row "  tgtd CPU seconds per GiB" "$(cost "$1" 3)" "$(cost "$2" 3)" ""
    row "  client CPU seconds per GiB" "$(cost "$1" 4)" "$(cost "$2" 4)" ""
    row "  % of a core: server/tgtd/client" "$(busy "$1")" "$(busy "$2")" ""
}
row case "rlun serve" "qemu-nbd" ratio
row "nbdcopy whole LUN (MiB/s)" "${r[copy_rlun]}" "${r[copy_qemu]}" "$(ratio "${r[copy_rlun]}" "${r[copy_qemu]}")"
details copy_rlun copy_qemu
row "fio nbd 4k randread QD32 (IOPS)" "${r[rand_rlun]}" "${r[rand_qemu]}" "$(ratio "${r[rand_rlun]}" "${r[rand_qemu]}")"
details rand_rlun rand_qemu
row "hot ${HOT_MIB} MiB randread QD32 (IOPS)" "${r[hot_rlun]}" "${r[hot_qemu]}" "$(ratio "${r[hot_rlun]}" "${r[hot_qemu]}")"
details hot_rlun hot_qemu
echo
row case "rlun serve" "--cache none" ratio
# The issue's hot-cache goal (>= 10): rlun's re-reads of the hot region
# from its cache over the same reads by an rlun without cache.
row "hot/uncached (IOPS)" "${r[hot_rlun]}" "${r[hot_nocache]}" "$(ratio "${r[hot_rlun]}" "${r[hot_nocache]}")"
details hot_rlun hot_nocache
# The same with a leaner client (FIO_LEAN): what the cache gives when
# fio's own cost per request limits it less.
row "hot/uncached, lean fio client (IOPS)" "${r[lean_rlun]}" "${r[lean_nocache]}" \
    "$(ratio "${r[lean_rlun]}" "${r[lean_nocache]}")"
details lean_rlun lean_nocache
echo "rlun serve options: ${RLUN_SERVE_ARGS:-(defaults)}; $(uptime)" >&2
