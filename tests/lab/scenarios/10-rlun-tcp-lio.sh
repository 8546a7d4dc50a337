# about: rlun over TCP to LIO: discover, ls, info and cp both ways on the 512- and 4096-byte-block LUNs, checked against the backing files
# default: yes
# timeout: 360

scenario() {
    need lio
    local W=$LAB_WORK portal="$LAB_IP_T:$LIO_TCP_PORT"

    capture "rlun discover" 60 "$W/discover.txt" "$RLUN" discover "$portal"
    grep -qF "$LIO_IQN" "$W/discover.txt" || fail "rlun discover $portal did not list $LIO_IQN"
    capture "rlun ls" 60 "$W/ls.txt" "$RLUN" ls "iscsi://$portal/$LIO_IQN"

    local spec lun bs name url backing bytes
    for spec in "0 512 lun512" "1 4096 lun4k"; do
        read -r lun bs name <<<"$spec"
        url="iscsi://$portal/$LIO_IQN/$lun"
        backing=$LAB_DATA/$name.img
        bytes=$(stat -c %s "$backing")

        capture "rlun info LUN $lun" 60 "$W/info$lun.json" "$RLUN" info --json "$url"
        assert_eq "LUN $lun block size" "$bs" "$(json_get "$W/info$lun.json" capacity.block_size)"
        assert_eq "LUN $lun capacity (bytes of the backing file)" "$bytes" \
            "$(json_get "$W/info$lun.json" capacity.bytes)"
        assert_eq "LUN $lun blocks" "$((bytes / bs))" "$(json_get "$W/info$lun.json" capacity.blocks)"
        assert_eq "LUN $lun unit serial number (VPD 0x80)" "rlun-lab-$name" \
            "$(json_get "$W/info$lun.json" inquiry.serial)"

        # LUN -> file: what rlun reads is what the backing file holds.
        run "rlun cp LUN $lun -> file" 180 "$RLUN" cp --no-progress "$url" "$W/read$lun.img"
        assert_same_data "LUN $lun read by rlun vs the backing file" "$backing" "$W/read$lun.img"

        # file -> LUN: what rlun writes lands in the backing file.
        random_file "$W/write$lun.img" "$LIO_LUN_MIB"
        run "rlun cp file -> LUN $lun" 180 "$RLUN" cp --no-progress "$W/write$lun.img" "$url"
        assert_same_data "backing file of LUN $lun after rlun wrote it" "$W/write$lun.img" "$backing"
        rm -f "$W/read$lun.img" "$W/write$lun.img"
    done
}
