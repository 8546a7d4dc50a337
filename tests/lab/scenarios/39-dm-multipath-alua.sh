# about: the anchor of 38-rlun-multipath-alua, same VM and same LIO LUN: dm-multipath (multipath-tools, multipathd) over two open-iscsi sessions to the same two portals, the same fio write+verify loop on /dev/mapper/mpathX, the same ALUA swap, transition, path cut and restore; reports dm's application errors, longest I/O and time to use the new optimized group (from LIO's per-port counters, as 38 does for rlun) and prints both side by side
# default: yes
# timeout: 900
#
# Tuned as 38 tunes rlun (--path-check-interval 1s --path-timeout 2s; 38 also
# fences with --path-fence lun-reset, which dm-multipath has no equivalent of):
# multipathd checks every path each second (polling_interval 1, tur,
# checker_timeout 2), open-iscsi notices a dead connection within about
# 2 s (noop_out_interval 1, noop_out_timeout 1) and fails the commands up
# to dm after replacement_timeout 2 (fast_io_fail_tmo 2 says the same to
# multipathd). group_by_prio with prio alua and the kernel's scsi_dh_alua
# (hardware_handler "1 alua"), failback immediate, no_path_retry 12 (dm's
# queue_if_no_path for 12 checks, like rlun's replacement timeout). The
# figures of both initiators go into compare-multipath.json, which the
# runner prints as a table.
#
# The VM has no udevd: multipathd finds the paths through sysfs
# (uid_attribute "" reads the WWID from VPD 0x83 in sysfs) and
# DM_DISABLE_UDEV=1 makes libdevmapper create /dev/mapper nodes itself.
# multipathd does not learn of new paths without udev events, so both
# sessions are logged in before it starts.

# shellcheck source=../guest/multipath.sh
source "$(dirname "${BASH_SOURCE[0]}")/../guest/multipath.sh"

DM_MAP= # the multipath map's name (mpatha)

