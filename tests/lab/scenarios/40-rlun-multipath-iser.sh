# about: multipath over one TCP and one iSER path, under ext4 and under FUSE: the LUN of 38-rlun-multipath-alua through tpgt_1 over TCP (10.99.0.1:3264, group A) and tpgt_2 over iSER (soft-RoCE, 10.99.0.3:3265, group B); rlun attach --portal iser://... with ext4 on /dev/nbdN and fio verify on a file in it: I/O on the TCP path while B is standby, on the iSER path after an ALUA swap, back on TCP after the swap back, on iSER when the TCP path is cut (nftables) and on TCP again when it returns; then rlun mount (FUSE) through the same two paths, fio verify on the LUN's file while the TCP path is cut and restored; no fio error, no kernel I/O error, fsck clean, the device and the FUSE file match the backing file
# default: yes
# timeout: 900
#
# Path B is an iSER network portal of tpgt_2 on its own port (3265), so
# that tpgt_2 also keeps the TCP portal 38 uses; both are the same target
# port of ALUA group mp_b, whose counters tell the paths apart. The path
# cut is on the TCP path: nftables drops A's TCP port; RoCE traffic (UDP
# 4791, handled inside rdma_rxe) is not cut here.

# shellcheck source=../guest/multipath.sh
source "$(dirname "${BASH_SOURCE[0]}")/../guest/multipath.sh"

