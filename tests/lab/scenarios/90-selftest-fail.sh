# about: deliberately broken: compares the LUN's data with a file that differs on purpose; must FAIL (added by RLUN_LAB_SELFTEST_FAIL=1)
# default: no
# timeout: 180

scenario() {
    need lio
    local W=$LAB_WORK
    run "rlun cp LUN 0 -> file" 120 "$RLUN" cp --no-progress "iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN/0" "$W/read.img"
    random_file "$W/other.img" "$LIO_LUN_MIB"
    assert_same_data "self-test: LUN 0 vs a file that differs on purpose" "$W/other.img" "$W/read.img"
}
