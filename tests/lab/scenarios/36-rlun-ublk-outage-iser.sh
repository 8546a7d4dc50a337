# about: /dev/ublkbN through rlun under fault and over iSER: fio verify while LIO's TCP portal is removed and re-added (rlun reconnects, fio and dmesg see no error); over iSER (soft-RoCE) of the 4096-byte-block LUN: 4 KiB logical blocks, fio verify, the device matches the backing file after detach
# default: yes
# timeout: 600

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    "$RLUN" attach --help | grep -q -- '--ublk' || skip "this rlun has no attach --ublk"
    modinfo ublk_drv >/dev/null 2>&1 || skip "kernel $(uname -r) has no ublk_drv (the lab's default 6.12 has it)"
    need lio
    modules ublk_drv
    wait_for "/dev/ublk-control" 30 test -c /dev/ublk-control
    local W=$LAB_WORK dev n pid fio rc=0 mark new
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0"
    local tpg=$LIO/iscsi/$LIO_IQN/tpgt_1 np
    np=$tpg/np/$LAB_IP_T:$LIO_TCP_PORT
    on_exit "mkdir -p '$np'; echo 1 > '$tpg/enable'; for d in 0 1 2; do '$RLUN' detach /dev/ublkb\$d 2>/dev/null; done; true"
    on_exit "for f in $W/*.log; do cp \"\$f\" '$LAB_OUT/logs/$LAB_SCENARIO-'\$(basename \"\$f\") 2>/dev/null; done; true"

    # The portal goes away for 8 s in the middle of fio verify.
    RUST_LOG=rlun=info setsid "$RLUN" attach --ublk "$url" </dev/null >"$W/attach.out" 2>"$W/attach.log" &
    pid=$!
    wait_for "rlun attach --ublk printed its device" 60 grep -q '^/dev/ublkb' "$W/attach.out"
    dev=$(head -n 1 "$W/attach.out")
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
    new=$(dmesg | tail -n +"$((mark + 1))" | grep -Ei 'I/O error|blk_update_request|ublk' || true)
    [ -z "$new" ] || fail "the kernel logged during the outage: $(echo "$new" | head -n 3 | tr '\n' ' ')"
    log "ok: no I/O error or ublk message in dmesg"
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    wait_for "rlun exited" 30 bash -c "! kill -0 $pid"

    # iSER.
    local iser="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/1" backing=$LAB_DATA/lun4k.img
    rc=0
    timeout -k 5 30 "$RLUN" info --json "$iser" >"$W/probe.json" 2>"$W/probe.err" || rc=$?
    if [ "$rc" -ne 0 ] && grep -qi 'not available\|not implemented' "$W/probe.err"; then
        note "TCP portal outage passed; iSER not run: $(head -n 1 "$W/probe.err")"
        return 0
    fi
    need lio_iser
    capture "rlun attach --ublk over iSER" 120 "$W/attach-iser.out" \
        env RUST_LOG=rlun=info "$RLUN" attach --ublk --daemon --log-file "$W/attach-iser.log" "$iser"
    dev=$(head -n 1 "$W/attach-iser.out")
    n=${dev#/dev/}
    assert_eq "$dev logical block size" 4096 "$(cat "/sys/block/$n/queue/logical_block_size")"
    run "read $dev over iSER (O_DIRECT)" 120 dd if="$dev" of="$W/before.img" bs=1M iflag=direct status=none
    assert_same_data "$dev over iSER vs the backing file" "$backing" "$W/before.img"
    run "fio verify on $dev over iSER" 300 fio --name=iser-ublk --filename="$dev" \
        --rw=randwrite --bsrange=4k-128k --ioengine=libaio --iodepth=16 --direct=1 \
        --size=8M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 --output="$W/fio-iser.txt"
    run "read $dev over iSER (O_DIRECT)" 120 dd if="$dev" of="$W/after.img" bs=1M iflag=direct status=none
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    assert_same_data "backing file after fio over iSER vs what $dev showed" "$W/after.img" "$backing"
    note "portal outage under fio: 0 errors, reconnected; iSER: 4 KiB blocks, fio verify, data matches"
}