MP_ISER_PORT=3265
PB=$MP_IP_B:$MP_ISER_PORT
MP_B_URL=iser://$PB

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    "$RLUN" help attach 2>/dev/null | grep -q -- '--path-check-interval' ||
        skip "rlun attach has no multipath options yet"
    command -v nft >/dev/null || skip "nft (nftables) is not installed: the path cut needs it"
    need lio
    need nbd
    need rxe
    modules ib_isert fuse
    local np t0 mark fio_max fuse_max W=$LAB_WORK mnt=$LAB_WORK/mnt fmnt=$LAB_WORK/fuse file pid
    mp_setup
    np=$MP_TGT/tpgt_2/np/$PB
    if [ ! -e "$np/iser" ]; then
        run "tpgt_2: iSER portal $PB" 30 mkdir -p "$np"
        cfs "$np/iser" 1
    fi
    assert_eq "tpgt_2's portal $PB is iSER" 1 "$(<"$np/iser")"

    on_exit "nft delete table inet rlun_mp 2>/dev/null; true"
    on_exit "for d in /dev/nbd0 /dev/nbd1 /dev/nbd2; do '$RLUN' detach \$d 2>/dev/null; done; true"
    mp_attach attach-iser --multipath-policy failover --failback immediate
    mark=$(dmesg | wc -l)
    wait_for "rlun logs B ($PB, iSER) as standby" 20 \
        logged 0 "ALUA: the path's target port group" "portal=$PB" "state=standby"
    if rlun_has paths; then
        "$RLUN" paths --json "$MP_NBD" >"$LAB_WORK/paths.json" || fail "rlun paths --json failed"
        assert_eq "path B's transport" iser \
            "$(jq -r --arg p "$PB" '.[0].luns[0].multipath.paths[] | select(.portal == $p) | .transport' "$LAB_WORK/paths.json")"
        assert_eq "path A's transport" iscsi \
            "$(jq -r --arg p "$PA" '.[0].luns[0].multipath.paths[] | select(.portal == $p) | .transport' "$LAB_WORK/paths.json")"
    fi

    run "mkfs.ext4 on $MP_NBD" 120 mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$MP_NBD"
    mkdir -p "$mnt"
    on_exit "umount '$mnt' 2>/dev/null; true"
    run "mount ext4" 60 mount -t ext4 "$MP_NBD" "$mnt"
    MP_FIO_DEV=$mnt/fio.dat
    MP_FIO_SIZE=8M
    mp_fio_start iser
    io_on "1. A (TCP) active/optimized, B (iSER) standby: I/O on TCP only" 1 2
    paths_are "1." "$PA true active/optimized true" "$PB false standby true"

    t0=$EPOCHREALTIME
    mp_alua a 2 0
    mp_alua b 0 1
    log "swap: $(follow_secs "$t0" 2)s until 32 commands through B (iSER)"
    io_on "2. after the swap: I/O on iSER only" 2 1
    paths_are "2." "$PA false standby true" "$PB true active/optimized true"
    mp_fio_check iser "around the swap to the iSER path"

    t0=$EPOCHREALTIME
    mp_alua b 2 0
    mp_alua a 0 1
    log "swap back: $(follow_secs "$t0" 1)s until 32 commands through A (TCP)"
    io_on "3. swapped back: I/O on TCP only" 1 2
    mp_fio_check iser "around the swap back to TCP"

    # B non-optimized (a path to fail over to), then A's TCP port cut.
    mp_alua b 1 0
    sleep 2
    mp_cut "$LAB_IP_T"
    log "cut: $(follow_secs "$MP_CUT_T" 2)s until 32 commands through B (iSER)"
    io_on "4. TCP path cut: I/O on iSER" 2 1
    paths_are "4." "$PA false active/optimized false" "$PB true active/non-optimized true"
    mp_fio_check iser "when the TCP path was cut"
    sleep 3
    t0=$EPOCHREALTIME
    mp_restore
    log "restore: $(follow_secs "$t0" 1 90)s until 32 commands through A (TCP)"
    io_on "5. TCP path back: I/O on TCP again" 1 2
    paths_are "5." "$PA true active/optimized true" "$PB false active/non-optimized true"

    mp_fio_stop iser
    fio_max=$FIO_MAX_MS
    dmesg_clean "$mark" "TCP and iSER paths"
    run "unmount ext4" 60 umount "$mnt"
    run "fsck.ext4 -n -f" 120 fsck.ext4 -n -f "$MP_NBD"
    mp_detach

    # --- FUSE: rlun mount through the same two paths; B non-optimized,
    # A optimized; A's TCP port cut and restored under fio verify on the
    # LUN's file.
    mp_alua a 0 1
    mp_alua b 1 0
    mkdir -p "$fmnt"
    MP_LOG=$W/mount.log
    on_exit "cp '$MP_LOG' '$LAB_OUT/logs/$LAB_SCENARIO-mount.log' 2>/dev/null; true"
    RUST_LOG=rlun=info setsid "$RLUN" mount "iscsi://$PA/$MP_IQN/0" "$fmnt" --portal "$MP_B_URL" \
        --path-check-interval 1s --path-timeout 2s --nop-interval 1s --nop-timeout 1s \
        </dev/null >"$W/mount.out" 2>"$MP_LOG" &
    pid=$!
    on_exit "fusermount3 -u '$fmnt' 2>/dev/null || umount -l '$fmnt' 2>/dev/null; sleep 1; kill $pid 2>/dev/null; true"
    wait_for "the LUN's file in the rlun mount" 60 bash -c "find '$fmnt' -maxdepth 2 -type f | grep -q ."
    file=$(find "$fmnt" -maxdepth 2 -type f | head -n 1)
    grep -F "logged in through" "$MP_LOG" | grep -qF "paths=2 up=2" ||
        fail "rlun mount did not report both paths up: $(grep -F 'logged in' "$MP_LOG" | tr '\n' ' ')"
    log "ok: rlun mount through $PA (TCP) and $PB (iSER): $file"
    MP_NBD=
    MP_FIO_DEV=$file
    MP_FIO_SIZE=${MP_MIB}M
    mp_fio_start fuse
    io_on "6. FUSE, A (TCP) optimized: I/O on TCP" 1 2
    mp_cut "$LAB_IP_T"
    log "FUSE cut: $(follow_secs "$MP_CUT_T" 2)s until 32 commands through B (iSER)"
    io_on "7. FUSE, TCP path cut: I/O on iSER" 2 1
    mp_fio_check fuse "when the TCP path under the mount was cut"
    sleep 3
    t0=$EPOCHREALTIME
    mp_restore
    log "FUSE restore: $(follow_secs "$t0" 1 90)s until 32 commands through A (TCP)"
    io_on "8. FUSE, TCP path back: I/O on TCP" 1 2
    mp_fio_stop fuse
    fuse_max=$FIO_MAX_MS
    run "read the LUN's file through the mount" 120 dd if="$file" of="$W/fuse.img" bs=1M status=none
    run "unmount the rlun mount" 60 fusermount3 -u "$fmnt"
    wait_for "rlun mount exited" 60 bash -c "! kill -0 $pid"
    assert_same_data "the file as read through the mount vs LIO's backing file (after the unmount)" "$LAB_DATA/mp.img" "$W/fuse.img"
    note "TCP + iSER paths: ext4 on /dev/nbd: I/O followed two ALUA swaps and a TCP cut, no fio error, fsck clean, longest fio I/O ${fio_max} ms; FUSE: TCP cut and back, no fio error, longest fio I/O ${fuse_max} ms"
}
