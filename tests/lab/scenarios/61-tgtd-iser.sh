# about: tgtd's iSER transport (SysV shm limits raised, huge pages reserved, initiator-name ACL): rlun cp both ways and bench (copied_bytes 0) over iSER, then the kernel iSER initiator reads and writes it, each checked against the backing file
# default: yes
# timeout: 420

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
    local W=$LAB_WORK dev rc=0 pat
    # rlun over iSER to tgtd (the second iSER target): cp both ways
    # byte-exact, then bench read and write with nothing copied.
    local url="iser://$LAB_IP_T:$TGT_ISER_PORT/$TGT_ISER_IQN/1" id=(--initiator-name "$RLUN_LAB_IQN")
    run "rlun cp tgtd LUN -> file over iSER" 180 "$RLUN" cp --no-progress "${id[@]}" "$url" "$W/r.img"
    assert_same_data "tgtd iSER LUN read by rlun vs the backing file" "$LAB_DATA/tgt-iser.img" "$W/r.img"
    random_file "$W/rw.img" "$TGT_LUN_MIB"
    run "rlun cp file -> tgtd LUN over iSER" 180 "$RLUN" cp --no-progress "${id[@]}" "$W/rw.img" "$url"
    assert_same_data "tgtd backing file after rlun wrote it over iSER" "$W/rw.img" "$LAB_DATA/tgt-iser.img"
    for pat in read write; do
        capture "rlun bench $pat over iSER (tgtd)" 90 "$W/bench-$pat.json" \
            "$RLUN" bench "${id[@]}" "$url" --pattern "$pat" --bs 64k --qd 8 --duration 2s --allow-write --json
        [ "$(json_get "$W/bench-$pat.json" ios)" -gt 0 ] || fail "rlun bench $pat over iSER at tgtd completed no I/O"
        assert_eq "bytes rlun copied in bench $pat over iSER (tgtd)" 0 "$(json_get "$W/bench-$pat.json" copied_bytes)"
    done
    rm -f "$W/r.img" "$W/rw.img"

    # The kernel iSER initiator against the same target.
    modules ib_iser
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
