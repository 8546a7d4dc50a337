# about: tgtd as a second target inside the VM: rlun over TCP, info and cp both ways, checked against the backing file
# default: yes
# timeout: 240

scenario() {
    need tgtd
    local W=$LAB_WORK url="iscsi://$LAB_IP_T:$TGT_TCP_PORT/$TGT_IQN/1" backing=$LAB_DATA/tgt.img
    capture "rlun info (tgtd)" 60 "$W/info.json" "$RLUN" info --json "$url"
    assert_eq "tgtd LUN 1 capacity" "$(stat -c %s "$backing")" "$(json_get "$W/info.json" capacity.bytes)"
    run "rlun cp tgtd LUN -> file" 120 "$RLUN" cp --no-progress "$url" "$W/read.img"
    assert_same_data "tgtd LUN read by rlun vs the backing file" "$backing" "$W/read.img"
    random_file "$W/write.img" "$TGT_LUN_MIB"
    run "rlun cp file -> tgtd LUN" 120 "$RLUN" cp --no-progress "$W/write.img" "$url"
    assert_same_data "tgtd backing file after rlun wrote it" "$W/write.img" "$backing"
}
