# about: multipath with ALUA against LIO (round-robin phase with --set LAB_MULTIPATH_RR=1): one fileio LUN through two TPGs of one target (tpgt_1 on 10.99.0.1:3264 in port group A, tpgt_2 on 10.99.0.3:3264 in group B), rlun attach --portal under fio verify: I/O only on group A's path while B is standby (LIO's per-port counters), follows a swap of the states written into configfs within 15 s, waits through a transitioning group, fails over when the optimized path is cut with nftables (path failed, I/O moves) and fails back when it returns (path is back); round-robin keeps to the optimized group, spreads over both when both are, and keeps to B while the URL's own portal (A) is cut; no fio error, no kernel I/O error, the device matches the backing file
# default: yes
# timeout: 900
#
# The LIO setup, the fio loop, the per-port counters and the path cut are
# in tests/lab/guest/multipath.sh (shared with 39-dm-multipath-alua, the
# same run through dm-multipath over the kernel initiator).

# shellcheck source=../guest/multipath.sh
source "$(dirname "${BASH_SOURCE[0]}")/../guest/multipath.sh"

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    "$RLUN" help attach 2>/dev/null | grep -q -- '--path-check-interval' ||
        skip "rlun attach has no multipath options (--portal, --path-check-interval) yet"
    command -v nft >/dev/null || skip "nft (nftables) is not installed: the path cut needs it"
    need lio
    need nbd
    local W=$LAB_WORK t0 mark mark_log line a0 b0 fio_max
    local swap_data trans_data t_trans t_trans_end trans_held cut_data failback_data both_back eio_secs rr_table t_swap t_cut swap_secs trans_secs cut_fail_secs cut_move_secs back_secs failback_secs rr_fail_secs rr_back_secs
    mp_setup
    mp_show "LIO set up: group A (tpgt_1, $PA) active/optimized, group B (tpgt_2, $PB) standby"
    mp_sg_rtpg

    on_exit "nft delete table inet rlun_mp 2>/dev/null; true"
    on_exit "for d in /dev/nbd0 /dev/nbd1 /dev/nbd2; do '$RLUN' detach \$d 2>/dev/null; done; true"
    mp_attach attach --multipath-policy failover --failback immediate --path-fence lun-reset
    mark=$(dmesg | wc -l)

    # --- 1. both paths logged in; B's standby read from the target.
    wait_for "rlun logs B ($PB) as standby (read from REPORT TARGET PORT GROUPS)" 20 \
        logged 0 "ALUA: the path's target port group" "portal=$PB" "state=standby"
    log "ok: $(logged 0 "ALUA: the path's target port group" "portal=$PB")"
    ! logged 0 "I/O moves to another path" >/dev/null ||
        fail "I/O moved at start, before any change: $(logged 0 "I/O moves to another path")"
    mp_fio_start failover
    io_on "1. A active/optimized, B standby: I/O on A only" 1 2
    paths_are "1." "$PA true active/optimized true" "$PB false standby true"
    mp_show "phase 1"

    # --- 2. the states swap: A standby, B active/optimized (and preferred).
    mark_log=$(log_mark)
    t0=$EPOCHREALTIME
    mp_alua a 2 0
    mp_alua b 0 1
    log "swapped at $t0: A standby, B active/optimized"
    t_swap=$t0
    swap_data=$(follow_secs "$t0" 2) || fail "no data through B within 30 s of the swap"
    log "32 commands through B (LIO's counter) ${swap_data}s after the swap"
    expect_line "B ($PB) is active/optimized" 30 "$mark_log" "$t0" \
        "ALUA state of the path changed" "portal=$PB" "to=active/optimized"
    expect_line "I/O moved to B ($PB)" 30 "$mark_log" "$t0" "I/O moves to another path" "to=$PB"
    swap_secs=$EXPECT_SECS
    awk -v s="$swap_secs" 'BEGIN { exit !(s <= 15) }' ||
        fail "I/O followed the ALUA swap only after ${swap_secs}s (bound: 15 s with --path-check-interval 1s)"
    if line=$(logged "$mark_log" "ALUA state of the path changed" "portal=$PA" "to=standby"); then
        log "rlun: $line"
    else
        log "rlun logged no 'ALUA state changed' line for A (it may have learnt A's standby from NOT READY 04/0B sense)"
    fi
    io_on "2. after the swap: I/O on B only" 2 1
    paths_are "2." "$PA false standby true" "$PB true active/optimized true"
    mp_fio_check failover "around the ALUA swap"
    mp_show "phase 2"

    # --- 2b. B transitioning for a while (A still standby): no path may
    # carry I/O, so I/O waits (NOT READY 04/0A is no error for fio), and
    # goes on through B when B is active/optimized again.
    mark_log=$(log_mark)
    t_trans=$EPOCHREALTIME
    mp_alua b 15 1
    sleep 1
    a0=$(port_mb 1) b0=$(port_mb 2)
    sleep 2
    [ "$(port_mb 1)" -eq "$a0" ] || fail "2b. B transitioning: data went through A (standby): +$(($(port_mb 1) - a0)) MiB"
    [ "$(port_mb 2)" -eq "$b0" ] || fail "2b. B transitioning: LIO completed data through B: +$(($(port_mb 2) - b0)) MiB"
    log "ok: 2b. B transitioning: no data through either port for 2 s"
    line=$(since "$mark_log" | grep -F transitioning | head -n 1)
    [ -n "$line" ] || fail "rlun logged nothing about B transitioning: $(since "$mark_log" | head -n 5 | tr '\n' ' ')"
    log "rlun: $line"
    mark_log=$(log_mark)
    sleep_until "$(awk -v t="$t_trans" -v d="$MP_TRANSITION" 'BEGIN { printf "%.6f", t + d }')"
    t0=$EPOCHREALTIME
    trans_held=$(held_ms "$t_trans" "$t0")
    mp_alua b 0 1
    t_trans_end=$EPOCHREALTIME
    trans_data=$(follow_secs "$t0" 2) || fail "no data through B within 30 s of its transition's end"
    expect_line "B ($PB) is active/optimized again" 30 "$mark_log" "$t0" \
        "ALUA state of the path changed" "portal=$PB" "to=active/optimized"
    expect_line "I/O resumed on B ($PB)" 30 "$mark_log" "$t0" "I/O moves to another path" "to=$PB"
    trans_secs=$EXPECT_SECS
    io_on "2b. after the transition: I/O on B only" 2 1
    mp_fio_check failover "across B's transition"

    # --- 3. A becomes active/non-optimized (a path to fail over to); then
    # B's portal is cut: no answer at all (nftables drops both ways).
    mark_log=$(log_mark)
    t0=$EPOCHREALTIME
    mp_alua a 1 0
    expect_line "A ($PA) is active/non-optimized" 30 "$mark_log" "$t0" \
        "ALUA state of the path changed" "portal=$PA" "to=active/non-optimized"
    ! logged "$mark_log" "I/O moves to another path" >/dev/null ||
        fail "I/O moved when A became non-optimized while B stayed optimized: $(logged "$mark_log" "I/O moves to another path")"
    io_on "3a. A non-optimized, B optimized: I/O stays on B" 2 1

    mark_log=$(log_mark)
    mp_cut "$MP_IP_B"
    t0=$MP_CUT_T
    t_cut=$t0
    cut_data=$(follow_secs "$t0" 1) || fail "no data through A within 30 s of B's cut [last rlun path failure: $(last_path_failure)]"
    expect_line "path B ($PB) failed" 30 "$mark_log" "$t0" "path failed" "portal=$PB"
    cut_fail_secs=$EXPECT_SECS
    awk -v s="$cut_fail_secs" 'BEGIN { exit !(s <= 10) }' ||
        fail "rlun noticed the cut path only ${cut_fail_secs}s after the cut (bound: 10 s with --path-check-interval 1s)"
    expect_line "I/O moved from B to A ($PA)" 30 "$mark_log" "$t0" "I/O moves to another path" "from=$PB" "to=$PA"
    cut_move_secs=$EXPECT_SECS
    io_on "3b. B cut: I/O on A" 1 2
    paths_are "3b." "$PA true active/non-optimized true" "$PB false active/optimized false"
    mp_fio_check failover "when path B was cut"
    mp_show "phase 3: B cut"
    sleep 5 # B's session keeps failing to reconnect meanwhile

    mark_log=$(log_mark)
    t0=$EPOCHREALTIME
    mp_restore
    failback_data=$(follow_secs "$t0" 2 90) || fail "no data through B within 90 s of its restoration"
    expect_line "path B ($PB) is back" 90 "$mark_log" "$t0" "path is back" "portal=$PB"
    back_secs=$EXPECT_SECS
    expect_line "I/O moved back to B ($PB)" 30 "$mark_log" "$t0" "I/O moves to another path" "to=$PB"
    failback_secs=$EXPECT_SECS
    io_on "3c. B back: I/O on B again" 2 1
    paths_are "3c." "$PA false active/non-optimized true" "$PB true active/optimized true"
    mp_show "phase 3: B restored"

    mp_fio_stop failover
    fio_max=$FIO_MAX_MS
    mp_figures mp-rlun.txt errors=0 "fio_max_ms=$fio_max" "trans_held_ms=$trans_held" \
        "beyond_ms=$(longest_beyond failover "$t_trans" "$t_trans_end")" "swap_s=$swap_data" "trans_s=$trans_data" \
        "cut_s=$cut_data" "failback_s=$failback_data" "mibs=$(fio_mibs failover)" \
        "swap_max_ms=$(longest_in failover "$t_swap" "$(awk -v t="$t_swap" 'BEGIN { printf "%.6f", t + 3 }')")" \
        "cut_max_ms=$(longest_in failover "$t_cut" "$(awk -v t="$t_cut" 'BEGIN { printf "%.6f", t + 8 }')")"
    grep -F 'stall_ms=' "$MP_LOG" | sed 's/^/  | rlun: /' | head -n 12

    # --- 3d. both paths cut for a few seconds, well inside the replacement
    # timeout (120 s): I/O waits and goes on, no error.
    mp_fio_start both
    io_on "3d. before both are cut: I/O on B" 2 1
    mark_log=$(log_mark)
    mp_cut "$LAB_IP_T"
    mp_cut "$MP_IP_B"
    t0=$MP_CUT_T
    expect_line "no usable path left" 30 "$mark_log" "$t0" "no usable path left"
    sleep 2
    t0=$EPOCHREALTIME
    mp_restore
    both_back=$(follow_secs "$t0" 2 90) || fail "no I/O through B within 90 s of both paths' return"
    log "both paths back: 32 commands through B ${both_back}s after the restore"
    io_on "3d. both back: I/O on B" 2 1
    mp_fio_stop both
    dmesg_clean "$mark" "the path changes under failover"
    mp_detach

    # --- 3e. both paths cut for longer than --replacement-timeout: a read
    # of the device fails with EIO, it does not hang; once the paths are
    # back the device reads again (rlun kept running).
    mp_attach attach-eio --replacement-timeout 6s --cache none
    mark=$(dmesg | wc -l)
    run "a read through both paths" 60 dd if="$MP_NBD" of=/dev/null bs=4k count=16 iflag=direct status=none
    mp_cut "$LAB_IP_T"
    mp_cut "$MP_IP_B"
    t0=$SECONDS
    local rc=0
    timeout -k 5 90 dd if="$MP_NBD" of=/dev/null bs=4k count=1 skip=1000 iflag=direct status=none 2>"$W/eio.err" || rc=$?
    eio_secs=$((SECONDS - t0))
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "3e. the read hung with both paths cut (over 90 s; --replacement-timeout 6s)"
    [ "$rc" -ne 0 ] || fail "3e. the read succeeded with both paths cut"
    grep -q 'Input/output error' "$W/eio.err" || fail "3e. the read failed, but not with EIO: $(cat "$W/eio.err")"
    log "ok: 3e. both paths cut: the read failed with EIO after ${eio_secs}s (--replacement-timeout 6s): $(head -n 1 "$W/eio.err")"
    kill -0 "$MP_PID" || fail "3e. rlun exited after the EIO"
    mark_log=$(log_mark)
    t0=$EPOCHREALTIME
    mp_restore
    expect_line "a path is back after both were cut" 90 "$mark_log" "$t0" "path is back"
    run "3e. a read after the paths returned" 60 dd if="$MP_NBD" of=/dev/null bs=4k count=16 skip=1000 iflag=direct status=none
    mp_detach

    # --- 3f. round-robin over two paths against one path, both groups
    # active/optimized: rlun bench, alternating, medians of LAB_MP_BENCH_ROUNDS.
    mp_alua a 0 1
    mp_alua b 0 0
    local rounds=${LAB_MP_BENCH_ROUNDS:-2} r case one rr url="iscsi://$PA/$MP_IQN/0"
    rr_table=""
    for case in "randread 4096 32" "read 131072 8"; do
        set -- $case
        : >"$W/bench-one.txt"
        : >"$W/bench-rr.txt"
        for ((r = 1; r <= rounds; r++)); do
            capture "bench $1 $2 one path (round $r)" 60 "$W/b.json" \
                "$RLUN" bench "$url" --pattern "$1" --bs "$2" --qd "$3" --duration 3s --json
            jq .mib_per_s "$W/b.json" >>"$W/bench-one.txt"
            capture "bench $1 $2 round-robin over both (round $r)" 60 "$W/b.json" \
                "$RLUN" bench "$url" --portal "$PB" --multipath-policy round-robin \
                --pattern "$1" --bs "$2" --qd "$3" --duration 3s --json
            jq .mib_per_s "$W/b.json" >>"$W/bench-rr.txt"
        done
        one=$(sort -g "$W/bench-one.txt" | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f", m}')
        rr=$(sort -g "$W/bench-rr.txt" | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f", m}')
        awk -v a="$one" 'BEGIN { exit !(a > 0) }' || fail "3f. rlun bench through one path measured nothing"
        log "3f. $1 $2 QD$3: one path $one MiB/s, round-robin over two $rr MiB/s ($(awk -v a="$one" -v b="$rr" 'BEGIN { printf "%.2f", b / a }')x; medians of $rounds)"
        rr_table="$rr_table $1 ${2}B: $(awk -v a="$one" -v b="$rr" 'BEGIN { printf "%.2f", b / a }')x;"
    done

    # --- 4. round-robin keeps to the best ALUA state present: with A
    # non-optimized only B carries I/O; with both optimized, both do.
    # About 70 s more: by hand (lab.py --set LAB_MULTIPATH_RR=1 ...); the
    # host tests cover round-robin failover, the unit tests its ALUA ranks.
    if [ "${LAB_MULTIPATH_RR:-0}" != 1 ]; then
        note "I/O followed the ALUA swap in ${swap_secs}s; back on B ${trans_secs}s after its transition ended; cut: path failed ${cut_fail_secs}s, I/O moved ${cut_move_secs}s; restored: back ${back_secs}s, failback ${failback_secs}s; longest fio I/O ${fio_max} ms; both cut 2 s: no error, I/O again ${both_back}s after; both cut past --replacement-timeout 6s: EIO in ${eio_secs}s, reads again after; round-robin/one path:${rr_table} rlun paths checked: $MP_PATHS_CHECKED; $MP_RTPG; round-robin phase not run (LAB_MULTIPATH_RR=1 runs it)"
        return 0
    fi
    mp_alua a 1 0 # as the failover run left them before 3f
    mp_alua b 0 1
    mp_attach attach-rr --multipath-policy round-robin
    mark=$(dmesg | wc -l)
    grep -F "logged in through" "$MP_LOG" | grep -qF 'policy="round-robin"' ||
        fail "rlun did not log the round-robin policy"
    wait_for "rlun logs A ($PA) as active/non-optimized" 20 \
        logged 0 "ALUA: the path's target port group" "portal=$PA" "state=active/non-optimized"
    mp_fio_start rr
    io_on "4a. round-robin, A non-optimized, B optimized: I/O on B only" 2 1
    paths_are "4a." "$PA false active/non-optimized true" "$PB true active/optimized true"
    mark_log=$(log_mark)
    t0=$EPOCHREALTIME
    mp_alua a 0 0
    expect_line "A ($PA) is active/optimized" 30 "$mark_log" "$t0" \
        "ALUA state of the path changed" "portal=$PA" "to=active/optimized"
    io_on_both "4b. round-robin, both groups active/optimized: I/O on both paths"
    paths_are "4b." "$PA true active/optimized true" "$PB true active/optimized true"
    mp_show "phase 4: round-robin"

    # --- 4c. A cut: the URL's portal, the first session (rlun list's),
    # through which the checker reads the port groups while it is up.
    mark_log=$(log_mark)
    mp_cut "$LAB_IP_T"
    expect_line "path A ($PA) failed" 30 "$mark_log" "$MP_CUT_T" "path failed" "portal=$PA"
    rr_fail_secs=$EXPECT_SECS
    awk -v s="$rr_fail_secs" 'BEGIN { exit !(s <= 10) }' ||
        fail "rlun noticed the cut path A only ${rr_fail_secs}s after the cut (bound: 10 s)"
    io_on "4c. round-robin, A cut: I/O on B only" 2 1
    paths_are "4c." "$PA false active/optimized false" "$PB true active/optimized true"
    mp_fio_check rr "when path A was cut"
    mp_show "phase 4c: A cut"
    sleep 3
    mark_log=$(log_mark)
    t0=$EPOCHREALTIME
    mp_restore
    expect_line "path A ($PA) is back" 90 "$mark_log" "$t0" "path is back" "portal=$PA"
    rr_back_secs=$EXPECT_SECS
    io_on_both "4d. round-robin, A back: I/O on both paths again"
    paths_are "4d." "$PA true active/optimized true" "$PB true active/optimized true"
    mp_fio_stop rr
    dmesg_clean "$mark" "round-robin"
    mp_detach

    note "I/O followed the ALUA swap in ${swap_secs}s; back on B ${trans_secs}s after its transition ended; cut: path failed ${cut_fail_secs}s, I/O moved ${cut_move_secs}s; restored: back ${back_secs}s, failback ${failback_secs}s; longest fio I/O ${fio_max} ms (failover), ${FIO_MAX_MS} ms (round-robin; A cut: failed ${rr_fail_secs}s, back ${rr_back_secs}s); rlun paths checked: $MP_PATHS_CHECKED; $MP_RTPG"
}
