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
# Prints MiB/s or IOPS per server and the ratios, and for each case the
# serving process's context switches and CPU seconds per GiB moved (from
# /proc, all its threads), which are less noisy than the rates on a busy
# machine. "hot/uncached" is the issue's hot-cache figure: rlun's cached
# re-reads over the same reads through `rlun serve --cache none`.
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

# What a server process has spent so far: "<context switches> <CPU ticks>",
# the switches summed over its threads, the CPU time (user + system, all
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
# The server's cost of one case per GiB moved, kept in $work/cost.NAME as
# "<context switches per GiB> <CPU seconds per GiB>" (the last round's).
cost_per_gib() { # name pid before-cost after-cost bytes
    python3 -c "
import os, sys
cs0, t0 = map(int, sys.argv[3].split()); cs1, t1 = map(int, sys.argv[4].split())
gib = int(sys.argv[5]) / 2**30
hz = os.sysconf('SC_CLK_TCK')
print(f'{(cs1 - cs0) / gib:.0f} {(t1 - t0) / hz / gib:.2f}')
" "$1" "$2" "$3" "$4" "$5" >"$work/cost.$1"
}

nbdcopy_mib_s() { # name server-pid uri -> MiB/s
    local t0 t1 c0
    c0=$(proc_cost "$2")
    t0=$(date +%s.%N)
    timeout 600 nbdcopy "$3" null: || die "nbdcopy from $3 failed"
    t1=$(date +%s.%N)
    cost_per_gib "$1" "$2" "$c0" "$(proc_cost "$2")" "$size"
    python3 -c "import sys; print(f'{$size / ($t1 - $t0) / 2**20:.1f}')"
}

fio_iops() { # name server-pid uri size-bytes -> IOPS
    local c0
    c0=$(proc_cost "$2")
    timeout $((SECS + 120)) fio --name=randread --ioengine=nbd --uri="$3" --rw=randread --bs=4k \
        --iodepth=32 --runtime="$SECS" --time_based --size="$4" --norandommap \
        --group_reporting --output-format=json --output="$work/fio.json" >"$work/fio.log" 2>&1 ||
        die "fio on $3 failed: $(cat "$work/fio.log")"
    cost_per_gib "$1" "$2" "$c0" "$(proc_cost "$2")" \
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
cost() { # name field(1: switches, 2: CPU s) -> per GiB
    awk -v f="$2" '{print $f}' "$work/cost.$1"
}

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

row() { printf '%-40s %12s %12s %8s\n' "$@"; }
row case "rlun serve" "qemu-nbd" ratio
row "nbdcopy whole LUN (MiB/s)" "${r[copy_rlun]}" "${r[copy_qemu]}" "$(ratio "${r[copy_rlun]}" "${r[copy_qemu]}")"
row "  server context switches per GiB" "$(cost copy_rlun 1)" "$(cost copy_qemu 1)" \
    "$(ratio "$(cost copy_rlun 1)" "$(cost copy_qemu 1)")"
row "  server CPU seconds per GiB" "$(cost copy_rlun 2)" "$(cost copy_qemu 2)" \
    "$(ratio "$(cost copy_rlun 2)" "$(cost copy_qemu 2)")"
row "fio nbd 4k randread QD32 (IOPS)" "${r[rand_rlun]}" "${r[rand_qemu]}" "$(ratio "${r[rand_rlun]}" "${r[rand_qemu]}")"
row "  server context switches per GiB" "$(cost rand_rlun 1)" "$(cost rand_qemu 1)" \
    "$(ratio "$(cost rand_rlun 1)" "$(cost rand_qemu 1)")"
row "  server CPU seconds per GiB" "$(cost rand_rlun 2)" "$(cost rand_qemu 2)" \
    "$(ratio "$(cost rand_rlun 2)" "$(cost rand_qemu 2)")"
row "hot ${HOT_MIB} MiB randread QD32 (IOPS)" "${r[hot_rlun]}" "${r[hot_qemu]}" "$(ratio "${r[hot_rlun]}" "${r[hot_qemu]}")"
# The issue's hot-cache goal (>= 10): rlun's re-reads of the hot region
# from its cache over the same reads by an rlun without cache.
row "  hot/uncached: rlun vs rlun --cache none" "${r[hot_rlun]}" "${r[hot_nocache]}" \
    "$(ratio "${r[hot_rlun]}" "${r[hot_nocache]}")"
row "  server CPU seconds per GiB" "$(cost hot_rlun 2)" "$(cost hot_nocache 2)" \
    "$(ratio "$(cost hot_rlun 2)" "$(cost hot_nocache 2)")"
echo "rlun serve options: ${RLUN_SERVE_ARGS:-(defaults)}; $(uptime)" >&2
