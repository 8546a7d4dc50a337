# about: rlun info agrees with the kernel initiator (open-iscsi over TCP): size, logical block size, vendor/product, unit serial, and the data the kernel reads
# default: yes
# timeout: 300

scenario() {
    need lio
    need iscsid
    local W=$LAB_WORK portal="$LAB_IP_T:$LIO_TCP_PORT" spec lun name dev
    for lun in 0 1; do
        capture "rlun info LUN $lun" 60 "$W/info$lun.json" "$RLUN" info --json "iscsi://$portal/$LIO_IQN/$lun"
    done
    kernel_login "$LIO_IQN" "$LIO_TCP_PORT" default
    for spec in "0 lun512" "1 lun4k"; do
        read -r lun name <<<"$spec"
        dev=$(kernel_disk "$LIO_IQN" "$LIO_TCP_PORT" "$lun") ||
            fail "the kernel initiator shows no disk for LUN $lun after login"
        log "LUN $lun is /dev/$dev for the kernel"
        assert_eq "LUN $lun bytes: kernel /sys/block/$dev/size*512 vs rlun" \
            "$(($(cat "/sys/block/$dev/size") * 512))" "$(json_get "$W/info$lun.json" capacity.bytes)"
        assert_eq "LUN $lun logical block size: kernel vs rlun" \
            "$(cat "/sys/block/$dev/queue/logical_block_size")" \
            "$(json_get "$W/info$lun.json" capacity.block_size)"
        assert_eq "LUN $lun vendor: kernel vs rlun" \
            "$(xargs <"/sys/block/$dev/device/vendor")" "$(json_get "$W/info$lun.json" inquiry.vendor | xargs)"
        assert_eq "LUN $lun product: kernel vs rlun" \
            "$(xargs <"/sys/block/$dev/device/model")" "$(json_get "$W/info$lun.json" inquiry.product | xargs)"
        # VPD page 0x80 as the kernel read it: a 4-byte header, then the serial.
        assert_eq "LUN $lun unit serial: kernel vs rlun" \
            "$(tail -c +5 "/sys/block/$dev/device/vpd_pg80" | tr -d '\0' | xargs)" \
            "$(json_get "$W/info$lun.json" inquiry.serial)"
        run "kernel reads LUN $lun (O_DIRECT)" 120 dd if="/dev/$dev" of="$W/k$lun.img" bs=1M iflag=direct status=none
        assert_same_data "LUN $lun read by the kernel initiator vs the backing file" "$LAB_DATA/$name.img" "$W/k$lun.img"
        rm -f "$W/k$lun.img"
    done
}
