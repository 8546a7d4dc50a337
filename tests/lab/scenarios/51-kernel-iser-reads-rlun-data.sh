# about: rlun writes over TCP, the kernel initiator reads it back over iSER (ib_iser over soft-RoCE to LIO's isert): proves the lab's iSER path
# default: yes
# timeout: 360

scenario() {
    need lio_iser
    need iscsid
    modules ib_iser
    local W=$LAB_WORK lun dev transport
    for lun in 0 1; do
        random_file "$W/data$lun.img" "$LIO_LUN_MIB"
        run "rlun writes LUN $lun over TCP" 180 "$RLUN" cp --no-progress "$W/data$lun.img" \
            "iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/$lun"
    done
    kernel_login "$LIO_IQN" "$LIO_ISER_PORT" iser
    transport=$(kernel_transport "$LIO_IQN" "$LIO_ISER_PORT")
    assert_eq "transport of the kernel session" iser "$transport"
    for lun in 0 1; do
        dev=$(kernel_disk "$LIO_IQN" "$LIO_ISER_PORT" "$lun") ||
            fail "the kernel iSER session shows no disk for LUN $lun"
        log "LUN $lun is /dev/$dev over iSER"
        run "kernel reads LUN $lun over iSER (O_DIRECT)" 180 \
            dd if="/dev/$dev" of="$W/k$lun.img" bs=1M iflag=direct status=none
        assert_same_data "LUN $lun read over iSER vs what rlun wrote over TCP" "$W/data$lun.img" "$W/k$lun.img"
    done
}
