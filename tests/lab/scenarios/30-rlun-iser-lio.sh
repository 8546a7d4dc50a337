# about: rlun over iSER (soft-RoCE) to LIO: info, cp both ways on the 512- and 4096-byte-block LUNs checked against the backing files, bench read and write with copied_bytes 0 (over TCP too); the same cp and bench with every buffer registered per command (RLUN_ISER_REGISTRATION=per-command)
# default: yes
# timeout: 600

scenario() {
    local W=$LAB_WORK rc=0
    local probe="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/0"
    # rlun refuses iser:// before it connects while iSER has not landed.
    timeout -k 5 30 "$RLUN" info --json "$probe" >"$W/probe.json" 2>"$W/probe.err" || rc=$?
    if [ "$rc" -ne 0 ] && grep -qi 'not available\|not implemented' "$W/probe.err"; then
        skip "rlun has no iSER yet: $(head -n 1 "$W/probe.err")"
    fi
    need lio_iser

    local spec lun bs name url backing bytes
    for spec in "0 512 lun512" "1 4096 lun4k"; do
        read -r lun bs name <<<"$spec"
        url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/$lun"
        backing=$LAB_DATA/$name.img
        bytes=$(stat -c %s "$backing")

        capture "rlun info LUN $lun over iSER" 60 "$W/info$lun.json" "$RLUN" info --json "$url"
        assert_eq "LUN $lun block size over iSER" "$bs" "$(json_get "$W/info$lun.json" capacity.block_size)"
        assert_eq "LUN $lun capacity over iSER (bytes of the backing file)" "$bytes" \
            "$(json_get "$W/info$lun.json" capacity.bytes)"
        assert_eq "LUN $lun unit serial number over iSER" "rlun-lab-$name" \
            "$(json_get "$W/info$lun.json" inquiry.serial)"

        run "rlun cp LUN $lun -> file over iSER" 180 "$RLUN" cp --no-progress "$url" "$W/read$lun.img"
        assert_same_data "LUN $lun read by rlun over iSER vs the backing file" "$backing" "$W/read$lun.img"

        random_file "$W/write$lun.img" "$LIO_LUN_MIB"
        run "rlun cp file -> LUN $lun over iSER" 180 "$RLUN" cp --no-progress "$W/write$lun.img" "$url"
        assert_same_data "backing file of LUN $lun after rlun wrote it over iSER" "$W/write$lun.img" "$backing"
        rm -f "$W/read$lun.img" "$W/write$lun.img"
    done

    # bench: reads and writes complete over iSER (figures are for the log;
    # software emulation makes them meaningless as absolutes), and zero copy:
    # not one byte of SCSI data copied between the network and the buffers,
    # and no memory registration on the data path (the buffers come from the
    # registered pool). --stats-interval prints the counter while it runs.
    url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/0"
    local pat bytes
    for pat in read write randread randwrite; do
        capture "rlun bench $pat over iSER" 90 "$W/bench-$pat.json" \
            "$RLUN" -v bench "$url" --pattern "$pat" --bs 128k --qd 8 --duration 3s --allow-write --json \
            --stats-interval 1s
        [ "$(json_get "$W/bench-$pat.json" ios)" -gt 0 ] || fail "rlun bench $pat over iSER completed no I/O"
        assert_eq "bytes rlun copied in bench $pat over iSER ($(json_get "$W/bench-$pat.json" bytes) bytes moved)" \
            0 "$(json_get "$W/bench-$pat.json" copied_bytes)"
        assert_eq "registrations on the data path in bench $pat over iSER" \
            0 "$(json_get "$W/bench-$pat.json" data_path_registrations)"
    done
    # The path a full pool falls back to, taken on purpose: no buffer from
    # the registered pool, so every read buffer and all write data the
    # target fetches is registered for its command and deregistered when
    # the command ends (its task hold). Same data, no copies, and one
    # registration per command at least.
    url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/1"
    backing=$LAB_DATA/lun4k.img
    random_file "$W/pc-write.img" "$LIO_LUN_MIB"
    run "rlun cp file -> LUN 1 over iSER, per-command registration" 180 \
        env RLUN_ISER_REGISTRATION=per-command "$RLUN" cp --no-progress "$W/pc-write.img" "$url"
    assert_same_data "backing file of LUN 1 after rlun wrote it over iSER with per-command registration" \
        "$W/pc-write.img" "$backing"
    run "rlun cp LUN 1 -> file over iSER, per-command registration" 180 \
        env RLUN_ISER_REGISTRATION=per-command "$RLUN" cp --no-progress "$url" "$W/pc-read.img"
    assert_same_data "LUN 1 read by rlun over iSER with per-command registration vs the backing file" \
        "$backing" "$W/pc-read.img"
    rm -f "$W/pc-write.img" "$W/pc-read.img"
    local ios regs
    for pat in randread randwrite; do
        capture "rlun bench $pat over iSER, per-command registration" 90 "$W/bench-pc-$pat.json" \
            env RLUN_ISER_REGISTRATION=per-command \
            "$RLUN" bench "$url" --pattern "$pat" --bs 128k --qd 8 --duration 3s --allow-write --json
        ios=$(json_get "$W/bench-pc-$pat.json" ios)
        regs=$(json_get "$W/bench-pc-$pat.json" data_path_registrations)
        [ "$ios" -gt 0 ] || fail "rlun bench $pat over iSER with per-command registration completed no I/O"
        [ "$regs" -ge "$ios" ] ||
            fail "rlun bench $pat with per-command registration: $regs registrations for $ios commands (want one per command at least)"
        assert_eq "bytes rlun copied in bench $pat over iSER with per-command registration" \
            0 "$(json_get "$W/bench-pc-$pat.json" copied_bytes)"
        log "ok: bench $pat, per-command registration: $ios commands, $regs registrations"
    done

    # The same counter over TCP: each Data-In payload is read straight into
    # the read buffer, and writes go out from the caller's buffer: 0 too.
    local tcp="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0"
    for pat in read write; do
        capture "rlun bench $pat over TCP" 90 "$W/bench-tcp-$pat.json" \
            "$RLUN" bench "$tcp" --pattern "$pat" --bs 128k --qd 8 --duration 3s --allow-write --json
        bytes=$(json_get "$W/bench-tcp-$pat.json" bytes)
        log "copied_bytes over TCP, $pat: $(json_get "$W/bench-tcp-$pat.json" copied_bytes) of $bytes bytes moved"
    done
    [ "$(json_get "$W/bench-tcp-read.json" bytes)" -gt 0 ] || fail "rlun bench read over TCP moved no data"
    assert_eq "bytes rlun copied in bench read over TCP (payloads read in place)" \
        0 "$(json_get "$W/bench-tcp-read.json" copied_bytes)"
    assert_eq "bytes rlun copied in bench write over TCP" 0 "$(json_get "$W/bench-tcp-write.json" copied_bytes)"
}
