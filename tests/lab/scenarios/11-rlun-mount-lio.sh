# about: rlun mount (FUSE) of a LIO LUN over TCP: the file in the mount matches the backing file, writes through it land in the backing file
# default: yes
# timeout: 300
#
# Written ahead of the FUSE front end, from the design sketch
# (`rlun mount URL DIR`, the LUN shows up as a regular file in DIR). When the
# mount lands with another shape, adjust this scenario in the same change.

scenario() {
    rlun_has mount || skip "rlun has no 'mount' subcommand yet (the FUSE front end has not landed)"
    need lio
    modules fuse
    local W=$LAB_WORK url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0" mnt=$LAB_WORK/mnt
    local backing=$LAB_DATA/lun512.img file
    mkdir -p "$mnt"
    setsid "$RLUN" mount "$url" "$mnt" </dev/null >"$W/mount.log" 2>&1 &
    local pid=$!
    on_exit "fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt'; sleep 1; kill $pid 2>/dev/null; true"
    wait_for "a regular file appears in the rlun mount" 60 \
        bash -c "find '$mnt' -maxdepth 2 -type f | grep -q ."
    file=$(find "$mnt" -maxdepth 2 -type f | head -n 1)
    log "LUN file in the mount: $file"
    assert_same_data "file in the rlun mount vs the backing file" "$backing" "$file"
    random_file "$W/new.img" 4
    run "write 4 MiB through the mount" 120 dd if="$W/new.img" of="$file" bs=1M conv=notrunc,fsync status=none
    run "unmount" 60 fusermount3 -u "$mnt"
    run "head of backing file" 60 dd if="$backing" of="$W/head.img" bs=1M count=4 status=none
    assert_same_data "backing file after writing through the mount" "$W/new.img" "$W/head.img"
}
