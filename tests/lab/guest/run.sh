#!/usr/bin/env bash
# Entry point inside the VM (started by tests/lab/lab.py through vng):
#
#   run.sh --out DIR --rlun PATH [--scale N] [--set KEY=VALUE]... SCENARIO...
#
# --scale multiplies every scenario's timeout; --set exports LAB_* settings
# (e.g. LAB_COMPARE_SECONDS=10) to the scenarios.
#
# Runs the named scenarios one after the other, each in its own bash process
# under a timeout, and writes for each one into DIR (a --rwdir shared with the
# host):  results/NAME.txt  "STATUS SECONDS" then a one-line reason
#         logs/NAME.log     everything the scenario printed
# Lines starting with "LAB-" on standard output are the protocol the host
# runner follows (boot detection, progress, results).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
scenario_dir=$(cd "$here/../scenarios" && pwd)
out='' rlun='' scale=1
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2; shift 2 ;;
    --rlun) rlun=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --set)
        case $2 in
        LAB_[A-Z_]*=*) export "${2?}" ;;
        *) echo "run.sh: --set takes LAB_NAME=VALUE, not $2" >&2 && exit 2 ;;
        esac
        shift 2
        ;;
    --) shift && break ;;
    -*) echo "run.sh: unknown option $1" >&2 && exit 2 ;;
    *) break ;;
    esac
done
if [ -z "$out" ] || [ -z "$rlun" ]; then
    echo "usage: run.sh --out DIR --rlun PATH [--scale N] [--set LAB_K=V]... SCENARIO..." >&2
    exit 2
fi

echo "LAB-GUEST-UP uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r) cpus=$(nproc)"

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Nothing from the host's environment may change what rlun or the tools do.
unset RLUN_CONFIG RLUN_INITIATOR_NAME RLUN_CHAP_USER RLUN_CHAP_SECRET \
    RLUN_CHAP_MUTUAL_USER RLUN_CHAP_MUTUAL_SECRET RUST_LOG \
    LIBISCSI_CHAP_USERNAME LIBISCSI_CHAP_PASSWORD \
    LIBISCSI_CHAP_TARGET_USERNAME LIBISCSI_CHAP_TARGET_PASSWORD
export LAB_OUT=$out LANG=C.UTF-8
export HOME=/root

mkdir -p "$out/results" "$out/logs" /run/rlun-lab/work /run/rlun-lab/bin
if [ ! -x "$rlun" ]; then
    echo "LAB-FATAL rlun binary $rlun is not executable inside the VM"
    exit 1
fi
# The host's files come over 9p without caching: every start of an 85 MB debug
# binary would read it again. Run a copy from the VM's RAM instead.
cp "$rlun" /run/rlun-lab/bin/rlun || {
    echo "LAB-FATAL cannot copy $rlun into the VM"
    exit 1
}
export RLUN=/run/rlun-lab/bin/rlun LAB_RLUN_SOURCE=$rlun
{
    echo "kernel=$(uname -r)"
    echo "cpus=$(nproc)"
    echo "mem_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)"
    echo "rlun=$rlun"
    echo "rlun_version=$("$RLUN" --version 2>&1 | head -n 1)"
    echo "uptime_at_start=$(cut -d' ' -f1 /proc/uptime)"
} >"$out/guest.txt"

header() { # header FILE KEY
    sed -n "s/^# $2: *//p" "$1" | head -n 1
}

for name in "$@"; do
    file=
    for f in "$scenario_dir"/[0-9]*-"$name".sh; do
        [ -e "$f" ] && file=$f && break
    done
    result=$out/results/$name.txt
    log=$out/logs/$name.log
    reason_file=/run/rlun-lab/work/$name.reason
    : >"$reason_file"
    echo "LAB-BEGIN $name"
    if [ -z "$file" ]; then
        printf 'FAIL 0\nno such scenario (no scenarios/NN-%s.sh)\n' "$name" >"$result"
        echo "LAB-END $name FAIL 0 no such scenario"
        continue
    fi
    limit=$(header "$file" timeout)
    limit=$(((${limit:-300}) * scale))
    work=/run/rlun-lab/work/$name
    mkdir -p "$work"
    start=$SECONDS
    rc=0
    # shellcheck disable=SC2016  # expanded by the inner bash
    LAB_REASON=$reason_file LAB_WORK=$work LAB_SCENARIO=$name \
        timeout -k 90 "$limit" bash -c '
            set -uo pipefail
            source "$1"; source "$2"
            trap "exit 143" TERM INT
            trap lab_run_on_exit EXIT
            log "scenario $LAB_SCENARIO ($2)"
            scenario
        ' lab "$here/lib.sh" "$file" </dev/null >"$log" 2>&1 || rc=$?
    secs=$((SECONDS - start))
    reason=$(head -n 1 "$reason_file")
    case $rc in
    0) status=PASS ;;
    77) status=SKIP ;;
    124 | 137)
        status=FAIL
        reason="timed out after ${limit}s${reason:+ (last: $reason)}"
        ;;
    *)
        status=FAIL
        [ -n "$reason" ] || reason="exit code $rc without a reason (see logs/$name.log)"
        ;;
    esac
    printf '%s %s\n%s\n' "$status" "$secs" "$reason" >"$result"
    echo "LAB-END $name $status $secs $reason"
done

dmesg >"$out/dmesg.log" 2>&1 || true
echo "LAB-GUEST-DONE uptime=$(cut -d' ' -f1 /proc/uptime)"
