#!/usr/bin/env bash
# Fault soak: application I/O through rlun while the target misbehaves.
#
#   scripts/soak.sh [DURATION]      DURATION like 120, 90s, 10m, 2h (default 5m)
#
# Needs root, tgtd, fio (with its nbd engine), iproute2 (ip, ss, tc) and
# fusermount3. What it sets up, all private to this run:
#
#   - a network namespace with a veth pair: tgtd runs inside it on
#     10.213.X.2:3260, reachable from the host side 10.213.X.1;
#   - tgtd (its own control port) with one target and two file LUNs;
#   - the harness's fault proxy (examples/fault_proxy.rs, which is
#     tests/common/proxy.rs) on 127.0.0.1, forwarding to that portal;
#     both rlun processes connect through it;
#   - `rlun mount --direct-io` of LUN 1, with fio verify on the file lun1;
#   - `rlun serve --socket` of LUN 2, with fio verify through fio's nbd
#     engine (libnbd) on the export.
#
# While fio runs, the fault injector cycles through: tgtd kill -9 and
# restart, connection resets (`ss -K`, initiator side and target side),
# tgtd SIGSTOP longer than rlun's NOP interval + timeout, latency and loss
# (`tc netem` on both veth ends; without netem in the kernel: 3 % loss
# each way with nftables in the namespace plus 40 ms delay in the proxy),
# the proxy corrupting the first PDU after
# every login, and the proxy going silent after every login. Each fault is
# followed by a quiet gap; the last stretch of the run is fault-free.
#
# At the end it prints a summary and exits non-zero if a goal is missed:
# every kind of fault injected at least once, application I/O errors 0,
# verify errors 0, both rlun processes end
# cleanly (umount / SIGTERM exit 0: every written byte reached the target),
# rlun RSS at the end at most RSS after warm-up * 1.25 + 16 MiB (each
# process has a 32 MiB cache that fills during warm-up; the slack is for
# allocator noise, a leak shows as steady growth over a long run).
# Reconnects (rlun's "session re-established" log lines) and the longest
# stall (the largest fio completion latency) are reported.
#
# Environment: RLUN_BIN / RLUN_PROXY_BIN (default: build and use the debug
# binaries), SOAK_GAP (quiet seconds between faults: 10, or 4 in runs
# under 10 minutes, which also hold latency/loss 8 s instead of 15),
# SOAK_SIZE (bytes of each LUN that fio works on, default 128M),
# SOAK_KEEP=1 (keep the work directory with the logs), SOAK_DIR (work dir
# parent, default /var/tmp), SOAK_RLUN_OPTS (extra rlun options).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "soak: $*" >&2; exit 2; }

parse_duration() {
    local d=$1
    case $d in
        *h) echo $(( ${d%h} * 3600 )) ;;
        *m) echo $(( ${d%m} * 60 )) ;;
        *s) echo $(( ${d%s} )) ;;
        *[!0-9]*|'') die "bad duration: $d (use e.g. 120, 90s, 10m, 2h)" ;;
        *) echo "$d" ;;
    esac
}

DURATION=$(parse_duration "${1:-5m}")
[ "$DURATION" -ge 60 ] || die "duration must be at least 60 s"
[ "$(id -u)" = 0 ] || die "needs root (network namespace, tc, FUSE mount)"
for tool in tgtd tgtadm fio ip ss tc fusermount3 python3 setpriv; do
    command -v "$tool" >/dev/null || die "$tool not found (scripts/install-test-deps.sh)"
done
fio --enghelp 2>/dev/null | grep -qw nbd || die "this fio has no nbd engine"

# Short runs (CI) use shorter gaps and holds so one pass over every fault
# fits; long runs give rlun more quiet time between faults.
if [ "$DURATION" -lt 600 ]; then
    GAP=${SOAK_GAP:-4} HOLD=8
else
    GAP=${SOAK_GAP:-10} HOLD=15
fi
SIZE=${SOAK_SIZE:-128M}
# Settle time after the last fault: long enough for rlun to reconnect after
# its longest back-off and for fio to verify what it wrote meanwhile.
TAIL=30
WARMUP=20
NOP_INTERVAL=2
NOP_TIMEOUT=4
PAUSE=$(( NOP_INTERVAL + NOP_TIMEOUT + 4 ))

