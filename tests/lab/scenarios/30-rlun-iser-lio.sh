# about: rlun over iSER (soft-RoCE) to LIO: info and cp both ways, checked against the backing file
# default: yes
# timeout: 300

scenario() {
    local W=$LAB_WORK url="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_IQN/0" rc=0
    # rlun refuses iser:// before it connects while iSER has not landed.
    timeout -k 5 30 "$RLUN" info --json "$url" >"$W/probe.json" 2>"$W/probe.err" || rc=$?
    if [ "$rc" -ne 0 ] && grep -qi 'not available\|not implemented' "$W/probe.err"; then
        skip "rlun has no iSER yet: $(head -n 1 "$W/probe.err")"
    fi
    need lio_iser
    local backing=$LAB_DATA/lun512.img
    capture "rlun info over iSER" 60 "$W/info.json" "$RLUN" info --json "$url"
    assert_eq "LUN 0 capacity over iSER" "$(stat -c %s "$backing")" "$(json_get "$W/info.json" capacity.bytes)"
    run "rlun cp LUN -> file over iSER" 180 "$RLUN" cp --no-progress "$url" "$W/read.img"
    assert_same_data "LUN 0 read by rlun over iSER vs the backing file" "$backing" "$W/read.img"
    random_file "$W/write.img" "$LIO_LUN_MIB"
    run "rlun cp file -> LUN over iSER" 180 "$RLUN" cp --no-progress "$W/write.img" "$url"
    assert_same_data "backing file after rlun wrote it over iSER" "$W/write.img" "$backing"
}
