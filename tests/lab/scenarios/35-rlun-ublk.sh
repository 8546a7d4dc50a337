# about: rlun attach --ublk of a LIO LUN over TCP as /dev/ublkbN: refused clearly without ublk_drv or on a busy device, fio verify on the raw device with every --cache mode, ext4 with fio verify while rlun is killed with SIGKILL and `attach --recover` takes the device over (0 fio errors, fsck clean, no I/O error in dmesg), the rlun-attach-ublk@ unit's ExecStart killed and started again recovers its device under fio, detach idle, busy (fio ends with an error, not a hang) and after a recovery, a killed rlun's device deleted by `rlun detach`, or by its guard after --io-timeout when nobody recovers it (held I/O fails with EIO, nothing hangs)
# default: yes
# timeout: 900

# ublk_dmesg_mark / ublk_dmesg_clean WHAT: no I/O error since the mark.
ublk_dmesg_mark() { dmesg | wc -l >"$LAB_WORK/.dmesg.mark"; }
ublk_dmesg_clean() {
    local new
    new=$(dmesg | tail -n +"$(($(cat "$LAB_WORK/.dmesg.mark") + 1))" |
        grep -Ei 'I/O error|blk_update_request|EXT4-fs error|Buffer I/O' || true)
    [ -z "$new" ] || fail "$1: the kernel logged: $(echo "$new" | head -n 3 | tr '\n' ' ')"
    log "ok: $1: no I/O error in dmesg"
}

