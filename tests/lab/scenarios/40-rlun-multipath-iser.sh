# about: multipath over one TCP and one iSER path: the LUN of 38-rlun-multipath-alua through tpgt_1 over TCP (10.99.0.1:3264, group A) and tpgt_2 over iSER (soft-RoCE, 10.99.0.3:3265, group B); rlun attach --portal iser://... under fio verify: I/O on the TCP path while B is standby, on the iSER path after an ALUA swap, back on TCP after the swap back, on iSER when the TCP path is cut (nftables) and on TCP again when it returns; no fio error, no kernel I/O error, the device matches the backing file
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
    modules ib_isert
    local np t0 mark fio_max
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
    mp_detach
    note "TCP + iSER paths: I/O followed two ALUA swaps and a TCP cut with no fio error; longest fio I/O ${fio_max} ms; $(fio_mibs iser) MiB/s"
}