if [ -z "${RLUN_BIN:-}" ] || [ -z "${RLUN_PROXY_BIN:-}" ]; then
    cargo build --quiet --bin rlun --example fault_proxy
fi
RLUN=${RLUN_BIN:-$PWD/target/debug/rlun}
PROXY=${RLUN_PROXY_BIN:-$PWD/target/debug/examples/fault_proxy}

ID=$(( $$ % 200 + 20 ))
NS=rlun-soak-$$
VH=rsoak$$h
VT=rsoak$$t
HOST_IP=10.213.$ID.1
TGT_IP=10.213.$ID.2
CTL=$(( 20000 + $$ % 10000 ))
IQN=iqn.2026-11.org.example:soak
W=$(mktemp -d "${SOAK_DIR:-/var/tmp}/rlun-soak.XXXXXX")
MNT=$W/mnt
SOCK=$W/nbd.sock

TGTD_PID= PROXY_PID= MOUNT_PID= SERVE_PID= FIO1_PID= FIO2_PID= RSS_PID=

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$W/soak.log"; }

cleanup() {
    set +e
    for p in $RSS_PID $FIO1_PID $FIO2_PID; do kill -9 "$p" 2>/dev/null; done
    [ -n "$TGTD_PID" ] && kill -CONT "$TGTD_PID" 2>/dev/null
    if [ -n "$MOUNT_PID" ] && kill -0 "$MOUNT_PID" 2>/dev/null; then
        fusermount3 -u "$MNT" 2>/dev/null
        kill -TERM "$MOUNT_PID" 2>/dev/null
        sleep 1
        kill -9 "$MOUNT_PID" 2>/dev/null
    fi
    mountpoint -q "$MNT" 2>/dev/null && fusermount3 -uz "$MNT"
    [ -n "$SERVE_PID" ] && kill -9 "$SERVE_PID" 2>/dev/null
    exec 9>&- 2>/dev/null
    [ -n "$PROXY_PID" ] && kill -9 "$PROXY_PID" 2>/dev/null
    [ -n "$TGTD_PID" ] && kill -9 "$TGTD_PID" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
    ip link del "$VH" 2>/dev/null
    if [ "${SOAK_KEEP:-}" = 1 ]; then
        echo "soak: logs kept in $W" >&2
    else
        rm -rf "$W"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- network namespace and target -------------------------------------------
# Enter only the network namespace: `ip netns exec` would also give the
# process a new mount namespace holding a copy of rlun's FUSE mount, and a
# copy outliving the host's unmount keeps the FUSE connection (and so the
# rlun mount process) alive.
inns() { nsenter --net="/run/netns/$NS" "$@"; }
ip netns add "$NS"
ip link add "$VH" type veth peer name "$VT"
ip link set "$VT" netns "$NS"
ip addr add "$HOST_IP/24" dev "$VH"
ip link set "$VH" up
inns ip addr add "$TGT_IP/24" dev "$VT"
inns ip link set "$VT" up
inns ip link set lo up

# Latency and loss: tc netem when the kernel has it, else nftables + the
# proxy's delay (some kernels, like this project's CI host, lack netem).
if tc qdisc add dev "$VH" root netem delay 1ms 2>/dev/null; then
    tc qdisc del dev "$VH" root
    NETEM=1
else
    command -v nft >/dev/null || die "no netem qdisc in this kernel and no nft for packet loss"
    NETEM=0
fi

truncate -s 256M "$W/lun1.img" "$W/lun2.img"

tgtadm_() { timeout 15 tgtadm -C "$CTL" --lld iscsi "$@"; }

start_tgtd() {
    # Not through the inns function: $! must be tgtd itself (nsenter and
    # setpriv exec it), or SIGSTOP would stop a subshell instead.
    nsenter --net="/run/netns/$NS" setpriv --pdeathsig KILL \
        tgtd -f -C "$CTL" --iscsi "portal=$TGT_IP:3260" >>"$W/tgtd.log" 2>&1 &
    TGTD_PID=$!
    local i
    for i in $(seq 100); do
        tgtadm_ --op show --mode sys >/dev/null 2>&1 && break
        sleep 0.1
    done
    [ "$(cat "/proc/$TGTD_PID/comm" 2>/dev/null)" = tgtd ] || die "pid $TGTD_PID is not tgtd"
    tgtadm_ --op new --mode target --tid 1 -T "$IQN"
    tgtadm_ --op new --mode logicalunit --tid 1 --lun 1 -b "$W/lun1.img"
    tgtadm_ --op new --mode logicalunit --tid 1 --lun 2 -b "$W/lun2.img"
    tgtadm_ --op bind --mode target --tid 1 -I ALL
}
start_tgtd
log "tgtd $TGTD_PID on $TGT_IP:3260 in netns $NS (netem: $([ "$NETEM" = 1 ] && echo yes || echo "no, nftables loss + proxy delay"))"

# --- proxy --------------------------------------------------------------------
mkfifo "$W/proxy.ctl"
"$PROXY" "$TGT_IP:3260" "$W/proxy.port" <"$W/proxy.ctl" >"$W/proxy.log" 2>&1 &
PROXY_PID=$!
exec 9>"$W/proxy.ctl"
for _ in $(seq 100); do [ -s "$W/proxy.port" ] && break; sleep 0.1; done
PPORT=$(cat "$W/proxy.port")
proxy() { echo "$*" >&9; }
log "proxy $PROXY_PID on 127.0.0.1:$PPORT"

# --- rlun ---------------------------------------------------------------------
# SOAK_RLUN_OPTS: extra options for both rlun processes (word-split), e.g.
# "--replacement-timeout 3s" to see the soak catch failed I/O.
# shellcheck disable=SC2206
RLUN_OPTS=(-v --nop-interval "${NOP_INTERVAL}s" --nop-timeout "${NOP_TIMEOUT}s"
    --cache-size 32M ${SOAK_RLUN_OPTS:-})
mkdir "$MNT"
"$RLUN" mount "${RLUN_OPTS[@]}" --direct-io "iscsi://127.0.0.1:$PPORT/$IQN/1" "$MNT" \
    >"$W/mount.log" 2>&1 &
MOUNT_PID=$!
"$RLUN" serve "${RLUN_OPTS[@]}" --socket "$SOCK" "iscsi://127.0.0.1:$PPORT/$IQN/2" \
    >"$W/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do [ -e "$MNT/lun1" ] && [ -S "$SOCK" ] && break; sleep 0.1; done
[ -e "$MNT/lun1" ] || { cat "$W/mount.log" >&2; die "the mount did not become ready"; }
[ -S "$SOCK" ] || { cat "$W/serve.log" >&2; die "rlun serve did not become ready"; }
log "rlun mount $MOUNT_PID, rlun serve $SERVE_PID"

# --- fio ----------------------------------------------------------------------
FIO_OPTS=(--name=soak --rw=randwrite --bsrange=4k-64k --numjobs=2 --size="$SIZE"
    --offset_increment="$SIZE" --verify=crc32c --verify_backlog=32 --do_verify=1
    --continue_on_error=all --verify_state_save=0 --time_based --runtime="$DURATION"
    --output-format=json)
fio "${FIO_OPTS[@]}" --ioengine=psync --filename="$MNT/lun1" \
    --output="$W/fio-mount.json" 2>"$W/fio-mount.err" &
FIO1_PID=$!
fio "${FIO_OPTS[@]}" --ioengine=nbd --uri="nbd+unix:///?socket=$SOCK" \
    --output="$W/fio-nbd.json" 2>"$W/fio-nbd.err" &
FIO2_PID=$!
log "fio $FIO1_PID on $MNT/lun1, fio $FIO2_PID on nbd+unix:///?socket=$SOCK, $DURATION s"

rss() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

sleep "$WARMUP"
RSS_START_M=$(rss "$MOUNT_PID" VmRSS)
RSS_START_S=$(rss "$SERVE_PID" VmRSS)

# --- fault injector -------------------------------------------------------------
inject() {
    local end=$1 n=0 fault
    local faults=(kill9 reset pause netem corrupt swallow)
    while :; do
        for fault in "${faults[@]}"; do
            [ "$(date +%s)" -lt "$end" ] || return 0
            n=$((n + 1))
            log "fault $n: $fault"
            case $fault in
                kill9)
                    kill -9 "$TGTD_PID"
                    wait "$TGTD_PID" 2>/dev/null || true
                    sleep 2
                    start_tgtd
                    log "  tgtd restarted as $TGTD_PID"
                    ;;
                reset)
                    ss -K dst 127.0.0.1 dport = ":$PPORT" >/dev/null 2>&1
                    sleep 3
                    inns ss -K sport = :3260 >/dev/null 2>&1
                    ;;
                pause)
                    kill -STOP "$TGTD_PID"
                    sleep "$PAUSE"
                    kill -CONT "$TGTD_PID"
                    ;;
                netem)
                    if [ "$NETEM" = 1 ]; then
                        tc qdisc add dev "$VH" root netem delay 40ms 20ms loss 3%
                        inns tc qdisc add dev "$VT" root netem delay 40ms 20ms loss 3%
                    else
                        # No netem in this kernel: 3 % loss each way with
                        # nftables in the namespace, 40 ms on every PDU from
                        # the target in the proxy.
                        inns nft -f - <<NFT
