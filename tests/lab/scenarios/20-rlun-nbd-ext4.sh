# about: rlun attach of a LIO LUN over TCP as /dev/nbd0 (kernel nbd over socketpairs), ext4 on it: fsck clean, files survive detach and re-attach, the device matches the backing file
# default: yes
# timeout: 420
#
# 21-nbd-ext4-qemu-nbd.sh is the same ext4 flow with qemu-nbd + nbd-client,
# proving the lab's kernel nbd path independently of rlun.

# attach_wait DEV LOG: wait until rlun has connected DEV (its pid file in sysfs).
attach_wait() {
    local dev=$1 log=$2
    wait_for "rlun attach connected $dev (log: $(tail -n 1 "$log" 2>/dev/null))" 60 \
        test -e "/sys/block/${dev#/dev/}/pid"
    wait_for "$dev has a size" 30 bash -c "[ \"\$(cat /sys/block/${dev#/dev/}/size)\" -gt 0 ]"
}

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    need lio
    need nbd
    local W=$LAB_WORK mnt=$LAB_WORK/mnt dev=/dev/nbd0 backing=$LAB_DATA/lun512.img
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0"
    mkdir -p "$mnt"
    RUST_LOG=rlun=debug setsid "$RLUN" attach "$url" "$dev" --connections 2 </dev/null >"$W/attach.log" 2>&1 &
    local pid=$!
    on_exit "umount '$mnt' 2>/dev/null; '$RLUN' detach /dev/nbd0 2>/dev/null; '$RLUN' detach /dev/nbd1 2>/dev/null; kill $pid 2>/dev/null; true"
    attach_wait "$dev" "$W/attach.log"
    # A device in use is refused before any network I/O.
    if "$RLUN" attach "$url" "$dev" >"$W/busy.log" 2>&1; then
        fail "a second rlun attach of $dev succeeded"
    fi
    grep -q "in use" "$W/busy.log" || fail "busy device: unexpected message: $(cat "$W/busy.log")"
    log "second attach of $dev refused: $(tail -n 1 "$W/busy.log")"
    # No lazy init: nothing may write to the device after the last unmount.
    run "mkfs.ext4 on $dev" 180 mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$dev"
    run "mount ext4" 60 mount -t ext4 "$dev" "$mnt"
    random_file "$W/file.bin" 4
    run "copy a file onto ext4" 60 cp "$W/file.bin" "$mnt/file.bin"
    run "unmount" 60 umount "$mnt"
    run "fsck.ext4 -n -f" 120 fsck.ext4 -n -f "$dev"
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    wait_for "rlun attach exited" 30 bash -c "! kill -0 $pid 2>/dev/null"
    # Re-attach, letting the kernel pick the device; rlun prints it.
    setsid "$RLUN" attach "$url" </dev/null >"$W/attach2.out" 2>"$W/attach2.log" &
    wait_for "rlun attach printed its device" 60 grep -q '^/dev/nbd' "$W/attach2.out"
    dev=$(head -n 1 "$W/attach2.out")
    log "re-attached as $dev"
    attach_wait "$dev" "$W/attach2.log"
    run "mount ext4 read-only again" 60 mount -t ext4 -o ro "$dev" "$mnt"
    assert_same_data "file on ext4 after detach and re-attach" "$W/file.bin" "$mnt/file.bin"
    run "unmount" 60 umount "$mnt"
    run "read all of $dev (O_DIRECT)" 120 dd if="$dev" of="$W/dev.img" bs=1M iflag=direct status=none
    assert_same_data "$dev vs the LUN's backing file" "$backing" "$W/dev.img"
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
}
