# about: rlun mount (FUSE) of a LIO LUN over iSER, without and with rlun's page cache (--direct-io --cache write-back): the file matches the backing file, an fio verify job (direct I/O, queue depth 8) passes through it, what it wrote lands in the backing file, rlun copied no byte of it between the network and its buffers (copied_bytes 0 at unmount), and with the cache its page memory was registered with the RDMA device at connect
# default: yes
# timeout: 720

# mount_round NAME MOUNT-OPTIONS...: one mount, fio verify, copy, unmount, counters.
mount_round() {
    local name=$1
    shift
    local W=$LAB_WORK/$name url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/0" mnt=$LAB_WORK/$name/mnt
    local backing=$LAB_DATA/lun512.img file
    mkdir -p "$mnt"
    setsid "$RLUN" -v mount "$@" "$url" "$mnt" </dev/null >"$W/mount.log" 2>&1 &
    local pid=$!
    on_exit "fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt'; sleep 1; kill $pid 2>/dev/null; true"
    wait_for "a regular file appears in the rlun mount ($name)" 90 \
        bash -c "find '$mnt' -maxdepth 2 -type f | grep -q ."
    file=$(find "$mnt" -maxdepth 2 -type f | head -n 1)
    log "LUN file in the mount ($name): $file"
    assert_same_data "file in the rlun mount over iSER vs the backing file ($name)" "$backing" "$file"
    run "fio verify through the mount over iSER ($name)" 240 fio --name=iser-verify --filename="$file" \
        --rw=randwrite --bsrange=4k-64k --ioengine=libaio --iodepth=8 --direct=1 \
        --size=8M --verify=crc32c --verify_fatal=1 --do_verify=1 --output="$W/fio.txt"
    run "copy the file in the mount ($name)" 120 dd if="$file" of="$W/mounted.img" bs=1M iflag=direct status=none
    run "unmount ($name)" 60 fusermount3 -u "$mnt"
    wait_for "rlun mount exits after the unmount ($name)" 30 bash -c "! kill -0 $pid 2>/dev/null"
    # Zero copy through the mount: rlun logs its data-path counters at unmount.
    local line
    line=$(grep "data path at unmount" "$W/mount.log" | tail -n 1)
    [ -n "$line" ] || fail "rlun mount logged no data-path counters at unmount ($name): $(tail -n 2 "$W/mount.log")"
    log "$line"
    grep -qE "(^| )copied_bytes=0 " <<<"$line" ||
        fail "rlun copied SCSI data through the mount over iSER ($name): $line"
    assert_same_data "backing file after the fio job over iSER vs what the mount showed ($name)" "$W/mounted.img" "$backing"
    MOUNT_LINE=$line
}

scenario() {
    rlun_has mount || skip "rlun has no 'mount' subcommand"
    need lio_iser
    modules fuse
    mount_round nocache
    # With rlun's cache: its pages (64 MiB budget: 56 MiB of pages, 14
    # arenas of 4 MiB) are reserved before login and registered when the
    # connection is made; fills and write-backs still copy nothing between
    # the network and their buffers (the cache's own copies are counted
    # apart, in cache_copied_bytes).
    mount_round cached --direct-io --cache write-back --cache-size 64M
    local regs copies
    regs=$(grep -o 'pool_registrations=[0-9]*' <<<"$MOUNT_LINE" | cut -d= -f2)
    copies=$(grep -o 'cache_copied_bytes=[0-9]*' <<<"$MOUNT_LINE" | cut -d= -f2)
    [ -n "$regs" ] && [ "$regs" -ge 14 ] ||
        fail "the cache's page memory was not registered with the RDMA device (pool_registrations=$regs, want >= 14): $MOUNT_LINE"
    [ -n "$copies" ] && [ "$copies" -gt 0 ] ||
        fail "the cache was not used (cache_copied_bytes=$copies): $MOUNT_LINE"
}