table inet rlun_soak {
    chain in { type filter hook input priority 0; numgen random mod 100 < 3 drop; }
    chain out { type filter hook output priority 0; numgen random mod 100 < 3 drop; }
}
NFT
                        proxy delay 40
                    fi
                    sleep "$HOLD"
                    if [ "$NETEM" = 1 ]; then
                        tc qdisc del dev "$VH" root
                        inns tc qdisc del dev "$VT" root
                    else
                        inns nft delete table inet rlun_soak
                        proxy none
                    fi
                    ;;
                corrupt | swallow)
                    proxy drop
                    proxy "$fault"
                    sleep 8
                    proxy none
                    ;;
            esac
            sleep "$GAP"
        done
    done
}
# RSS sampler: the last sample before fio ends is "end".
(
    while :; do
        m=$(rss "$MOUNT_PID" VmRSS); s=$(rss "$SERVE_PID" VmRSS)
        [ "${m:-0}" -gt 0 ] && echo "$m" >"$W/rss.mount"
        [ "${s:-0}" -gt 0 ] && echo "$s" >"$W/rss.serve"
        sleep 5
    done
) &
RSS_PID=$!
# The injector runs in this shell: tgtd must stay this shell's child (its
# parent-death signal) across restarts.
START=$(date +%s)
inject $(( START - WARMUP + DURATION - TAIL ))
log "faults over; quiet until fio ends"
FIO1_RC=0; wait "$FIO1_PID" || FIO1_RC=$?
FIO2_RC=0; wait "$FIO2_PID" || FIO2_RC=$?
FIO1_PID= FIO2_PID=
kill "$RSS_PID"; wait "$RSS_PID" 2>/dev/null || true
RSS_PID=
RSS_END_M=$(cat "$W/rss.mount" 2>/dev/null || echo "$RSS_START_M")
RSS_END_S=$(cat "$W/rss.serve" 2>/dev/null || echo "$RSS_START_S")
HWM_M=$(rss "$MOUNT_PID" VmHWM); HWM_S=$(rss "$SERVE_PID" VmHWM)
log "fio done (exit $FIO1_RC, $FIO2_RC)"

