# about: rlun mount (FUSE) of a LIO LUN over iSER: the file matches the backing file, an fio verify job (direct I/O, queue depth 8) passes through it, what it wrote lands in the backing file, and rlun copied no byte of it (copied_bytes 0 at unmount)
# default: yes
# timeout: 420

scenario() {
    rlun_has mount || skip "rlun has no 'mount' subcommand"
    need lio_iser
    modules fuse
    local W=$LAB_WORK url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/0" mnt=$LAB_WORK/mnt
    local backing=$LAB_DATA/lun512.img file
    mkdir -p "$mnt"
    setsid "$RLUN" -v mount "$url" "$mnt" </dev/null >"$W/mount.log" 2>&1 &
    local pid=$!
    on_exit "fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt'; sleep 1; kill $pid 2>/dev/null; true"
    wait_for "a regular file appears in the rlun mount" 90 \
        bash -c "find '$mnt' -maxdepth 2 -type f | grep -q ."
    file=$(find "$mnt" -maxdepth 2 -type f | head -n 1)
    log "LUN file in the mount: $file"
    assert_same_data "file in the rlun mount over iSER vs the backing file" "$backing" "$file"
    run "fio verify through the mount over iSER" 240 fio --name=iser-verify --filename="$file" \
        --rw=randwrite --bsrange=4k-64k --ioengine=libaio --iodepth=8 --direct=1 \
        --size=8M --verify=crc32c --verify_fatal=1 --do_verify=1 --output="$W/fio.txt"
    run "copy the file in the mount" 120 dd if="$file" of="$W/mounted.img" bs=1M iflag=direct status=none
    run "unmount" 60 fusermount3 -u "$mnt"
    wait_for "rlun mount exits after the unmount" 30 bash -c "! kill -0 $pid 2>/dev/null"
    # Zero copy through the mount: rlun logs its data-path counters at unmount.
    local line
    line=$(grep "data path at unmount" "$W/mount.log" | tail -n 1)
    [ -n "$line" ] || fail "rlun mount logged no data-path counters at unmount: $(tail -n 2 "$W/mount.log")"
    log "$line"
    grep -q "copied_bytes=0 " <<<"$line" ||
        fail "rlun copied SCSI data through the mount over iSER: $line"
    assert_same_data "backing file after the fio job over iSER vs what the mount showed" "$W/mounted.img" "$backing"
}
