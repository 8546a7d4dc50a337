#!/usr/bin/env bash
# Side-by-side benchmark of the FUSE front end: rlun's `rlun mount` file and
# libnbd's `nbdfuse` over `qemu-nbd iscsi://` (libiscsi), against the same
# LUN of one private tgtd, in the same run; and `rlun bench` on that LUN
# (rlun's own I/O loop, no FUSE): what the mount could reach at best.
#
# First, the cold read (what a new user sees): BENCH_COLD_MOUNTS times,
# `rlun bench --pattern read --bs 1M --qd 8` on the LUN, then a fresh
# `rlun mount` and three passes of `dd bs=1M` over the whole file: pass 1 is
# the first read of the fresh mount (nothing in the kernel's page cache,
# nothing in rlun); before passes 2 and 3 the file's page cache is dropped
# (POSIX_FADV_DONTNEED), so they go through rlun again on a warm mount
# (without that they would be page-cache re-reads at memory speed). Each
# pass is printed in MiB/s and as a ratio to that mount's rlun bench figure
# (goal: pass 1 >= 0.8, passes 2 and 3 no slower than pass 1), with the
# range over the mounts, and the CPU each process spent per GiB in rlun
# bench and in pass 1 (dd, the mount, tgtd): on a machine with few cores
# pass 1 is bound by that sum, which FUSE's page cache makes larger (dd's
# copy out of it, the kernel's copy of each reply into it).
#
# Then the cases, each on both files (one mount each), and the rlun bench
# reference for it:
#   seq read   dd bs=1M of the whole LUN, page cache of the file dropped first
#              and after (so the next reader reuses those pages)
#              (not the first read of that mount: the cold read is above)
#              (rlun bench --pattern read --bs 1M --qd 8)
#   seq write  dd bs=1M of the whole LUN with conv=fdatasync
#              (rlun bench --pattern write --bs 1M --qd 8)
#   randread   fio 4 KiB random reads, libaio, O_DIRECT, queue depth 32
#              (rlun bench --pattern randread --bs 4k --qd 32)
# Prints MiB/s (IOPS for randread) for each and two ratios: rlun mount /
# rlun bench (goals: >= 0.7 for seq read and write, >= 0.6 for randread)
# and rlun mount / nbdfuse (goal >= 1.5).
#
# Environment:
#   BENCH_SECONDS=10           seconds of each fio and rlun bench run
#   BENCH_FILE_MIB=1024        size of the file LUN (on tmpfs when it fits)
#   BENCH_ROUNDS=1             repeat every case this often (best kept)
#   BENCH_COLD_MOUNTS=3        fresh mounts for the cold read (0: skip it)
#   RLUN=target/release/rlun   rlun binary (built when it is the default and missing)
#   RLUN_MOUNT_ARGS=           extra `rlun mount` options (e.g. --cache none)
#
# Needs root (tgtd, fusermount3 mounts), tgt, qemu-utils + qemu-block-extra,
# libnbd-bin (nbdfuse), fio and fuse3. Compare figures only within one run:
# the machine is shared and noisy.
set -euo pipefail
if [[ "${RLUN:-}" == */* ]]; then RLUN=$(realpath -m -- "$RLUN"); fi
cd "$(dirname "$0")/.."

SECS=${BENCH_SECONDS:-10}
FILE_MIB=${BENCH_FILE_MIB:-1024}
ROUNDS=${BENCH_ROUNDS:-1}
COLD_MOUNTS=${BENCH_COLD_MOUNTS:-3}
RLUN_DEFAULT=target/release/rlun
RLUN=${RLUN:-$RLUN_DEFAULT}
IQN=iqn.2026-11.org.example:fusebench

die() {
    echo "fuse.sh: $*" >&2
    exit 1
}

for tool in tgtd tgtadm qemu-nbd nbdfuse fio fusermount3 setpriv python3 ss timeout; do
    command -v "$tool" >/dev/null || die "'$tool' not found: run scripts/install-test-deps.sh"
done
[ "$(id -u)" = 0 ] || die "run as root (tgtd and FUSE mounts)"
source benches/lib.sh
bench_build_rlun

work=$(mktemp -d /tmp/rlun-fusebench.XXXXXX)
tgtd_pid= qemu_pid= nbdfuse_pid=
cleanup() {
    fusermount3 -uz "$work/rlun" 2>/dev/null || true
    fusermount3 -uz "$work/cold" 2>/dev/null || true
    fusermount3 -uz "$work/nbd" 2>/dev/null || true
    for pid in $nbdfuse_pid $qemu_pid $tgtd_pid; do
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
    [ -z "${lun_file:-}" ] || rm -f "$lun_file"
}
trap cleanup EXIT

bench_file_lun rlun-fusebench "$FILE_MIB"

bench_start_tgtd "$work"
tgtadm_ --op new --mode target --tid 1 -T "$IQN"
tgtadm_ --op new --mode logicalunit --tid 1 --lun 1 -b "$lun_file"
tgtadm_ --op bind --mode target --tid 1 -I ALL
url="iscsi://127.0.0.1:$port/$IQN/1"

# --- the two files ----------------------------------------------------------------
mkdir -p "$work/rlun" "$work/nbd"
# shellcheck disable=SC2086
"$RLUN" mount --daemon --log-file "$work/rlun.log" ${RLUN_MOUNT_ARGS:-} "$url" "$work/rlun" ||
    die "rlun mount failed: $(cat "$work/rlun.log" 2>/dev/null)"
rlun_file="$work/rlun/lun1"

setpriv --pdeathsig KILL qemu-nbd -t -k "$work/nbd.sock" -f raw "$url" \
    >"$work/qemu-nbd.log" 2>&1 </dev/null &
qemu_pid=$!
for _ in $(seq 100); do [ -S "$work/nbd.sock" ] && break; sleep 0.1; done
[ -S "$work/nbd.sock" ] || die "qemu-nbd did not start: $(cat "$work/qemu-nbd.log")"
setpriv --pdeathsig KILL nbdfuse "$work/nbd/lun" --unix "$work/nbd.sock" \
    >"$work/nbdfuse.log" 2>&1 </dev/null &
nbdfuse_pid=$!
for _ in $(seq 100); do [ -e "$work/nbd/lun" ] && break; sleep 0.1; done
[ -e "$work/nbd/lun" ] || die "nbdfuse did not start: $(cat "$work/nbdfuse.log")"
nbd_file="$work/nbd/lun"

size_r=$(stat -c %s "$rlun_file")
size_n=$(stat -c %s "$nbd_file")
[ "$size_r" = "$size_n" ] || die "sizes differ: rlun $size_r, nbdfuse $size_n"
count=$((size_r / 1048576))

# --- the cases ----------------------------------------------------------------------
mib_per_s() { # bytes seconds
    python3 -c "import sys; b, s = map(float, sys.argv[1:]); print(f'{b / s / 2**20:.1f}')" "$1" "$2"
}

seq_read() { # file -> MiB/s
    local f=$1 t0 t1
    # Forget the file's cached pages (POSIX_FADV_DONTNEED) so the read
    # really goes through the FUSE server.
    dd if="$f" iflag=nocache count=0 status=none
    t0=$(date +%s.%N)
    timeout 600 dd if="$f" of=/dev/null bs=1M count="$count" status=none
    t1=$(date +%s.%N)
    # Give the pages back: the next reader's page cache then reuses them
    # instead of growing into memory not touched for a while, which costs
    # far more on a VM whose host backs guest memory lazily (see the
    # README's benchmark section) and would slow whichever file is read
    # second.
    dd if="$f" iflag=nocache count=0 status=none
    mib_per_s "$size_r" "$(python3 -c "print($t1 - $t0)")"
}

seq_write() { # file -> MiB/s
    local f=$1 t0 t1
    t0=$(date +%s.%N)
    timeout 600 dd if=/dev/zero of="$f" bs=1M count="$count" conv=notrunc,fdatasync status=none
    t1=$(date +%s.%N)
    dd if="$f" iflag=nocache count=0 status=none
    mib_per_s "$size_r" "$(python3 -c "print($t1 - $t0)")"
}

# rlun bench on the LUN itself, the reference for a case: MiB/s or IOPS.
rlun_bench() { # case
    local args
    case $1 in
    seq_read) args=(--pattern read --bs 1M --qd 8) ;;
    seq_write) args=(--pattern write --bs 1M --qd 8 --allow-write) ;;
    randread) args=(--pattern randread --bs 4k --qd 32) ;;
    esac
    timeout $((SECS + 120)) "$RLUN" bench "${args[@]}" --duration "${SECS}s" --json "$url" \
        >"$work/bench.json" 2>"$work/bench.err" || die "rlun bench $1 failed: $(cat "$work/bench.err")"
    python3 -c "
import json, sys
b = json.load(open(sys.argv[1]))
print(f\"{b['iops']:.0f}\" if sys.argv[2] == 'randread' else f\"{b['bytes'] / b['seconds'] / 2**20:.1f}\")
" "$work/bench.json" "$1"
}

randread() { # file -> IOPS
    local f=$1
    timeout $((SECS + 120)) fio --name=randread --filename="$f" --rw=randread --bs=4k \
        --ioengine=libaio --direct=1 --iodepth=32 --runtime="$SECS" --time_based \
        --size="$size_r" --norandommap --group_reporting --output-format=json \
        >"$work/fio.json" 2>"$work/fio.err" || die "fio on $f failed: $(cat "$work/fio.err")"
    python3 -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['jobs'][0]['read']['iops']:.0f}\")" "$work/fio.json"
}

best() { python3 -c "import sys; print(max(sys.argv[1:], key=float))" "$@"; }
ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.2f}' if b else 'n/a')" "$1" "$2"; }
span() { python3 -c "import sys; v = sorted(map(float, sys.argv[1:])); print(f'{v[0]:g}-{v[-1]:g}')" "$@"; }

# --- the cold read: fresh mounts, passes 1, 2 and 3 --------------------------------
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # pid -> utime + stime, clock ticks
hz=$(getconf CLK_TCK)

# cold_pass FILE PID: one dd bs=1M of FILE (its page cache dropped first)
# -> "MiB/s CPU-s/GiB dd rlun tgtd": the CPU of dd, of the rlun mount PID
# and of tgtd summed, then each of them (s/GiB).
cold_pass() {
    local f=$1 pid=$2 t0 t1 m0 m1 g0 g1 dd_cpu TIMEFORMAT='%3U %3S'
    dd if="$f" iflag=nocache count=0 status=none
    m0=$(cpu_ticks "$pid") g0=$(cpu_ticks "$tgtd_pid") t0=$(date +%s.%N)
    dd_cpu=$({ time timeout 600 dd if="$f" of=/dev/null bs=1M count="$count" status=none; } 2>&1)
    t1=$(date +%s.%N) m1=$(cpu_ticks "$pid") g1=$(cpu_ticks "$tgtd_pid")
    python3 -c "
import sys
b, t0, t1, m, g, hz, u, s = map(float, sys.argv[1:])
gib = b / 2**30
print(f'{b / (t1 - t0) / 2**20:.1f} {(m / hz + g / hz + u + s) / gib:.2f} {(u + s) / gib:.2f} {m / hz / gib:.2f} {g / hz / gib:.2f}')
" "$size_r" "$t0" "$t1" $((m1 - m0)) $((g1 - g0)) "$hz" $dd_cpu
}

# cold_bench: rlun bench read --bs 1M --qd 8 -> "MiB/s CPU-s/GiB rlun tgtd"
# (rlun bench and tgtd summed, then each).
cold_bench() {
    local g0 g1 cpu TIMEFORMAT='%3U %3S'
    g0=$(cpu_ticks "$tgtd_pid")
    cpu=$({ time timeout $((SECS + 120)) "$RLUN" bench --pattern read --bs 1M --qd 8 \
        --duration "${SECS}s" --json "$url" >"$work/bench.json" 2>"$work/bench.err"; } 2>&1) ||
        die "rlun bench failed: $(cat "$work/bench.err")"
    g1=$(cpu_ticks "$tgtd_pid")
    python3 -c "
import json, sys
b = json.load(open(sys.argv[1]))
g, hz, u, s = map(float, sys.argv[2:])
gib = b['bytes'] / 2**30
print(f\"{b['bytes'] / b['seconds'] / 2**20:.1f} {(g / hz + u + s) / gib:.2f} {(u + s) / gib:.2f} {g / hz / gib:.2f}\")
" "$work/bench.json" $((g1 - g0)) "$hz" $cpu
}

# cold_mount N: rlun bench, then a fresh mount on $work/cold and three dd
# passes (the page cache dropped before 2 and 3); one table row.
cold_mount() {
    local n=$1 b bc br bt p1 c1 d1 r1 t1 p2 c2 p3 c3 pid f="$work/cold/lun1"
    echo "cold read, fresh mount $n: rlun bench ..." >&2
    read -r b bc br bt < <(cold_bench)
    # shellcheck disable=SC2086
    "$RLUN" mount --daemon --log-file "$work/cold$n.log" ${RLUN_MOUNT_ARGS:-} "$url" "$work/cold" ||
        die "rlun mount failed: $(cat "$work/cold$n.log" 2>/dev/null)"
    pid=$("$RLUN" stats --json "$work/cold" | python3 -c "import json, sys; print(json.load(sys.stdin)['processes'][0]['pid'])") ||
        die "rlun stats found no rlun behind $work/cold"
    echo "cold read, fresh mount $n: passes 1, 2, 3 ..." >&2
    read -r p1 c1 d1 r1 t1 < <(cold_pass "$f" "$pid") # the first read of the mount: nothing to drop
    read -r p2 c2 < <(cold_pass "$f" "$pid")
    read -r p3 c3 < <(cold_pass "$f" "$pid")
    "$RLUN" umount "$work/cold" || die "rlun umount failed"
    cold_b+=("$b") cold_p1+=("$p1") cold_p2+=("$p2") cold_p3+=("$p3")
    cold_r1+=("$(ratio "$p1" "$b")") cold_r2+=("$(ratio "$p2" "$b")") cold_r3+=("$(ratio "$p3" "$b")")
    cold_cb+=("$bc") cold_c1+=("$c1") cold_cr+=("$(ratio "$bc" "$c1")")
    cold_split+=("$(printf '%-6s | %10s | %10s | %10s | %10s | %10s' "$n" "$br" "$bt" "$d1" "$r1" "$t1")")
    cold_rows+=("$(printf '%-6s | %11s | %13s | %13s | %13s | %9s | %9s' "$n" "$b" \
        "$p1 (${cold_r1[-1]})" "$p2 (${cold_r2[-1]})" "$p3 (${cold_r3[-1]})" "$bc" "$c1")")
}
cold_b=() cold_p1=() cold_p2=() cold_p3=() cold_r1=() cold_r2=() cold_r3=() cold_cb=() cold_c1=() cold_cr=() cold_rows=()
cold_split=()
if [ "$COLD_MOUNTS" -gt 0 ]; then
    mkdir -p "$work/cold"
    for n in $(seq "$COLD_MOUNTS"); do cold_mount "$n"; done
fi

printf '\ntgtd on 127.0.0.1:%s, file LUN %s MiB at %s, %s round(s)\n' "$port" "$FILE_MIB" "$lun_file" "$ROUNDS"
printf 'rlun: %s mount %s\n\n' "$RLUN" "${RLUN_MOUNT_ARGS:-(defaults)}"
if [ "$COLD_MOUNTS" -gt 0 ]; then
    echo "cold read: dd bs=1M of the whole file, MiB/s (ratio to rlun bench read --bs 1M --qd 8 of the same"
    echo "round, run just before the mount). pass 1 = first read of a fresh mount; passes 2, 3 = same"
    echo "mount, the file's page cache dropped first. CPU s/GiB: rlun bench + tgtd, and dd + rlun + tgtd"
    echo "in pass 1 (steadier than the rates: when the cores are busy, their ratio bounds the mount's)"
    header=$(printf '%-6s | %11s | %13s | %13s | %13s | %9s | %9s' mount "rlun bench" "pass 1 (cold)" \
        "pass 2" "pass 3" "CPU b" "CPU 1")
    echo "$header"
    printf '%s\n' "${header//?/-}"
    printf '%s\n' "${cold_rows[@]}"
    printf '%-6s | %11s | %13s | %13s | %13s | %9s | %9s\n' range "$(span "${cold_b[@]}")" \
        "$(span "${cold_p1[@]}")" "$(span "${cold_p2[@]}")" "$(span "${cold_p3[@]}")" \
        "$(span "${cold_cb[@]}")" "$(span "${cold_c1[@]}")"
    printf '%-6s | %11s | %13s | %13s | %13s | %9s | %9s\n' ratios "" \
        "$(span "${cold_r1[@]}")" "$(span "${cold_r2[@]}")" "$(span "${cold_r3[@]}")" "" \
        "$(span "${cold_cr[@]}")"
    echo "(goal: pass 1 >= 0.8 of rlun bench, passes 2 and 3 no slower than pass 1; the ratio under"
    echo "CPU 1 is CPU b / CPU 1, what pass 1 can reach when the cores, not the pipeline, are the limit)"
    echo
    echo "where the CPU goes, s/GiB: rlun bench and tgtd during rlun bench; dd, the rlun mount and tgtd"
    echo "during pass 1 (dd's is the kernel's copy out of the page cache; the mount's beyond rlun bench's"
    echo "is mostly the kernel's copy of each reply into the page cache)"
    header=$(printf '%-6s | %10s | %10s | %10s | %10s | %10s' mount "rlun bench" "tgtd (b)" "dd (1)" \
        "mount (1)" "tgtd (1)")
    echo "$header"
    printf '%s\n' "${header//?/-}"
    printf '%s\n' "${cold_split[@]}"
    echo
fi
rows=()
for case in seq_read seq_write randread; do
    r_all=() n_all=() b_all=()
    for _ in $(seq "$ROUNDS"); do
        echo "running $case (rlun bench) ..." >&2
        b_all+=("$(rlun_bench "$case")")
        echo "running $case (nbdfuse) ..." >&2
        n_all+=("$($case "$nbd_file")")
        echo "running $case (rlun mount) ..." >&2
        r_all+=("$($case "$rlun_file")")
    done
    r=$(best "${r_all[@]}")
    n=$(best "${n_all[@]}")
    b=$(best "${b_all[@]}")
    unit=$([ "$case" = randread ] && echo "IOPS (4k QD32)" || echo "MiB/s (dd bs=1M)")
    rows+=("$(printf '%-10s %-16s | %10s | %10s | %10s | %11s | %9s' "$case" "$unit" "$b" "$n" "$r" \
        "$(ratio "$r" "$b")" "$(ratio "$r" "$n")")")
done

header=$(printf '%-10s %-16s | %10s | %10s | %10s | %11s | %9s' case unit "rlun bench" nbdfuse \
    "rlun mount" "mount/bench" "mount/nbd")
echo "$header"
printf '%s\n' "${header//?/-}"
printf '%s\n' "${rows[@]}"
echo
echo "mount/bench = rlun mount / rlun bench on the same LUN (goals: >= 0.7 for seq_read and"
echo "seq_write, >= 0.6 for randread); mount/nbd = rlun mount / nbdfuse (goal >= 1.5)."
echo "rlun bench: read/write --bs 1M --qd 8, randread --bs 4k --qd 32, ${SECS} s each."
"$RLUN" umount "$work/rlun" || die "rlun umount failed"
