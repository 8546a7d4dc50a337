# about: rlun attach killed with SIGKILL: I/O on the orphaned /dev/nbdN fails with EIO within the kernel's dead-connection timeout instead of hanging, and rlun detach then disconnects the device
# default: yes
# timeout: 420

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    need lio
    need nbd
    local W=$LAB_WORK dev n pid rc t0 took
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0"
    # --io-timeout 15s sets the kernel's request and dead-connection
    # timeouts (the default would be max(5s, 30s) + 30s = 60s, unit-tested
    # in cmd::attach); a short one keeps this scenario short.
    local limit=15
    on_exit "for d in /dev/nbd0 /dev/nbd1; do '$RLUN' detach \$d 2>/dev/null; done; true"
    on_exit "for f in attach.log; do cp '$W/'\$f '$LAB_OUT/logs/$LAB_SCENARIO-'\$f 2>/dev/null; done; true"
    setsid "$RLUN" attach --replacement-timeout 5s --io-timeout 15s "$url" </dev/null >"$W/attach.out" 2>"$W/attach.log" &
    pid=$!
    wait_for "rlun attach printed its device" 60 grep -q '^/dev/nbd' "$W/attach.out"
    dev=$(head -n 1 "$W/attach.out")
    n=${dev#/dev/}
    wait_for "$dev connected" 30 test -e "/sys/block/$n/pid"
    run "read from $dev while rlun lives" 60 dd if="$dev" of=/dev/null bs=64k count=16 iflag=direct status=none
    run "kill -9 rlun (pid $pid)" 10 kill -9 "$pid"
    wait_for "rlun is gone" 10 bash -c "! kill -0 $pid"
    t0=$SECONDS rc=0
    timeout -k 5 $((limit + 60)) dd if="$dev" of=/dev/null bs=4k count=1 skip=1000 iflag=direct \
        status=none 2>"$W/dd.err" || rc=$?
    took=$((SECONDS - t0))
    log "dd on the orphaned device: exit $rc after ${took}s: $(head -n 1 "$W/dd.err")"
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "I/O on $dev hung for $((limit + 60))s after rlun was killed"
    [ "$rc" -ne 0 ] || fail "a read from $dev succeeded with rlun dead"
    grep -q 'Input/output error' "$W/dd.err" || fail "the read failed, but not with EIO: $(cat "$W/dd.err")"
    [ "$took" -le $((limit + 20)) ] || fail "EIO came after ${took}s, more than the ${limit}s timeout + 20s"
    log "ok: EIO after ${took}s (dead-connection timeout ${limit}s)"
    # The device stays connected (to dead sockets) until someone
    # disconnects it: rlun detach does, though its rlun is gone.
    capture "rlun detach $dev (its rlun was killed)" 60 "$W/detach.out" "$RLUN" detach "$dev"
    wait_for "$dev disconnected" 30 bash -c "! test -e /sys/block/$n/pid"
    note "EIO ${took}s after kill -9 (limit ${limit}s)"
}
