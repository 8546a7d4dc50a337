# about: rlun cp over iSER while LIO's target portal group is disabled and its iSER portal removed and re-added: the copy reconnects and finishes byte-exact, with pooled and with per-command registration; with the target gone for good it fails with the replacement-timeout error instead of hanging
# default: yes
# timeout: 600

scenario() {
    need lio_iser
    local W=$LAB_WORK url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/0"
    local tpg=$LIO/iscsi/$LIO_IQN/tpgt_1 np backing=$LAB_DATA/lun512.img pid rc=0
    np=$tpg/np/$LAB_IP_T:$LIO_ISER_PORT
    on_exit "[ -d '$np' ] || { mkdir -p '$np' && echo 1 > '$np/iser'; }; echo 1 > '$tpg/enable'; true"

    # Read the whole LUN slowly enough (queue depth 1, 64 KiB) to cut it
    # off halfway: once with buffers from the registered pool, once with
    # every buffer registered per command, whose registrations the lost
    # connection's tasks must release (RLUN_ISER_REGISTRATION).
    local mode
    for mode in pool per-command; do
        rm -f "$W/read.img"
        setsid env RLUN_ISER_REGISTRATION=$mode "$RLUN" -v cp --no-progress --qd 1 --bs 64k "$url" "$W/read.img" \
            </dev/null >"$W/cp.log" 2>&1 &
        pid=$!
        rc=0
        wait_for "the copy has started ($mode registration)" 60 bash -c "[ -s '$W/read.img' ]"
        run "disable the target portal group" 30 bash -c "echo 0 > '$tpg/enable'"
        run "remove the iSER portal" 10 rmdir "$np"
        sleep 5
        run "re-add the iSER portal" 10 mkdir -p "$np"
        cfs "$np/iser" 1
        run "enable the target portal group" 10 bash -c "echo 1 > '$tpg/enable'"
        wait "$pid" || rc=$?
        sed 's/^/  | /' "$W/cp.log" | tail -n 15
        [ "$rc" -eq 0 ] || fail "rlun cp over iSER ($mode registration) across the portal outage failed with exit code $rc: $(tail -n 1 "$W/cp.log")"
        grep -q "reconnecting" "$W/cp.log" || fail "the copy ($mode registration) finished but no reconnect was logged (was the connection cut at all?)"
        assert_same_data "LUN read over iSER ($mode registration) across a portal outage vs the backing file" "$backing" "$W/read.img"
    done

    # The target gone for good in the middle of a copy: the replacement
    # timeout ends it with its own error, no hang.
    rm -f "$W/gone.img"
    setsid "$RLUN" -v cp --no-progress --qd 1 --bs 64k --replacement-timeout 15s "$url" "$W/gone.img" </dev/null >"$W/gone.log" 2>&1 &
    pid=$!
    wait_for "the second copy has started" 60 bash -c "[ -s '$W/gone.img' ]"
    run "disable the target portal group for good" 10 bash -c "echo 0 > '$tpg/enable'"
    rc=0
    wait_for "rlun cp gives up within the replacement timeout and some slack" 120 bash -c "! kill -0 $pid 2>/dev/null"
    wait "$pid" || rc=$?
    sed 's/^/  | /' "$W/gone.log" | tail -n 5
    [ "$rc" -ne 0 ] || fail "rlun cp succeeded against a target that went away"
    grep -qi "replacement timeout" "$W/gone.log" || fail "rlun cp failed without the replacement-timeout error: $(tail -n 1 "$W/gone.log")"
    log "ok: target gone: exit code $rc: $(grep -i 'replacement timeout' "$W/gone.log" | tail -n 1)"
    run "enable the target portal group again" 10 bash -c "echo 1 > '$tpg/enable'"
}
