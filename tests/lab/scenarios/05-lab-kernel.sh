# about: the booted kernel has what the lab's scenarios and the next front ends need: rdma_rxe, nbd, LIO (target_core_mod, iscsi_target_mod, ib_isert), the kernel initiator (iscsi_tcp, ib_iser), dm-multipath load; on 6.12 (the default, bookworm-backports) ublk_drv loads, /dev/ublk-control appears and io_uring is enabled; on Debian 12's 6.1 ublk_drv is absent, as Debian builds it
# default: yes
# timeout: 180

scenario() {
    local kver major minor
    kver=$(uname -r)
    major=${kver%%.*}
    minor=${kver#*.}
    minor=${minor%%[.+-]*}
    log "kernel $kver"
    modules rdma_rxe nbd target_core_mod iscsi_target_mod ib_isert iscsi_tcp ib_iser dm_multipath
    if [ "$major" -gt 6 ] || { [ "$major" -eq 6 ] && [ "$minor" -ge 12 ]; }; then
        modules ublk_drv
        wait_for "/dev/ublk-control" 30 test -c /dev/ublk-control
        # 0: io_uring for every process (sysctl since 6.6; ublk needs it).
        assert_eq "kernel.io_uring_disabled" 0 "$(cat /proc/sys/kernel/io_uring_disabled)"
        note "kernel $kver: ublk_drv, /dev/ublk-control and io_uring available"
    else
        if modinfo ublk_drv >/dev/null 2>&1; then
            modules ublk_drv
            note "kernel $kver: ublk_drv present"
        else
            grep -q '^# CONFIG_BLK_DEV_UBLK is not set' "/boot/config-$kver" 2>/dev/null ||
                log "no /boot/config-$kver to confirm CONFIG_BLK_DEV_UBLK"
            note "kernel $kver: no ublk_drv (Debian 12's 6.1 is built without it); run the default 6.12 for ublk"
        fi
    fi
}
