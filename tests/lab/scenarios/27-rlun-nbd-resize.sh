# about: a running /dev/nbdN resized: rlun's kernel::resize on netlink- and ioctl-connected devices (tests/nbd_resize.rs: grow, read and write past the old end, shrink, the other interface refused); then a LIO LUN attached with ext4 grows from 32 to 64 MiB, `rlun rescan` resizes the device, resize2fs grows the file system, the data before is intact a write past the old end is on the backing file; then the LUN is unmapped: reads of the device fail at once and detach ends cleanly
# default: yes
# timeout: 600
#
# Part 1 runs the integration test binary built by `cargo test --test
# nbd_resize --no-run` (the newest target/*/deps/nbd_resize-*), which
# drives rlun's own resize function against this kernel with an NBD server
# of its own; it is not run when that binary was not built. Part 2 needs
# `rlun rescan` and is SKIP without it.
#
# LIO's fileio backstore over a regular file takes its size from
# `fd_dev_size`, not from the file: READ CAPACITY reports the new size once
# the file is grown and `fd_dev_size=NEW` is written to the backstore's
# `control` (see the facts in tests/lab/README.md).

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    need nbd
    local W=$LAB_WORK repo bin part1 mnt=$LAB_WORK/mnt
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)

    # --- 1: the kernel mechanism, through rlun's function
    local f
    bin=''
    for f in "$repo"/target/*/deps/nbd_resize-*; do
        [ -f "$f" ] && [ -x "$f" ] && { [ -z "$bin" ] || [ "$f" -nt "$bin" ]; } && bin=$f
    done
    if [ -n "$bin" ]; then
        run "kernel::resize on netlink- and ioctl-connected devices ($bin)" 300 \
            "$bin" --ignored --test-threads 1 --nocapture
        part1="kernel::resize passed"
    else
        log "no nbd_resize test binary under $repo/target (cargo test --test nbd_resize --no-run): part 1 not run"
        part1="kernel::resize test not built"
    fi

    # --- 2: a LUN that grows, rlun rescan
    rlun_has rescan || skip "rlun rescan not available ($part1)"
    need lio
    local dir=$LIO/core/fileio_0/grow backing=$LAB_DATA/grow.img dev n pid
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/2"
    random_file "$backing" 32
    lio_fileio grow "$backing" 32 512
    lio_lun "$LIO_IQN" 2 grow
    mkdir -p "$mnt"
    on_exit "umount '$mnt' 2>/dev/null; for d in /dev/nbd0 /dev/nbd1 /dev/nbd2 /dev/nbd3; do '$RLUN' detach \$d 2>/dev/null; done; true"
    on_exit "cp '$W/attach.log' '$LAB_OUT/logs/$LAB_SCENARIO-attach.log' 2>/dev/null; true"
    RUST_LOG=rlun=info setsid "$RLUN" attach "$url" </dev/null >"$W/attach.out" 2>"$W/attach.log" &
    pid=$!
    wait_for "rlun attach printed its device" 60 grep -q '^/dev/nbd' "$W/attach.out"
    dev=$(head -n 1 "$W/attach.out")
    n=${dev#/dev/}
    wait_for "$dev connected" 30 test -e "/sys/block/$n/pid"
    assert_eq "$dev size before" $((32 << 20)) "$(blockdev --getsize64 "$dev")"
    run "mkfs.ext4 on $dev" 180 mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$dev"
    run "mount ext4" 60 mount -t ext4 "$dev" "$mnt"
    random_file "$W/before.bin" 4
    run "a file onto ext4" 60 cp "$W/before.bin" "$mnt/before.bin"
    run "sync" 60 sync
    local blocks0
    blocks0=$(stat -f -c %b "$mnt")

    # The LUN grows: the file, then LIO's idea of it.
    run "grow the backing file to 64 MiB" 10 truncate -s 64M "$backing"
    cfs "$dir/control" "fd_dev_size=$((64 << 20))"
    run "rlun rescan $dev" 120 "$RLUN" rescan "$dev"
    wait_for "$dev shows 64 MiB" 60 bash -c "[ \"\$(blockdev --getsize64 $dev)\" = $((64 << 20)) ]"
    assert_eq "$dev size after rescan" $((64 << 20)) "$(blockdev --getsize64 "$dev")"
    run "resize2fs on the mounted file system" 180 resize2fs "$dev"
    local blocks1
    blocks1=$(stat -f -c %b "$mnt")
    [ "$blocks1" -gt "$blocks0" ] || fail "resize2fs: the file system still has $blocks1 blocks (was $blocks0)"
    log "ok: file system grew from $blocks0 to $blocks1 blocks"
    assert_eq "file written before the resize (sha256)" "$(sha "$W/before.bin")" "$(sha "$mnt/before.bin")"
    run "unmount" 60 umount "$mnt"
    run "fsck.ext4 -n -f after the resize" 120 fsck.ext4 -n -f "$dev"

    # A write past the old end goes to the LUN's new part.
    random_file "$W/past.bin" 1
    run "write 1 MiB at 48 MiB of $dev" 60 dd if="$W/past.bin" of="$dev" bs=1M seek=48 oflag=direct,sync conv=notrunc status=none
    run "read 1 MiB at 48 MiB of the backing file" 30 dd if="$backing" of="$W/past-back.bin" bs=1M skip=48 count=1 status=none
    assert_same_data "the write past the old end, on the backing file" "$W/past.bin" "$W/past-back.bin"

    # The LUN unmapped under the attached device: once rlun looked (LIO's
    # UNIT ATTENTION 3F/0E on the next command, or here `rlun rescan`, as
    # a read may be a cache hit that never reaches LIO), reads fail at
    # once, nothing hangs, and detach still ends cleanly.
    run "unmap lun_2" 60 rm -f "$LIO/iscsi/$LIO_IQN/tpgt_1/lun/lun_2/grow"
    run "rmdir lun_2" 60 rmdir "$LIO/iscsi/$LIO_IQN/tpgt_1/lun/lun_2"
    capture "rlun rescan $dev" 120 "$W/rescan-gone.txt" "$RLUN" rescan "$dev"
    grep -q "lun2: removed" "$W/rescan-gone.txt" || fail "rescan after the unmap: $(cat "$W/rescan-gone.txt")"
    local rc=0 t0=$SECONDS
    timeout 60 dd if="$dev" of=/dev/null bs=4k count=1 skip=100 iflag=direct status=none 2>"$W/gone.err" || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a read of the unmapped LUN: exit $rc (want an I/O error, not success or a hang)"
    log "ok: read of the unmapped LUN failed in $((SECONDS - t0))s: $(cat "$W/gone.err")"
    wait_for "rlun says the LUN was removed" 30 grep -q "the target removed LUN 2" "$W/attach.log"
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    wait_for "rlun attach exited" 30 bash -c "! kill -0 $pid 2>/dev/null"
    note "$part1; rescan grew $dev to 64 MiB, resize2fs, data intact; unmapped: EIO, detach"
}