# --- shut down rlun: both must report that everything reached the target -------
# Wait for a process of ours to end, at most $2 seconds; its exit status,
# or 124 after SIGKILL when it did not end in time.
reap() {
    local i
    for i in $(seq $(( $2 * 10 ))); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$1" 2>/dev/null; then
        log "pid $1 did not end within $2 s; killing it"
        kill -9 "$1"
        wait "$1" 2>/dev/null
        return 124
    fi
    wait "$1"
}
log "rlun umount $MNT"
UMOUNT_RC=0; timeout 120 "$RLUN" umount "$MNT" >>"$W/soak.log" 2>&1 || UMOUNT_RC=$?
MOUNT_RC=0; reap "$MOUNT_PID" 30 || MOUNT_RC=$?
MOUNT_PID=
log "SIGTERM to rlun serve"
kill -TERM "$SERVE_PID"
SERVE_RC=0; reap "$SERVE_PID" 60 || SERVE_RC=$?
SERVE_PID=
FAULTS=$(grep -o ' fault [0-9]*: [a-z0-9]*' "$W/soak.log" | awk '{ n[$3]++ } END { for (k in n) { printf "%s%s x%d", sep, k, n[k]; sep = ", " } }')
proxy stats
sleep 0.5
log "proxy: $(tail -n 1 "$W/proxy.log")"