# ublk_gone N: /dev/ublkbN and its sysfs entry are gone.
ublk_gone() { ! test -e "/sys/block/ublkb$1"; }

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    "$RLUN" attach --help | grep -q -- '--ublk' || skip "this rlun has no attach --ublk"
    modinfo ublk_drv >/dev/null 2>&1 || skip "kernel $(uname -r) has no ublk_drv (Debian 12's 6.1 is built without it; the lab's default 6.12 has it)"
    need lio
    local W=$LAB_WORK backing=$LAB_DATA/lun512.img dev n pid rc mnt=$LAB_WORK/mnt fio t0 took rtook mode
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0"
    mkdir -p "$mnt"
    on_exit "umount '$mnt' 2>/dev/null; for d in 0 1 2 3; do '$RLUN' detach /dev/ublkb\$d 2>/dev/null; done; true"
    on_exit "for f in $W/*.log; do cp \"\$f\" '$LAB_OUT/logs/$LAB_SCENARIO-'\$(basename \"\$f\") 2>/dev/null; done; true"

    # Without the driver: the message names the module and the kernel.
    rmmod ublk_drv 2>/dev/null || true
    rc=0
    "$RLUN" attach --ublk "$url" >"$W/nodrv.out" 2>"$W/nodrv.err" || rc=$?
    assert_eq "exit code of attach --ublk without ublk_drv" 1 "$rc"
    grep -q 'modprobe ublk_drv' "$W/nodrv.err" || fail "no hint to modprobe ublk_drv: $(cat "$W/nodrv.err")"
    modules ublk_drv
    wait_for "/dev/ublk-control" 30 test -c /dev/ublk-control
    ublk_dmesg_mark

    # --daemon returns once the device is live; the device on stdout.
    capture "rlun attach --ublk --daemon" 120 "$W/attach.out" \
        env RUST_LOG=rlun=info "$RLUN" attach --ublk --daemon --log-file "$W/attach.log" "$url" --queues 2
    dev=$(head -n 1 "$W/attach.out")
    [[ $dev == /dev/ublkb[0-9]* ]] || fail "rlun attach --ublk printed '$dev', not a ublk device"
    n=${dev#/dev/ublkb}
    wait_for "$dev" 30 test -b "$dev"
    assert_eq "$dev size (bytes)" "$(stat -c %s "$backing")" "$(blockdev --getsize64 "$dev")"
    assert_eq "$dev hardware queues" 2 "$(ls "/sys/block/ublkb$n/mq" | wc -l)"
    assert_eq "$dev queue/fua" 1 "$(cat "/sys/block/ublkb$n/queue/fua")"
    capture "rlun list" 30 "$W/list.txt" "$RLUN" list
    awk -v d="$dev" '$1 == "attached" && $2 == d {ok=1} END {exit !ok}' "$W/list.txt" ||
        fail "rlun list does not show $dev attached: $(cat "$W/list.txt")"
    pid=$(awk -v d="$dev" '$2 == d {print $3}' "$W/list.txt")
    # A second attach of the same device is refused before any login.
    rc=0
    "$RLUN" attach "$url" "$dev" >/dev/null 2>"$W/busy.err" || rc=$?
    assert_eq "exit code of attach to the busy $dev" 1 "$rc"
    grep -q 'exists already' "$W/busy.err" || fail "busy device: $(cat "$W/busy.err")"

    run "fio verify on $dev (direct, QD16, 4-128 KiB random writes)" 300 fio --name=ublk-verify \
        --filename="$dev" --rw=randwrite --bsrange=4k-128k --ioengine=libaio --iodepth=16 \
        --direct=1 --size=8M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 --output="$W/fio.txt"
    grep -qi 'err= *0' "$W/fio.txt" || fail "fio reported errors: $(grep -i 'err=' "$W/fio.txt" | head -n 1)"
    run "fio verify on $dev (O_DIRECT|O_DSYNC: FUA writes)" 300 fio --name=ublk-fua \
        --filename="$dev" --rw=randwrite --bs=4k --ioengine=libaio --iodepth=4 --direct=1 \
        --sync=dsync --size=1M --offset=12M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 \
        --output="$W/fio-fua.txt"
    # LIO's fileio LUN without emulate_tpu has no UNMAP: no discard is
    # offered (a discard would be refused by the kernel, EOPNOTSUPP);
    # zeroing is always offered (WRITE SAME or written zeros).
    if [ "$(cat "/sys/block/ublkb$n/queue/discard_max_bytes")" -gt 0 ]; then
        run "blkdiscard of 1 MiB at 10 MiB" 60 blkdiscard -o 10M -l 1M "$dev"
    else
        log "no discard offered (the LUN has no UNMAP)"
    fi
    run "zeroing of 1 MiB at 11 MiB (BLKZEROOUT: WRITE_ZEROES)" 60 blkdiscard -z -o 11M -l 1M "$dev"
    run "read $dev (O_DIRECT)" 120 dd if="$dev" of="$W/dev.img" bs=1M iflag=direct status=none
    cmp -s <(head -c 1M /dev/zero) <(dd if="$W/dev.img" bs=1M skip=11 count=1 status=none) ||
        fail "1 MiB zeroed with BLKZEROOUT does not read back as zeros"
    t0=$SECONDS
    run "rlun detach $dev (idle)" 120 "$RLUN" detach "$dev"
    wait_for "$dev deleted" 30 ublk_gone "$n"
    wait_for "rlun (pid $pid) exited" 30 bash -c "! kill -0 $pid"
    log "idle detach took $((SECONDS - t0))s"
    assert_same_data "backing file after fio and detach vs what $dev showed" "$W/dev.img" "$backing"
    ublk_dmesg_clean "fio verify on $dev"

    # Every cache mode carries fio verify through the device.
    for mode in none write-back; do
        capture "attach --ublk --cache $mode" 120 "$W/attach-$mode.out" \
            "$RLUN" attach --ublk --daemon --log-file "$W/attach-$mode.log" --cache "$mode" "$url"
        dev=$(head -n 1 "$W/attach-$mode.out")
        run "fio verify on $dev (--cache $mode)" 300 fio --name=ublk-$mode \
            --filename="$dev" --rw=randrw --bsrange=4k-64k --ioengine=libaio --iodepth=16 \
            --direct=1 --size=4M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 \
            --output="$W/fio-$mode.txt"
        run "rlun detach $dev (--cache $mode)" 120 "$RLUN" detach "$dev"
    done

    # Busy detach: fio writes at QD8 until it fails. rlun fsyncs, stops
    # and deletes the device; fio ends with EIO (not a hang) and rlun
    # detach succeeds: every write the kernel handed over reached LIO.
    capture "attach --ublk for a busy detach" 120 "$W/attach-busy.out" \
        "$RLUN" attach --ublk --daemon --log-file "$W/attach-busy.log" "$url"
    dev=$(head -n 1 "$W/attach-busy.out")
    n=${dev#/dev/ublkb}
    setsid fio --name=busy --filename="$dev" --rw=randwrite --bs=64k --ioengine=libaio \
        --iodepth=8 --direct=1 --size=16M --time_based --runtime=300 \
        --output="$W/fio-busy.txt" </dev/null >/dev/null 2>"$W/fio-busy.err" &
    fio=$!
    sleep 5
    kill -0 "$fio" || fail "fio stopped before the detach: $(cat "$W/fio-busy.err")"
    t0=$SECONDS
    run "rlun detach $dev while fio writes" 120 "$RLUN" detach "$dev"
    rc=0
    wait_for "fio ends after the detach (no hang)" 60 bash -c "! kill -0 $fio"
    wait "$fio" || rc=$?
    [ "$rc" -ne 0 ] || fail "fio kept succeeding on a detached device"
    grep -qE 'Input/output error|error=5|err= *5|No such device|error=19' "$W/fio-busy.err" "$W/fio-busy.txt" ||
        fail "fio failed, but not with EIO/ENODEV: $(head -n 2 "$W/fio-busy.err")"
    log "ok: busy detach in $((SECONDS - t0))s, fio ended with exit code $rc: $(grep -m1 -oE 'error=[^,]*' "$W/fio-busy.err" "$W/fio-busy.txt" | head -n 1)"
    wait_for "$dev deleted" 30 ublk_gone "$n"

    # ext4, fio verify on a file, and rlun killed with SIGKILL in the
    # middle: the kernel keeps the device and holds its I/O; attach
    # --recover takes it over and fio finishes without an error.
    capture "rlun attach --ublk for ext4" 120 "$W/attach2.out" \
        env RUST_LOG=rlun=info "$RLUN" attach --ublk --daemon --log-file "$W/attach2.log" "$url"
    dev=$(head -n 1 "$W/attach2.out")
    n=${dev#/dev/ublkb}
    run "mkfs.ext4 on $dev" 180 mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$dev"
    run "mount ext4" 60 mount -t ext4 "$dev" "$mnt"
    pid=$(awk -v d="$dev" '$2 == d {print $3}' <("$RLUN" list))
    [[ $pid =~ ^[0-9]+$ ]] || fail "cannot find the pid of the rlun serving $dev"
    ublk_dmesg_mark
    # Rate-limited (24 MiB written and read back at 4 MiB/s: about 12 s)
    # so that the kill lands inside the run however fast the VM is: a fast
    # run once finished within the 4 s before the kill.
    setsid fio --name=ext4-verify --filename="$mnt/verify.dat" --rw=randwrite --bs=4k \
        --ioengine=libaio --iodepth=16 --direct=1 --size=6M --loops=4 --rate=4m --verify=crc32c \
        --verify_state_save=0 --verify_fatal=1 --do_verify=1 --output="$W/fio-ext4.txt" \
        </dev/null >/dev/null 2>"$W/fio-ext4.err" &
    fio=$!
    sleep 4
    kill -0 "$fio" || fail "fio ended before the kill: $(cat "$W/fio-ext4.err"; grep -E "error|err=|run=|WRITE:|READ:" "$W/fio-ext4.txt" | head -n 6)"
    run "kill -9 rlun (pid $pid) during fio verify" 10 kill -9 "$pid"
    wait_for "rlun is gone" 10 bash -c "! kill -0 $pid"
    sleep 3
    kill -0 "$fio" || fail "fio ended while no rlun served $dev: $(head -n 3 "$W/fio-ext4.err")"
    t0=$SECONDS
    capture "rlun attach --recover $dev" 120 "$W/recover.out" \
        env RUST_LOG=rlun=info "$RLUN" attach --recover --daemon --log-file "$W/recover.log" "$url" "$dev"
    rtook=$((SECONDS - t0))
    assert_eq "the recovered device" "$dev" "$(head -n 1 "$W/recover.out")"
    rc=0
    wait_for "fio finishes after the recovery" 300 bash -c "! kill -0 $fio"
    wait "$fio" || rc=$?
    assert_eq "fio's exit code across kill -9 and recovery" 0 "$rc"
    grep -qi 'err= *0' "$W/fio-ext4.txt" || fail "fio reported errors: $(grep -i 'err=' "$W/fio-ext4.txt" | head -n 1)"
    run "unmount" 60 umount "$mnt"
    run "fsck.ext4 -n -f" 120 fsck.ext4 -n -f "$dev"
    ublk_dmesg_clean "kill -9 and recovery under ext4"

    # A second recovery attempt of a live device is refused.
    rc=0
    "$RLUN" attach --recover "$url" "$dev" >/dev/null 2>"$W/recover2.err" || rc=$?
    assert_eq "exit code of --recover of a live device" 1 "$rc"
    grep -q 'live process' "$W/recover2.err" || fail "recover of a live device: $(cat "$W/recover2.err")"

    # A recovered device detaches like any other.
    run "rlun detach $dev (recovered)" 120 "$RLUN" detach "$dev"
    wait_for "$dev deleted" 30 ublk_gone "$n"

    # The rlun-attach-ublk@ unit's ExecStart, killed and started again (what
    # Restart=on-failure does): the second run finds the device the first
    # left and recovers it; fio on it, direct, sees no error.
    local repo unit start
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
    unit=$repo/packaging/systemd/rlun-attach-ublk@.service
    start=$(sed -n 's/^ExecStart=//p' "$unit" | sed 's/%i/lab/g; s|^/usr/bin/rlun|'"$RLUN"'|')
    [ -n "$start" ] || fail "no ExecStart= in $unit"
    printf '[targets.lab]\nurl = "%s"\n' "$url" >"$W/rlun.toml"
    chmod 600 "$W/rlun.toml"
    local -a cmd
    read -r -a cmd <<<"$start"
    log "the unit's ExecStart: ${cmd[*]}"
    RLUN_CONFIG=$W/rlun.toml RUST_LOG=rlun=info setsid "${cmd[@]}" </dev/null >"$W/unit1.out" 2>"$W/unit1.log" &
    pid=$!
    wait_for "the unit's rlun attached a device" 60 grep -q '^/dev/ublkb' "$W/unit1.out"
    dev=$(head -n 1 "$W/unit1.out")
    n=${dev#/dev/ublkb}
    # Rate-limited as the ext4 run above, so that the kill lands inside it.
    setsid fio --name=unit-verify --filename="$dev" --rw=randwrite --bs=4k --ioengine=libaio \
        --iodepth=16 --direct=1 --size=8M --loops=3 --rate=4m --verify=crc32c --verify_state_save=0 \
        --verify_fatal=1 --do_verify=1 --output="$W/fio-unit.txt" </dev/null >/dev/null 2>"$W/fio-unit.err" &
    fio=$!
    sleep 3
    kill -0 "$fio" || fail "fio ended before the unit's rlun was killed: $(cat "$W/fio-unit.err"; grep -E "error|err=|run=" "$W/fio-unit.txt" | head -n 6)"
    run "kill -9 the unit's rlun (pid $pid) during fio verify" 10 kill -9 "$pid"
    wait_for "rlun is gone" 10 bash -c "! kill -0 $pid"
    RLUN_CONFIG=$W/rlun.toml RUST_LOG=rlun=info setsid "${cmd[@]}" </dev/null >"$W/unit2.out" 2>"$W/unit2.log" &
    pid=$!
    wait_for "the restarted rlun took $dev over" 60 grep -q '^/dev/ublkb' "$W/unit2.out"
    assert_eq "the device the restart serves" "$dev" "$(head -n 1 "$W/unit2.out")"
    grep -q 'recovering it' "$W/unit2.log" || fail "the restart did not say it recovered $dev: $(tail -n 3 "$W/unit2.log")"
    rc=0
    wait_for "fio finishes after the restart" 300 bash -c "! kill -0 $fio"
    wait "$fio" || rc=$?
    assert_eq "fio's exit code across the unit's kill -9 and restart" 0 "$rc"
    ublk_dmesg_clean "kill -9 and the unit's restart"

    # kill -9 with no recovery: the kernel holds the I/O; rlun detach
    # deletes the device and the held read fails with EIO, nothing hangs.
    run "kill -9 rlun (pid $pid), no recovery" 10 kill -9 "$pid"
    wait_for "rlun is gone" 10 bash -c "! kill -0 $pid"
    setsid dd if="$dev" of=/dev/null bs=4k count=1 skip=1000 iflag=direct status=none \
        </dev/null 2>"$W/dd.err" &
    local dd=$!
    sleep 3
    kill -0 "$dd" || fail "the read of $dev did not wait for a recovery: $(cat "$W/dd.err")"
    capture "rlun detach $dev (its rlun was killed)" 60 "$W/detach.out" "$RLUN" detach "$dev"
    wait_for "$dev deleted" 30 ublk_gone "$n"
    rc=0
    wait_for "the held read ends" 30 bash -c "! kill -0 $dd"
    wait "$dd" || rc=$?
    [ "$rc" -ne 0 ] || fail "the read held on the deleted device succeeded"
    log "the held read ended with exit code $rc: $(head -n 1 "$W/dd.err")"

    # kill -9 and nobody recovers: the guard rlun attach left behind
    # deletes the device after --io-timeout, the held read fails with EIO.
    capture "rlun attach --ublk --io-timeout 8s" 120 "$W/attach4.out" \
        env RUST_LOG=rlun=info "$RLUN" attach --ublk --daemon --log-file "$W/attach4.log" --io-timeout 8s "$url"
    dev=$(head -n 1 "$W/attach4.out")
    n=${dev#/dev/ublkb}
    pid=$(awk -v d="$dev" '$2 == d {print $3}' <("$RLUN" list))
    grep -q "guard of $dev started" "$W/attach4.log" || fail "no guard started: $(tail -n 3 "$W/attach4.log")"
    run "kill -9 rlun (pid $pid), no recovery, no detach" 10 kill -9 "$pid"
    t0=$SECONDS rc=0
    timeout -k 5 60 dd if="$dev" of=/dev/null bs=4k count=1 skip=2000 iflag=direct status=none \
        2>"$W/dd2.err" || rc=$?
    took=$((SECONDS - t0))
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "I/O on $dev hung for 60s after rlun was killed"
    [ "$rc" -ne 0 ] || fail "a read from $dev succeeded with rlun dead and no recovery"
    log "the read of the abandoned device: exit $rc after ${took}s: $(head -n 1 "$W/dd2.err")"
    [ "$took" -le 30 ] || fail "the read failed only after ${took}s (io-timeout 8s)"
    wait_for "$dev deleted by the guard" 30 ublk_gone "$n"
    note "fio verify on ext4 across kill -9 + attach --recover (${rtook}s): 0 errors, fsck clean; every --cache mode; orphan deleted by detach; abandoned device deleted by the guard after ${took}s (io-timeout 8s)"
}
