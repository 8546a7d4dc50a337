# about: lab check of the kernel nbd path: qemu-nbd exports the LIO LUN (libiscsi over TCP), kernel nbd attaches it, ext4 round trip, device matches the backing file
# default: yes
# timeout: 300

scenario() {
    need lio
    need nbd
    command -v qemu-nbd >/dev/null || fail "qemu-nbd is not installed on the host (qemu-utils)"
    local W=$LAB_WORK sock=$LAB_WORK/nbd.sock
    setsid qemu-nbd --persistent --socket "$sock" --format raw --cache none \
        "iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0" </dev/null >"$W/qemu-nbd.log" 2>&1 &
    local pid=$!
    on_exit "kill $pid 2>/dev/null; true"
    wait_for "qemu-nbd socket (log: $(tail -n 1 "$W/qemu-nbd.log" 2>/dev/null))" 60 test -S "$sock"
    nbd_ext4_roundtrip "$sock" /dev/nbd1 "$LAB_DATA/lun512.img"
}
