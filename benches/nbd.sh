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
# Prints MiB/s or IOPS per server and the ratios.
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

nbdcopy_mib_s() { # uri -> MiB/s
    local t0 t1
    t0=$(date +%s.%N)
    timeout 600 nbdcopy "$1" null: || die "nbdcopy from $1 failed"
    t1=$(date +%s.%N)
    python3 -c "import sys; print(f'{$size / ($t1 - $t0) / 2**20:.1f}')"
}

fio_iops() { # uri size-bytes -> IOPS
    timeout $((SECS + 120)) fio --name=randread --ioengine=nbd --uri="$1" --rw=randread --bs=4k \
        --iodepth=32 --runtime="$SECS" --time_based --size="$2" --norandommap \
        --group_reporting --output-format=json >"$work/fio.json" ||
        die "fio on $1 failed: $(cat "$work/fio.json")"
    python3 -c "import json, sys; print(round(json.load(open(sys.argv[1]))['jobs'][0]['read']['iops']))" \
        "$work/fio.json"
}

declare -A r
run_case() { # name command...
    local name=$1 v
    shift
    r[$name]=0
    for _ in $(seq "$ROUNDS"); do
        v=$("$@")
        r[$name]=$(best "${r[$name]}" "$v")
    done
}

echo "LUN: $((size / 1048576)) MiB file on $(dirname "$lun_file"), tgtd on 127.0.0.1:$port" >&2
run_case copy_rlun nbdcopy_mib_s "$rlun_uri"
run_case copy_qemu nbdcopy_mib_s "$qemu_uri"
run_case rand_rlun fio_iops "$rlun_uri" "$size"
run_case rand_qemu fio_iops "$qemu_uri" "$size"
hot=$((HOT_MIB * 1048576))
# Warm rlun's cache: one sequential pass over the hot region.
timeout 120 fio --name=warm --ioengine=nbd --uri="$rlun_uri" --rw=read --bs=1M --iodepth=4 \
    --size="$hot" --output=/dev/null || die "warming the cache failed"
run_case hot_rlun fio_iops "$rlun_uri" "$hot"
run_case hot_nocache fio_iops "$rlun_nc_uri" "$hot"
run_case hot_qemu fio_iops "$qemu_uri" "$hot"

printf '%-34s %12s %12s %8s\n' case "rlun serve" "qemu-nbd" ratio
printf '%-34s %12s %12s %8s\n' "nbdcopy whole LUN (MiB/s)" "${r[copy_rlun]}" "${r[copy_qemu]}" \
    "$(ratio "${r[copy_rlun]}" "${r[copy_qemu]}")"
printf '%-34s %12s %12s %8s\n' "fio nbd 4k randread QD32 (IOPS)" "${r[rand_rlun]}" "${r[rand_qemu]}" \
    "$(ratio "${r[rand_rlun]}" "${r[rand_qemu]}")"
printf '%-34s %12s %12s %8s\n' "hot ${HOT_MIB} MiB randread QD32 (IOPS)" "${r[hot_rlun]}" "${r[hot_qemu]}" \
    "$(ratio "${r[hot_rlun]}" "${r[hot_qemu]}")"
printf '%-34s %12s %12s %8s\n' "  rlun cached vs rlun --cache none" "${r[hot_rlun]}" "${r[hot_nocache]}" \
    "$(ratio "${r[hot_rlun]}" "${r[hot_nocache]}")"