# --- summary ------------------------------------------------------------------
SUMMARY=$(python3 - "$W" "$DURATION" "$FAULTS" \
    "$FIO1_RC" "$FIO2_RC" "$UMOUNT_RC" "$MOUNT_RC" "$SERVE_RC" \
    "$RSS_START_M" "$RSS_END_M" "$HWM_M" "$RSS_START_S" "$RSS_END_S" "$HWM_S" <<'EOF'
import json, re, sys
w, duration, faults = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fio1, fio2, umount_rc, mount_rc, serve_rc = map(int, sys.argv[4:9])
rss = list(map(int, sys.argv[9:15]))
VERIFY = re.compile(r"verify|bad magic|crc32c", re.I)
fail = []

def fio(name):
    try:
        with open(f"{w}/fio-{name}.json") as f:
            text = f.read()
        data = json.loads(text[text.index("{"):])
    except (OSError, ValueError) as e:
        fail.append(f"fio {name}: no JSON result ({e})")
        return 0, 0, 0.0, 0
    errors = sum(j.get("total_err", 0) or (1 if j.get("error") else 0) for j in data["jobs"])
    stall = max(j[d]["lat_ns"]["max"] for j in data["jobs"] for d in ("read", "write")) / 1e9
    ios = sum(j[d]["total_ios"] for j in data["jobs"] for d in ("read", "write"))
    with open(f"{w}/fio-{name}.err", errors="replace") as f:
        verify = sum(1 for line in f if VERIFY.search(line))
    return errors, verify, stall, ios

def reconnects(log):
    with open(f"{w}/{log}", errors="replace") as f:
        return sum(1 for line in f if "session re-established" in line)

rows = []
for name, log, rc in (("mount", "mount.log", fio1), ("nbd", "serve.log", fio2)):
    errors, verify, stall, ios = fio(name)
    rows.append((name, errors, verify, stall, ios, reconnects(log)))
    if errors:
        fail.append(f"{name}: {errors} application I/O errors")
    if verify:
        fail.append(f"{name}: {verify} verify error lines")
    if rc and not errors:
        fail.append(f"{name}: fio exited {rc}")
if umount_rc or mount_rc:
    fail.append(f"rlun umount exited {umount_rc}, the mount process {mount_rc}")
if serve_rc:
    fail.append(f"rlun serve exited {serve_rc} after SIGTERM")
print(f"soak summary: {duration} s; faults injected: {faults or 'none'}")
if not all(k in faults for k in ("kill9", "reset", "pause", "netem", "corrupt", "swallow")):
    fail.append("not every kind of fault was injected (run longer)")
print(f"{'path':6} {'I/Os':>9} {'I/O errors':>10} {'verify errors':>13} {'reconnects':>10} {'longest stall':>13}")
for name, errors, verify, stall, ios, rec in rows:
    print(f"{name:6} {ios:>9} {errors:>10} {verify:>13} {rec:>10} {stall:>12.1f}s")
for name, (start, end, hwm) in (("mount", rss[0:3]), ("serve", rss[3:6])):
    limit = start * 5 // 4 + 16 * 1024
    print(f"rlun {name} RSS: {start // 1024} MiB after warm-up, {end // 1024} MiB at the end"
          f" (limit {limit // 1024} MiB), peak {hwm // 1024} MiB")
    if end > limit:
        fail.append(f"rlun {name} RSS grew from {start} KiB to {end} KiB")
print(f"rlun umount exit {umount_rc}, mount process exit {mount_rc}, serve exit {serve_rc} after SIGTERM")
for f in fail:
    print(f"GOAL MISSED: {f}")
print("soak: PASS" if not fail else "soak: FAIL")
sys.exit(1 if fail else 0)
EOF
) && RC=0 || RC=$?
echo "$SUMMARY" | tee -a "$W/soak.log"
if [ "$RC" != 0 ] && [ "${SOAK_KEEP:-}" != 1 ]; then
    SOAK_KEEP=1
fi
exit "$RC"
