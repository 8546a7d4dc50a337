# about: tgtd's iSER transport (SysV shm limits raised, huge pages reserved, initiator-name ACL) read and written by the kernel iSER initiator, checked against the backing file
# default: yes
# timeout: 240

#
# What it took (tgt 1.0.85, Debian 12): the iSER buffer pool is a SHM_HUGETLB
# SysV segment, so huge pages must be reserved (raising shmmax/shmall alone
# is not enough) and pool_sz_mb=128 keeps it small; `--iser port=N` is
# unusable (stale errno check), so iSER listens on 3260; and the iSER login
# needs an initiator-name ACL besides the IP ACL, or it answers "Target not
# found" (status 0x0203). See setup_tgtd/setup_tgtd_iser in guest/lib.sh.

scenario() {
    need iscsid
    if ! (need tgtd_iser); then
        fail "tgtd iSER could not start: $(cat "$LAB_REASON"); tgtd says: $(tail -n 2 "$LAB_OUT/logs/daemon-tgtd.log" | tr '\n' ' ')"
    fi
    modules ib_iser
    local W=$LAB_WORK dev rc=0
    iscsiadm -m node -o new -T "$TGT_ISER_IQN" -p "$LAB_IP_T:$TGT_ISER_PORT" -I iser >/dev/null
    on_exit "iscsiadm -m node -T '$TGT_ISER_IQN' -p '$LAB_IP_T:$TGT_ISER_PORT' -I iser --logout; iscsiadm -m node -T '$TGT_ISER_IQN' -p '$LAB_IP_T:$TGT_ISER_PORT' -I iser -o delete"
    try 90 iscsiadm -m node -T "$TGT_ISER_IQN" -p "$LAB_IP_T:$TGT_ISER_PORT" -I iser --login || rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "kernel iSER login to tgtd failed (iscsiadm exit $rc); tgtd says: $(grep -v '^$' "$LAB_OUT/logs/daemon-tgtd.log" | tail -n 3 | tr '\n' ' ')"
    fi
    dev=$(kernel_disk "$TGT_ISER_IQN" "$TGT_ISER_PORT" 1) || fail "no disk for tgtd's iSER LUN 1 after login"
    run "kernel reads tgtd LUN over iSER" 120 dd if="/dev/$dev" of="$W/k.img" bs=1M iflag=direct status=none
    assert_same_data "tgtd iSER LUN read by the kernel vs the backing file" "$LAB_DATA/tgt-iser.img" "$W/k.img"
    random_file "$W/w.img" "$TGT_LUN_MIB"
    run "kernel writes tgtd LUN over iSER" 120 dd if="$W/w.img" of="/dev/$dev" bs=1M oflag=direct status=none
    assert_same_data "tgtd backing file after the kernel wrote it over iSER" "$W/w.img" "$LAB_DATA/tgt-iser.img"
    note "tgtd iSER works: huge pages + pool_sz_mb=128, port 3260, initiator-name ACL"
}
