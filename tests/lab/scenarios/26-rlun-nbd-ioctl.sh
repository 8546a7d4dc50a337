# about: rlun attach forced onto the nbd ioctl interface (RLUN_NBD_INTERFACE=ioctl, the fallback for kernels without nbd netlink): fio verify on /dev/nbdN, detach, the device matches the backing file; a killed rlun leaves a device the kernel has cleared (no data, writes fail), at once
# default: yes
# timeout: 480

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    need lio
    need nbd
    local W=$LAB_WORK backing=$LAB_DATA/lun4k.img dev n pid rc t0
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/1"
    on_exit "for d in /dev/nbd0 /dev/nbd1; do '$RLUN' detach \$d 2>/dev/null; done; true"
    on_exit "for f in attach.log attach2.log; do cp '$W/'\$f '$LAB_OUT/logs/$LAB_SCENARIO-'\$f 2>/dev/null; done; true"
    RLUN_NBD_INTERFACE=ioctl RUST_LOG=rlun=info setsid "$RLUN" attach "$url" --connections 2 \
        </dev/null >"$W/attach.out" 2>"$W/attach.log" &
    pid=$!
    wait_for "rlun attach (ioctl) printed its device" 60 grep -q '^/dev/nbd' "$W/attach.out"
    dev=$(head -n 1 "$W/attach.out")
    n=${dev#/dev/}
    test -e "/sys/block/$n/pid" || fail "$dev printed but not connected"
    grep -q 'interface=Ioctl' "$W/attach.log" || fail "rlun did not use the ioctl interface: $(grep attached "$W/attach.log")"
    assert_eq "$dev logical block size" 4096 "$(cat "/sys/block/$n/queue/logical_block_size")"
    assert_eq "$dev size (bytes)" "$(stat -c %s "$backing")" "$(($(cat "/sys/block/$n/size") * 512))"
    assert_eq "$dev queue/fua" 1 "$(cat "/sys/block/$n/queue/fua")"
    run "fio verify on $dev (ioctl interface, 2 connections)" 300 fio --name=ioctl-verify \
        --filename="$dev" --rw=randwrite --bsrange=4k-128k --ioengine=libaio --iodepth=16 \
        --direct=1 --size=8M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 --output="$W/fio.txt"
    run "read $dev (O_DIRECT)" 120 dd if="$dev" of="$W/dev.img" bs=1M iflag=direct status=none
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    wait_for "rlun exited" 30 bash -c "! kill -0 $pid"
    test ! -e "/sys/block/$n/pid" || fail "$dev still connected after detach"
    assert_same_data "backing file after fio over the ioctl interface vs what $dev showed" "$W/dev.img" "$backing"

    # kill -9: the thread in NBD_DO_IT dies with rlun, and the kernel
    # shuts the sockets down and clears the device itself: no owner, size
    # 0, so reads find nothing (EOF) and writes fail, at once.
    RLUN_NBD_INTERFACE=ioctl setsid "$RLUN" attach "$url" "$dev" </dev/null >"$W/attach2.out" 2>"$W/attach2.log" &
    pid=$!
    wait_for "rlun attached $dev again (ioctl)" 60 test -e "/sys/block/$n/pid"
    run "kill -9 rlun" 10 kill -9 "$pid"
    wait_for "rlun is gone" 10 bash -c "! kill -0 $pid"
    t0=$SECONDS
    wait_for "the kernel disconnected $dev" 30 bash -c "! test -e /sys/block/$n/pid"
    assert_eq "$dev size after its rlun was killed" 0 "$(cat "/sys/block/$n/size")"
    rc=0
    timeout -k 5 60 dd if="$dev" of="$W/after-kill.bin" bs=4k count=1 iflag=direct status=none 2>"$W/dd.err" || rc=$?
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "a read from $dev hung after rlun was killed"
    [ ! -s "$W/after-kill.bin" ] || fail "a read from $dev returned data with rlun dead"
    rc=0
    timeout -k 5 60 dd if=/dev/zero of="$dev" bs=4k count=1 oflag=direct status=none 2>"$W/ddw.err" || rc=$?
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "a write to $dev hung after rlun was killed"
    [ "$rc" -ne 0 ] || fail "a write to $dev succeeded with rlun dead"
    log "ok: after kill -9, in $((SECONDS - t0))s: $dev disconnected, size 0, a read returns no data, a write fails: $(head -n 1 "$W/ddw.err")"
}
