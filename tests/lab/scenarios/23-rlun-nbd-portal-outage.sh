# about: fio verify on /dev/nbdN attached by rlun to LIO over TCP while the iSCSI portal is removed and re-added in configfs: rlun reconnects within --replacement-timeout, the kernel nbd timeouts are longer, so fio and dmesg see no I/O error
# default: yes
# timeout: 480

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    need lio
    need nbd
    local W=$LAB_WORK dev n pid fio rc=0 mark new
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0"
    local tpg=$LIO/iscsi/$LIO_IQN/tpgt_1 np
    np=$tpg/np/$LAB_IP_T:$LIO_TCP_PORT
    on_exit "mkdir -p '$np'; echo 1 > '$tpg/enable'; for d in /dev/nbd0 /dev/nbd1; do '$RLUN' detach \$d 2>/dev/null; done; true"
    on_exit "for f in attach.log; do cp '$W/'\$f '$LAB_OUT/logs/$LAB_SCENARIO-'\$f 2>/dev/null; done; true"
    RUST_LOG=rlun=info setsid "$RLUN" attach "$url" </dev/null >"$W/attach.out" 2>"$W/attach.log" &
    pid=$!
    wait_for "rlun attach printed its device" 60 grep -q '^/dev/nbd' "$W/attach.out"
    dev=$(head -n 1 "$W/attach.out") n=${dev#/dev/nbd}
    n=nbd$n
    wait_for "$dev connected" 30 test -e "/sys/block/$n/pid"
    mark=$(dmesg | wc -l)
    # Rate-limited so that the write phase (~16 s) spans the outage.
    setsid fio --name=outage --filename="$dev" --rw=randwrite --bsrange=4k-64k \
        --ioengine=libaio --iodepth=8 --direct=1 --size=16M --rate=1m \
        --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 \
        --output="$W/fio.txt" </dev/null >/dev/null 2>"$W/fio.err" &
    fio=$!
    sleep 3
    run "disable the target portal group" 10 bash -c "echo 0 > '$tpg/enable'"
    run "remove the TCP portal" 10 rmdir "$np"
    sleep 8
    run "re-add the TCP portal" 10 mkdir -p "$np"
    run "enable the target portal group" 10 bash -c "echo 1 > '$tpg/enable'"
    wait_for "fio verify finishes" 300 bash -c "! kill -0 $fio"
    wait "$fio" || rc=$?
    sed 's/^/  | fio: /' "$W/fio.err" | head -n 5
    [ "$rc" -eq 0 ] || fail "fio verify across the portal outage failed (exit $rc): $(head -n 1 "$W/fio.err")"
    grep -qi 'err= *0' "$W/fio.txt" || fail "fio reported errors: $(grep -i 'err=' "$W/fio.txt" | head -n 1)"
    grep -qi 'reconnect' "$W/attach.log" || fail "fio passed but rlun logged no reconnect (was the connection cut?)"
    log "rlun: $(grep -i 'reconnect' "$W/attach.log" | head -n 1)"
    new=$(dmesg | tail -n +"$((mark + 1))" | grep -Ei 'I/O error|blk_update_request|nbd[0-9]+: ' || true)
    [ -z "$new" ] || fail "the kernel logged during the outage: $(echo "$new" | head -n 3 | tr '\n' ' ')"
    log "ok: no I/O error or nbd message in dmesg"
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    wait_for "rlun exited" 30 bash -c "! kill -0 $pid"
}
