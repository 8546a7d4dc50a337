# about: rlun attach --daemon of a LIO LUN over TCP: returns with the device ready and listed, the kernel is offered FUA (LIO reports no DPOFUA: WRITE + SYNCHRONIZE CACHE), fio verify (direct, QD16, and O_DSYNC writes) on /dev/nbdN, a buffered write to the held-open device reaches LIO at rlun detach and at SIGTERM (the fsync before the disconnect), rlun detach idle and during an fio run
# default: yes
# timeout: 600

# nbd_dmesg_mark: remember how much of the kernel log existed.
nbd_dmesg_mark() { dmesg | wc -l >"$LAB_WORK/.dmesg.mark"; }
# nbd_dmesg_clean WHAT: no I/O error, nbd or FUA complaint since the mark.
nbd_dmesg_clean() {
    local new
    new=$(dmesg | tail -n +"$(($(cat "$LAB_WORK/.dmesg.mark") + 1))" |
        grep -Ei 'I/O error|blk_update_request|nbd[0-9]+: .*(timed out|dead|error|invalid)|FUA' || true)
    [ -z "$new" ] || fail "$1: the kernel logged: $(echo "$new" | head -n 3 | tr '\n' ' ')"
    log "ok: $1: no I/O error, nbd or FUA message in dmesg"
}

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    need lio
    need nbd
    local W=$LAB_WORK backing=$LAB_DATA/lun512.img dev n pid rc t0
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0"
    on_exit "for d in /dev/nbd0 /dev/nbd1 /dev/nbd2; do '$RLUN' detach \$d 2>/dev/null; done; true"
    # rlun's own logs next to the scenario's, for a failure's post-mortem.
    on_exit "for f in attach.log attach2.log; do cp '$W/'\$f '$LAB_OUT/logs/$LAB_SCENARIO-'\$f 2>/dev/null; done; true"
    nbd_dmesg_mark

    # --daemon returns once the device is connected; the device on stdout.
    capture "rlun attach --daemon" 120 "$W/attach.out" \
        env RUST_LOG=rlun=info "$RLUN" attach --daemon --log-file "$W/attach.log" "$url" --connections 2
    dev=$(head -n 1 "$W/attach.out")
    [[ $dev == /dev/nbd[0-9]* ]] || fail "rlun attach --daemon printed '$dev', not a device"
    n=${dev#/dev/}
    test -e "/sys/block/$n/pid" || fail "rlun attach --daemon returned before $dev was connected"
    assert_eq "$dev size (bytes) as soon as attach returned" "$(stat -c %s "$backing")" \
        "$(($(cat "/sys/block/$n/size") * 512))"
    capture "rlun list" 30 "$W/list.txt" "$RLUN" list
    # KIND WHAT PID LUNS TARGET, after a header line.
    awk -v d="$dev" '$1 == "attached" && $2 == d && $3 ~ /^[0-9]+$/ && $4 == "0" && /'"$LIO_IQN"'/ {ok=1} END {exit !ok}' \
        "$W/list.txt" || fail "rlun list does not show $dev attached with its LUN and target: $(cat "$W/list.txt")"
    pid=$(awk -v d="$dev" '$2 == d {print $3}' "$W/list.txt")
    kill -0 "$pid" || fail "rlun list shows pid $pid, which is not running"
    # FUA offered to the kernel again; LIO's fileio LUN has no DPOFUA.
    assert_eq "$dev queue/fua (SEND_FUA offered)" 1 "$(cat "/sys/block/$n/queue/fua")"
    capture "rlun info (DPOFUA of the LIO LUN)" 60 "$W/info.json" "$RLUN" info --json "$url"

    run "fio verify on $dev (direct, QD16, 4-128 KiB random writes)" 300 fio --name=nbd-verify \
        --filename="$dev" --rw=randwrite --bsrange=4k-128k --ioengine=libaio --iodepth=16 \
        --direct=1 --size=8M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 --output="$W/fio.txt"
    run "fio verify on $dev (O_DIRECT|O_DSYNC: FUA writes)" 300 fio --name=nbd-fua \
        --filename="$dev" --rw=randwrite --bs=4k --ioengine=libaio --iodepth=4 --direct=1 \
        --sync=dsync --size=1M --offset=12M --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 \
        --output="$W/fio-fua.txt"
    grep -qi 'err= *0' "$W/fio.txt" || fail "fio reported errors: $(grep -i 'err=' "$W/fio.txt" | head -n 1)"
    run "read $dev (O_DIRECT)" 120 dd if="$dev" of="$W/dev.img" bs=1M iflag=direct status=none
    nbd_dmesg_clean "fio verify on $dev"

    # A buffered write right before the detach through a descriptor this
    # shell keeps open, as a running program would: the kernel writes a
    # block device's page cache back on its own only after the writeback
    # delay (30 s) or when the last descriptor closes (which also wakes
    # udev's close-after-write rescan), and drops it at a disconnect, so
    # only rlun's fsync of the device before the disconnect gets this 1 MiB
    # to the target.
    random_file "$W/pattern.bin" 1
    local holder
    exec {holder}<>"$dev"
    run "buffered write of 1 MiB at 14 MiB through an open descriptor of $dev" 60 \
        bash -c "dd if='$W/pattern.bin' bs=1M seek=14 conv=notrunc status=none >&$holder"
    grep -E '^(Dirty|Writeback):' /proc/meminfo | sed 's/^/  | /'
    dd if="$W/pattern.bin" of="$W/dev.img" bs=1M seek=14 conv=notrunc status=none

    # Idle detach: rlun exits 0, the device is gone from the kernel and
    # from rlun list, what the device showed is in the backing file.
    t0=$SECONDS
    run "rlun detach $dev (idle; held open)" 120 "$RLUN" detach "$dev"
    wait_for "rlun (pid $pid) exited" 30 bash -c "! kill -0 $pid"
    log "idle detach took $((SECONDS - t0))s"
    # The open descriptor keeps the kernel's device state until it closes.
    exec {holder}>&-
    wait_for "$dev disconnected once its holder closed it" 30 bash -c "! test -e /sys/block/$n/pid"
    capture "rlun list after detach" 30 "$W/list2.txt" "$RLUN" list
    ! grep -q "$dev" "$W/list2.txt" || fail "rlun list still shows $dev after detach"
    run "read 1 MiB at 14 MiB of the backing file" 30 \
        dd if="$backing" of="$W/back.bin" bs=1M skip=14 count=1 status=none
    assert_same_data "the buffered write before the detach, on LIO's backing file" "$W/pattern.bin" "$W/back.bin"
    assert_same_data "backing file after fio and detach vs what $dev showed" "$W/dev.img" "$backing"

    # Busy detach: fio writes with O_DIRECT at QD8 until it fails. The
    # kernel fails the requests queued or sent after the disconnect with
    # EIO, so fio ends with an I/O error (not a hang); rlun detach succeeds:
    # every write the kernel had handed over reached the target.
    RUST_LOG=rlun=info setsid "$RLUN" attach "$url" "$dev" </dev/null >"$W/attach2.out" 2>"$W/attach2.log" &
    pid=$!
    wait_for "rlun attached $dev again" 60 test -e "/sys/block/$n/pid"
    setsid fio --name=busy --filename="$dev" --rw=randwrite --bs=64k --ioengine=libaio \
        --iodepth=8 --direct=1 --size=16M --time_based --runtime=300 \
        --output="$W/fio-busy.txt" </dev/null >/dev/null 2>"$W/fio-busy.err" &
    local fio=$!
    sleep 8
    kill -0 "$fio" || fail "fio stopped before the detach: $(cat "$W/fio-busy.err")"
    t0=$SECONDS
    run "rlun detach $dev while fio writes" 120 "$RLUN" detach "$dev"
    log "busy detach took $((SECONDS - t0))s"
    wait_for "rlun (pid $pid) exited" 30 bash -c "! kill -0 $pid"
    rc=0
    wait_for "fio ends after the detach (no hang)" 90 bash -c "! kill -0 $fio"
    wait "$fio" || rc=$?
    sed 's/^/  | fio: /' "$W/fio-busy.err" | head -n 5
    [ "$rc" -ne 0 ] || fail "fio kept succeeding on a detached device"
    grep -qE 'Input/output error|error=5|err= *5' "$W/fio-busy.err" "$W/fio-busy.txt" ||
        fail "fio failed, but not with EIO: $(head -n 2 "$W/fio-busy.err")"
    log "ok: fio on the busy device ended with EIO (exit code $rc) $((SECONDS - t0))s after detach began"
    test ! -e "/sys/block/$n/pid" || fail "$dev still connected after the busy detach"

    # SIGTERM alone (what systemd sends; no `rlun detach` to fsync first):
    # rlun's own fsync before the disconnect gets a buffered write of a
    # process that holds the device open to the target.
    RUST_LOG=rlun=info setsid "$RLUN" attach "$url" "$dev" </dev/null >"$W/attach3.out" 2>"$W/attach3.log" &
    pid=$!
    on_exit "cp '$W/attach3.log' '$LAB_OUT/logs/$LAB_SCENARIO-attach3.log' 2>/dev/null; true"
    wait_for "rlun attached $dev a third time" 60 test -e "/sys/block/$n/pid"
    random_file "$W/pattern2.bin" 1
    exec {holder}<>"$dev"
    run "buffered write of 1 MiB at 15 MiB through an open descriptor of $dev" 60 \
        bash -c "dd if='$W/pattern2.bin' bs=1M seek=15 conv=notrunc status=none >&$holder"
    grep -E '^(Dirty|Writeback):' /proc/meminfo | sed 's/^/  | /'
    kill -TERM "$pid"
    wait_for "rlun (pid $pid) exited after SIGTERM" 120 bash -c "! kill -0 $pid"
    rc=0
    wait "$pid" || rc=$?
    assert_eq "rlun attach exit code after SIGTERM" 0 "$rc"
    grep -q "flushed $dev" "$W/attach3.log" || fail "rlun did not log the fsync of $dev: $(tail -n 5 "$W/attach3.log")"
    exec {holder}>&-
    wait_for "$dev disconnected once its holder closed it" 30 bash -c "! test -e /sys/block/$n/pid"
    run "read 1 MiB at 15 MiB of the backing file" 30 \
        dd if="$backing" of="$W/back2.bin" bs=1M skip=15 count=1 status=none
    assert_same_data "the buffered write before SIGTERM, on LIO's backing file" "$W/pattern2.bin" "$W/back2.bin"
    note "DPOFUA=$(json_get "$W/info.json" dpofua); busy detach: fio got EIO; buffered writes reached LIO at detach and at SIGTERM"
}
