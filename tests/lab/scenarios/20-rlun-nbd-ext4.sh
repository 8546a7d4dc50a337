# about: kernel nbd attached to an rlun NBD export of a LIO LUN, ext4 on it: files survive a remount and the device matches the backing file
# default: yes
# timeout: 300
#
# Written ahead of the NBD front end, from the design sketch
# (`rlun serve URL --socket PATH`). When it lands with another shape, adjust
# this scenario in the same change. 21-nbd-ext4-qemu-nbd.sh is the same flow
# with qemu-nbd as the exporter, proving the lab's kernel nbd path meanwhile.

scenario() {
    rlun_has serve || skip "rlun has no 'serve' subcommand yet (the NBD export has not landed)"
    need lio
    need nbd
    local W=$LAB_WORK sock=$LAB_WORK/nbd.sock
    setsid "$RLUN" serve "iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0" --socket "$sock" \
        </dev/null >"$W/serve.log" 2>&1 &
    local pid=$!
    on_exit "kill $pid 2>/dev/null; true"
    wait_for "rlun serve socket" 60 test -S "$sock"
    nbd_ext4_roundtrip "$sock" /dev/nbd0 "$LAB_DATA/lun512.img"
}
