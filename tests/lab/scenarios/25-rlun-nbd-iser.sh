# about: rlun attach over iSER (soft-RoCE) of LIO's 4096-byte-block LUN as /dev/nbdN: 4 KiB logical blocks, fio verify, the device matches the backing file after detach
# default: yes
# timeout: 480

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    local W=$LAB_WORK url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/1" rc=0
    timeout -k 5 30 "$RLUN" info --json "$url" >"$W/probe.json" 2>"$W/probe.err" || rc=$?
    if [ "$rc" -ne 0 ] && grep -qi 'not available\|not implemented' "$W/probe.err"; then
        skip "rlun has no iSER: $(head -n 1 "$W/probe.err")"
    fi
    need lio_iser
    need nbd
    local backing=$LAB_DATA/lun4k.img dev n pid
    on_exit "for d in /dev/nbd0 /dev/nbd1; do '$RLUN' detach \$d 2>/dev/null; done; true"
    on_exit "for f in attach.log; do cp '$W/'\$f '$LAB_OUT/logs/$LAB_SCENARIO-'\$f 2>/dev/null; done; true"
    setsid "$RLUN" attach "$url" </dev/null >"$W/attach.out" 2>"$W/attach.log" &
    pid=$!
    wait_for "rlun attach over iSER printed its device" 90 grep -q '^/dev/nbd' "$W/attach.out"
    dev=$(head -n 1 "$W/attach.out")
    n=${dev#/dev/}
    wait_for "$dev connected" 30 test -e "/sys/block/$n/pid"
    assert_eq "$dev logical block size" 4096 "$(cat "/sys/block/$n/queue/logical_block_size")"
    run "read $dev over iSER (O_DIRECT)" 120 dd if="$dev" of="$W/before.img" bs=1M iflag=direct status=none
    assert_same_data "$dev over iSER vs the backing file" "$backing" "$W/before.img"
    run "fio verify on $dev over iSER" 300 fio --name=iser-nbd --filename="$dev" \
        --rw=randwrite --bsrange=4k-128k --ioengine=libaio --iodepth=16 --direct=1 \
        --size=8M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 --output="$W/fio.txt"
    run "read $dev over iSER (O_DIRECT)" 120 dd if="$dev" of="$W/after.img" bs=1M iflag=direct status=none
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    wait_for "rlun exited" 30 bash -c "! kill -0 $pid"
    assert_same_data "backing file after fio over iSER vs what $dev showed" "$W/after.img" "$backing"
}