# dm_disk IP: the kernel initiator's disk of the mp LUN through IP:MP_PORT.
dm_disk() {
    local s sess d deadline=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$deadline" ]; do
        for s in /sys/class/iscsi_session/session*; do
            [ "$(cat "$s/targetname" 2>/dev/null)" = "$MP_IQN" ] || continue
            sess=${s##*/session}
            [ "$(cat "/sys/class/iscsi_connection/connection$sess:0/persistent_address" 2>/dev/null)" = "$1" ] || continue
            for d in "$s"/device/target*/*:*:*:0/block/*; do
                [ -b "/dev/${d##*/}" ] && echo "${d##*/}" && return 0
            done
        done
        sleep 0.5
    done
    return 1
}

# dm_login PORTAL: a node record with the tuned timeouts, logged in.
dm_login() {
    local p=$1
    run "iscsiadm: node $MP_IQN at $p" 30 iscsiadm -m node -o new -T "$MP_IQN" -p "$p"
    on_exit "iscsiadm -m node -T '$MP_IQN' -p '$p' --logout >/dev/null 2>&1; iscsiadm -m node -T '$MP_IQN' -p '$p' -o delete >/dev/null 2>&1; true"
    local kv
    for kv in node.session.timeo.replacement_timeout=2 \
        'node.conn[0].timeo.noop_out_interval=1' 'node.conn[0].timeo.noop_out_timeout=1'; do
        run "iscsiadm: $p: ${kv%%=*} = ${kv#*=}" 30 \
            iscsiadm -m node -T "$MP_IQN" -p "$p" -o update -n "${kv%%=*}" -v "${kv#*=}"
    done
    run "iscsiadm: login $MP_IQN at $p" 90 iscsiadm -m node -T "$MP_IQN" -p "$p" --login
}

# dm_fio_stop: like mp_fio_stop, but an fio error is a figure of dm's, not
# a failure of the scenario: DM_ERRORS says what fio saw.
dm_fio_stop() {
    local p=$LAB_WORK/fio-dm pid passes n
    pid=$(cat "$p.pid")
    touch "$p.stop"
    wait_for "the fio loop (dm) ends its pass" 240 bash -c "! kill -0 $pid 2>/dev/null"
    wait "$pid" || true
    DM_ERRORS=0
    if [ -e "$p.failed" ]; then
        DM_ERRORS="fio failed: $(cat "$p.failed")"
        log "dm-multipath: $DM_ERRORS"
    fi
    passes=$(grep -c ' end ' "$p.passes")
    for ((n = 1; n <= passes; n++)); do
        log "  fio dm pass $n: $(grep "^$n " "$p.passes" | awk '{printf "%s %s  ", $2, $3}')longest I/O $(jq '[.jobs[0] | .write.clat_ns.max, .read.clat_ns.max] | max / 1000000 | floor' "$p-$n.json" 2>/dev/null) ms"
    done
    FIO_MAX_MS=$(cat "$p"-*.json 2>/dev/null | jq -s '[.[].jobs[0] | .write.clat_ns.max, .read.clat_ns.max] | max / 1000000 | floor')
    log "fio dm: $passes passes; longest I/O: $FIO_MAX_MS ms; errors: $DM_ERRORS"
}

# dm_paths WHAT: multipath -ll, logged.
dm_paths() {
    log "--- $1: multipath -ll"
    # (LIO's page 0x83 draws a "parse_vpd_pg83: invalid device designator" line per call)
    timeout -k 5 30 multipath -ll 2>/dev/null | sed 's/^/  | /'
}

# compare_table: both initiators' figures (mp-rlun.txt from 38, when it ran
# in this boot; mp-dm.txt from here) as compare-multipath.json's table.
compare_table() {
    python3 - "$LAB_OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def figures(name):
    f = out / name
    if not f.exists():
        return {}
    return dict(line.split("=", 1) for line in f.read_text().splitlines() if "=" in line)
rlun, dm = figures("mp-rlun.txt"), figures("mp-dm.txt")
rows = [
    ("application (fio) errors", "errors"),
    ("longest fio I/O, whole run (ms)", "fio_max_ms"),
    ("  B held transitioning by the scenario (ms)", "trans_held_ms"),
    ("longest fio I/O less its part in the transition (ms)", "beyond_ms"),
    ("longest fio I/O of the passes around the swap (ms)", "swap_max_ms"),
    ("longest fio I/O of the passes around the cut (ms)", "cut_max_ms"),
    ("ALUA swap: 32 commands through B (s)", "swap_s"),
    ("B's transition ended: 32 commands through B (s)", "trans_s"),
    ("B cut: 32 commands through A (s)", "cut_s"),
    ("B restored: 32 commands through B again (s)", "failback_s"),
    ("fio MiB/s over the run (written + verified)", "mibs"),
]
table = ["multipath with ALUA, LIO, same LUN, same fio loop and path changes (38 vs 39):", "",
         f"{'':48} {'rlun attach':>14} {'dm-multipath':>14}"]
for label, key in rows:
    table.append(f"{label:48} {rlun.get(key, 'not run'):>14} {dm.get(key, 'not run'):>14}")
table.append("")
table.append("timeouts: rlun --path-check-interval 1s --path-timeout 2s --nop-interval 1s --nop-timeout 1s --path-fence lun-reset;")
table.append("  dm: polling_interval 1, checker_timeout 2,")
table.append("  open-iscsi noop_out 1/1, replacement_timeout 2, fast_io_fail_tmo 2. Seconds: from the change until")
table.append("  LIO's per-port counter shows 32 more commands through that port (polled every 0.1 s; includes the")
table.append("  pause between two fio passes when the change fell into one). \"Around\": the fio passes that ran")
table.append("  within 3 s (swap) or 8 s (cut) of the change. One run each: single samples.")
(out / "compare-multipath.json").write_text(json.dumps({"rlun": rlun, "dm": dm, "table": table}, indent=1))
print("\n".join(table))
PY
}

scenario() {
    command -v multipathd >/dev/null || skip "multipath-tools is not installed (tests/lab/install.sh installs it)"
    command -v iscsiadm >/dev/null || skip "open-iscsi is not installed"
    command -v nft >/dev/null || skip "nft (nftables) is not installed: the path cut needs it"
    need lio
    need iscsid
    local W=$LAB_WORK sda sdb t0 t_swap t_trans t_trans_end trans_held swap trans cut failback
    modules dm_multipath dm_service_time scsi_dh_alua
    mp_setup
    on_exit "nft delete table inet rlun_mp 2>/dev/null; true"

    dm_login "$PA"
    dm_login "$PB"
    sda=$(dm_disk "$LAB_IP_T") || fail "no kernel disk of $MP_IQN through $PA"
    sdb=$(dm_disk "$MP_IP_B") || fail "no kernel disk of $MP_IQN through $PB"
    log "kernel initiator: /dev/$sda through $PA, /dev/$sdb through $PB"

    cat >/etc/multipath.conf <<'EOF'
defaults {
    user_friendly_names yes
    find_multipaths off
    polling_interval 1
    max_polling_interval 1
    checker_timeout 2
    uid_attribute ""
}
blacklist {
    devnode "^(ram|loop|nbd|ublkb|zram|fd|sr|vd)[0-9]*"
}
devices {
    device {
        vendor "LIO-ORG"
        product ".*"
        path_grouping_policy group_by_prio
        path_selector "service-time 0"
        path_checker tur
        prio alua
        hardware_handler "1 alua"
        failback immediate
        no_path_retry 12
        fast_io_fail_tmo 2
    }
}
EOF
    mkdir -p /etc/multipath
    on_exit "multipath -F >/dev/null 2>&1; pkill -x multipathd; true"
    on_exit "cp '$W/multipathd.log' '$LAB_OUT/logs/$LAB_SCENARIO-multipathd.log' 2>/dev/null; true"
    DM_DISABLE_UDEV=1 setsid multipathd -d -s -v3 </dev/null >"$W/multipathd.log" 2>&1 &
    wait_for "multipathd made a map of two paths" 60 \
        bash -c "dmsetup ls --target multipath 2>/dev/null | grep -q . && [ \$(multipath -ll 2>/dev/null | grep -cE ' (sd[a-z]+) ') -ge 2 ]"
    DM_MAP=$(dmsetup ls --target multipath | awk 'NR == 1 {print $1}')
    wait_for "/dev/mapper/$DM_MAP" 30 test -b "/dev/mapper/$DM_MAP"
    dm_paths "map $DM_MAP made"
    multipath -ll "$DM_MAP" | grep -qE "hwhandler='?1 alua" ||
        fail "dm-multipath does not use the ALUA handler: $(multipath -ll "$DM_MAP" | head -n 3 | tr '\n' ' ')"

    MP_FIO_DEV=/dev/mapper/$DM_MAP
    mp_fio_start dm
    io_on "dm 1. A active/optimized, B standby: I/O on A only" 1 2

    # 2. the states swap, as in 38.
    t0=$EPOCHREALTIME
    t_swap=$t0
    mp_alua a 2 0
    mp_alua b 0 1
    swap=$(follow_secs "$t0" 2) || swap="over 30"
    log "dm: 32 commands through B ${swap}s after the swap"
    dm_paths "after the swap"
    sleep 5 # as 38's checks take: the next change falls into another fio pass

    # 2b. B transitioning for MP_TRANSITION s, then active/optimized again.
    t_trans=$EPOCHREALTIME
    mp_alua b 15 1
    sleep_until "$(awk -v t="$t_trans" -v d="$MP_TRANSITION" 'BEGIN { printf "%.6f", t + d }')"
    t0=$EPOCHREALTIME
    trans_held=$(held_ms "$t_trans" "$t0")
    mp_alua b 0 1
    t_trans_end=$EPOCHREALTIME
    trans=$(follow_secs "$t0" 2) || trans="over 30"
    log "dm: 32 commands through B ${trans}s after its transition ended"

    # 3. A active/non-optimized, then B cut.
    mp_alua a 1 0
    sleep 3
    mp_cut "$MP_IP_B"
    cut=$(follow_secs "$MP_CUT_T" 1) || cut="over 30"
    log "dm: 32 commands through A ${cut}s after B was cut"
    dm_paths "B cut"
    sleep 5
    t0=$EPOCHREALTIME
    mp_restore
    failback=$(follow_secs "$t0" 2 90) || failback="over 90"
    log "dm: 32 commands through B ${failback}s after B was restored"
    dm_paths "B restored"

    dm_fio_stop
    mp_figures mp-dm.txt "errors=$([ "$DM_ERRORS" = 0 ] && echo 0 || echo yes)" "fio_max_ms=$FIO_MAX_MS" "trans_held_ms=$trans_held" \
        "beyond_ms=$(longest_beyond dm "$t_trans" "$t_trans_end")" \
        "swap_s=$swap" "trans_s=$trans" "cut_s=$cut" "failback_s=$failback" \
        "mibs=$(fio_mibs dm)" \
        "swap_max_ms=$(longest_in dm "$t_swap" "$(awk -v t="$t_swap" 'BEGIN { printf "%.6f", t + 3 }')")" \
        "cut_max_ms=$(longest_in dm "$MP_CUT_T" "$(awk -v t="$MP_CUT_T" 'BEGIN { printf "%.6f", t + 8 }')")"
    compare_table | sed 's/^/  | /'
    [ -e "$LAB_OUT/mp-rlun.txt" ] || log "38-rlun-multipath-alua did not run in this boot: rlun's column is empty"
    note "dm-multipath: errors: $DM_ERRORS; longest fio I/O ${FIO_MAX_MS} ms; swap ${swap}s, after transition ${trans}s, cut ${cut}s, failback ${failback}s (table: compare-multipath.json)"
}
