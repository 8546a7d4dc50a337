# Shared by the multipath scenarios (38-rlun-multipath-alua,
# 39-dm-multipath-alua): one fileio LUN `mp` served by LIO through two TPGs
# of one target, each TPG's lun_0 in its own ALUA target port group, the
# per-port counters that show which port carried the data, a loop of fio
# write+verify passes on a block device, and the nftables path cut.
# Sourced by the scenario after lib.sh.
#
# LIO serves the backstore `mp` through tpgt_1 and tpgt_2 of its own target
# (nothing the other scenarios use changes). Each TPG's lun_0 is one target
# port (its relative port identifier is in VPD page 0x83 read through it)
# and belongs to one ALUA target port group: mp_a (id 1) or mp_b (id 2),
# implicit ALUA, states written into configfs as an array would change
# them. LIO answers reads and writes through a standby port with NOT READY
# 04/0B (TEST UNIT READY too; 04/0A while transitioning) and raises UNIT
# ATTENTION 2A/06 on the sessions of a group whose state changed. Which
# port carries the data is read from LIO itself:
# `statistics/scsi_tgt_port/{read,write}_mbytes` of each TPG's lun_0 count
# the data of the commands completed through it.
#
# The fio load is a loop of full write+verify passes over the device, each
# with its own random seed (so that a write lost in a failover cannot hide
# behind identical data of an earlier pass), until the scenario stops it.

MP_IQN=iqn.2026-11.org.rlun.lab:multipath
MP_PORT=3264
MP_IP_B=10.99.0.3 # a second address on v0, the target side
MP_MIB=16
MP_DEV=$LIO/core/fileio_0/mp
MP_TGT=$LIO/iscsi/$MP_IQN
PA=$LAB_IP_T:$MP_PORT # path A: tpgt_1, group mp_a
PB=$MP_IP_B:$MP_PORT  # path B: tpgt_2, group mp_b
MP_NBD=               # rlun's /dev/nbdN, once attached
MP_PID=               # and its process
MP_LOG=               # and its log
MP_FIO_DEV=           # the device the fio loop writes (default: MP_NBD)
MP_FIO_SIZE=${MP_MIB}M # how much of it
MP_B_URL=$PB          # how mp_attach names path B (iser://... for iSER)
MP_PATHS_CHECKED=no   # whether `rlun paths` was there to check

mp_setup() {
    local n tpg ip g id
    if [ "$(cat "$MP_TGT/tpgt_2/enable" 2>/dev/null)" = 1 ]; then
        # Set up by an earlier scenario of this boot: the states back to
        # the start (A active/optimized and preferred, B standby).
        log "LIO: $MP_IQN is set up already (an earlier scenario of this boot)"
        mp_alua a 0 1
        mp_alua b 2 0
        return 0
    fi
    random_file "$LAB_DATA/mp.img" "$MP_MIB"
    run "fileio mp: mkdir" 60 mkdir -p "$MP_DEV"
    cfs "$MP_DEV/control" "fd_dev_name=$LAB_DATA/mp.img,fd_dev_size=$((MP_MIB << 20))"
    # Before enabling: the NAA designator of page 0x83 comes from it.
    cfs "$MP_DEV/wwn/vpd_unit_serial" rlun-lab-mp
    cfs "$MP_DEV/enable" 1
    ip -o addr show dev v0 | grep -qF " $MP_IP_B/" ||
        run "second target address $MP_IP_B on v0" 10 ip addr add "$MP_IP_B/24" dev v0
    for n in 1 2; do
        tpg=$MP_TGT/tpgt_$n
        ip=$LAB_IP_T
        [ "$n" = 2 ] && ip=$MP_IP_B
        run "$MP_IQN: tpgt_$n" 60 mkdir -p "$tpg/lun/lun_0"
        cfs "$tpg/attrib/generate_node_acls" 1
        cfs "$tpg/attrib/demo_mode_write_protect" 0
        cfs "$tpg/attrib/cache_dynamic_acls" 1
        cfs "$tpg/attrib/authentication" 0
        run "tpgt_$n: lun_0 -> mp" 60 ln -s "$MP_DEV" "$tpg/lun/lun_0/mp"
        run "tpgt_$n: portal $ip:$MP_PORT" 60 mkdir -p "$tpg/np/$ip:$MP_PORT"
        cfs "$tpg/enable" 1
    done
    # Two target port groups, implicit ALUA; A active/optimized and
    # preferred, B standby. No delay on a non-optimized path.
    for g in a b; do
        id=1
        [ "$g" = b ] && id=2
        run "ALUA group mp_$g" 10 mkdir -p "$MP_DEV/alua/mp_$g"
        cfs "$MP_DEV/alua/mp_$g/tg_pt_gp_id" "$id"
        cfs "$MP_DEV/alua/mp_$g/alua_access_type" 1
        cfs "$MP_DEV/alua/mp_$g/nonop_delay_msecs" 0
    done
    cfs "$MP_TGT/tpgt_1/lun/lun_0/alua_tg_pt_gp" mp_a
    cfs "$MP_TGT/tpgt_2/lun/lun_0/alua_tg_pt_gp" mp_b
    mp_alua a 0 1
    mp_alua b 2 0
    [ -r "$MP_TGT/tpgt_1/lun/lun_0/statistics/scsi_tgt_port/write_mbytes" ] ||
        fail "LIO has no per-port statistics (statistics/scsi_tgt_port) to tell the paths' I/O apart"
}

# mp_alua GROUP STATE PREFERRED: an implicit transition, as configfs does it.
mp_alua() {
    cfs "$MP_DEV/alua/mp_$1/alua_access_state" "$2"
    cfs "$MP_DEV/alua/mp_$1/preferred" "$3"
}

# MP_TRANSITION: how long 38 and 39 hold group B transitioning (s). Both
# end it at the same time after its start, whatever their checks in
# between took, so that the longest I/O, which the transition sets on
# both sides, compares the initiators and not the scenarios.
MP_TRANSITION=5
# sleep_until T: sleep until $EPOCHREALTIME reaches T (at once if past).
sleep_until() {
    local left
    left=$(awk -v t="$1" -v n="$EPOCHREALTIME" 'BEGIN { d = t - n; printf "%.3f", (d > 0 ? d : 0) }')
    sleep "$left"
}
# held_ms T0 T1: milliseconds from T0 to T1.
held_ms() {
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 }'
}

port_stat() { # port_stat TPGT FILE
    local v
    v=$(<"$MP_TGT/tpgt_$1/lun/lun_0/statistics/scsi_tgt_port/$2")
    echo "${v//[!0-9]/}"
}
# port_mb TPGT: MiB of data completed through that TPG's lun_0.
port_mb() {
    echo $(($(port_stat "$1" read_mbytes) + $(port_stat "$1" write_mbytes)))
}

# mp_show WHEN: LIO's view (states, members, per-port counters) and rlun's.
mp_show() {
    local g n
    log "--- $1"
    for g in a b; do
        log "  LIO group mp_$g: id $(<"$MP_DEV/alua/mp_$g/tg_pt_gp_id") state $(<"$MP_DEV/alua/mp_$g/alua_access_state") preferred $(<"$MP_DEV/alua/mp_$g/preferred") members $(tr '\n\000' '  ' <"$MP_DEV/alua/mp_$g/members")"
    done
    for n in 1 2; do
        log "  LIO tpgt_$n lun_0: in_cmds $(port_stat "$n" in_cmds) read_mbytes $(port_stat "$n" read_mbytes) write_mbytes $(port_stat "$n" write_mbytes)"
    done
    if [ -n "$MP_NBD" ] && rlun_has paths; then
        timeout -k 5 30 "$RLUN" paths "$MP_NBD" 2>&1 | sed 's/^/  | rlun paths: /' || true
    fi
}

# paths_are WHAT "PORTAL IN_USE ALUA_STATE UP"...: `rlun paths --json`
# (when this rlun has it) shows each path so.
paths_are() {
    local what=$1 want got
    shift
    rlun_has paths || return 0
    timeout -k 5 30 "$RLUN" paths --json "$MP_NBD" >"$LAB_WORK/paths.json" ||
        fail "$what: rlun paths --json $MP_NBD failed"
    got=$(jq -r '.[0].luns[0].multipath.paths[] | "\(.portal) \(.in_use) \(.alua_state) \(.up)"' "$LAB_WORK/paths.json" | sort)
    want=$(printf '%s\n' "$@" | sort)
    [ "$got" = "$want" ] || fail "$what: rlun paths says [$(echo "$got" | tr '\n' ';')], expected [$(echo "$want" | tr '\n' ';')]"
    log "ok: $what: rlun paths: $(echo "$got" | tr '\n' ';')"
    MP_PATHS_CHECKED=yes
}

# last_path_failure: rlun's last "path failed" line, for a failure's context.
last_path_failure() {
    grep -F 'path failed' "$MP_LOG" | tail -n 1 || true
}

# io_on WHAT ON OFF: within 30 s, 3 MiB of data go through tpgt_ON while
# not one byte completes through tpgt_OFF.
io_on() {
    local what=$1 on=$2 off=$3 a0 b0 c0 a1 b1 c1 t0=$SECONDS
    a0=$(port_mb "$on") b0=$(port_mb "$off") c0=$(port_stat "$off" in_cmds)
    while :; do
        sleep 1
        a1=$(port_mb "$on")
        [ $((a1 - a0)) -ge 3 ] && break
        [ $((SECONDS - t0)) -lt 30 ] || fail "$what: tpgt_$on carried only $((a1 - a0)) MiB in 30 s (fio stalled?) [last rlun path failure: $(last_path_failure)]"
    done
    b1=$(port_mb "$off") c1=$(port_stat "$off" in_cmds)
    log "$what: in $((SECONDS - t0)) s tpgt_$on carried +$((a1 - a0)) MiB; tpgt_$off +$((b1 - b0)) MiB (+$((c1 - c0)) commands: the checker's)"
    [ "$b1" -eq "$b0" ] || fail "$what: data went through tpgt_$off too (+$((b1 - b0)) MiB) while only tpgt_$on should carry I/O [last rlun path failure: $(last_path_failure)]"
    log "ok: $what"
}

# follow_secs T0 PORT [LIMIT]: wait (LIMIT, 30 s at most) until 32 more
# commands have come in through tpgt_PORT than when called; print the
# seconds from T0 (epoch) to when that was seen. The same measure for every
# initiator: LIO's counters, polled every 0.1 s, not the initiator's own
# log. Commands rather than data, so that a slower initiator is not also
# counted slower to follow; 32 is more than a path checker sends in 10 s
# (TEST UNIT READY and REPORT TARGET PORT GROUPS once a second). The
# figure includes the pause between two fio passes (fio starting again,
# a few tenths of a second here) when the change fell into one.
follow_secs() {
    local t0=$1 port=$2 c0 deadline=$((SECONDS + ${3:-30}))
    c0=$(port_stat "$port" in_cmds)
    while [ "$(port_stat "$port" in_cmds)" -lt $((c0 + 32)) ]; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

# longest_in TAG T0 T1: the longest I/O (ms) of the fio passes of TAG that
# ran at some time between T0 and T1 (epoch seconds): the stall a change
# at T0 caused, to the resolution of a pass (a few seconds). Call it
# after the loop stopped.
longest_in() {
    local p=$LAB_WORK/fio-$1 n s e max=0 v
    while read -r n s; do
        e=$(awk -v n="$n" '$1 == n && $2 == "end" {print $3}' "$p.passes")
        [ -n "$e" ] || continue
        awk -v s="$s" -v e="$e" -v a="$2" -v b="$3" 'BEGIN { exit !(s <= b && e >= a) }' || continue
        v=$(jq '[.jobs[0] | .write.clat_ns.max, .read.clat_ns.max] | max / 1000000 | floor' "$p-$n.json" 2>/dev/null) || continue
        [ "${v:-0}" -gt "$max" ] && max=$v
    done < <(awk '$2 == "start" {print $1, $3}' "$p.passes")
    echo "$max"
}

# longest_beyond TAG T0 T1: the longest I/O (ms) of the fio loop TAG, less
# the part of it that fell into T0..T1 (epoch seconds): with T0..T1 the
# transition the target imposes on every initiator, what an initiator adds
# to it. From fio's per-I/O latency logs (completion time in epoch ms,
# latency in ns).
longest_beyond() {
    cat "$LAB_WORK/fio-$1"-*_lat.1.log 2>/dev/null | awk -F', ' -v a="$2" -v b="$3" '
        BEGIN { a *= 1000; b *= 1000; max = 0 }
        {
            e = $1; l = $2 / 1000000; s = e - l
            lo = s > a ? s : a; hi = e < b ? e : b
            v = l - (hi > lo ? hi - lo : 0)
            if (v > max) max = v
        }
        END { printf "%d", max }'
}

# fio_mibs TAG: MiB/s of the fio loop's passes (written plus verified data
# over the passes' run time).
fio_mibs() {
    cat "$LAB_WORK/fio-$1"-*.json 2>/dev/null | jq -s \
        '([.[].jobs[0] | .write.io_bytes + .read.io_bytes] | add) / 1048576 / (([.[].jobs[0].job_runtime] | add) / 1000) | . * 10 | floor / 10'
}

# mp_figures FILE KEY=VALUE...: the run's figures for the comparison table
# (39-dm-multipath-alua puts both initiators' side by side).
mp_figures() {
    local f=$LAB_OUT/$1
    shift
    printf '%s\n' "$@" >"$f"
}

# io_on_both WHAT: within 30 s, 2 MiB of data through each port.
io_on_both() {
    local what=$1 a0 b0 a1 b1 t0=$SECONDS
    a0=$(port_mb 1) b0=$(port_mb 2)
    while :; do
        sleep 1
        a1=$(port_mb 1) b1=$(port_mb 2)
        [ $((a1 - a0)) -ge 2 ] && [ $((b1 - b0)) -ge 2 ] && break
        [ $((SECONDS - t0)) -lt 30 ] || fail "$what: in 30 s tpgt_1 carried +$((a1 - a0)) MiB and tpgt_2 +$((b1 - b0)) MiB (expected 2 MiB or more each)"
    done
    log "ok: $what: in $((SECONDS - t0)) s tpgt_1 carried +$((a1 - a0)) MiB, tpgt_2 +$((b1 - b0)) MiB"
}

# since MARK: rlun's log lines after line MARK.
since() { tail -n +"$(($1 + 1))" "$MP_LOG"; }
# logged MARK FIXED...: the first line after MARK containing every FIXED string.
logged() {
    local mark=$1 lines
    shift
    lines=$(since "$mark")
    while [ $# -gt 0 ]; do
        lines=$(grep -F -- "$1" <<<"$lines") || return 1
        shift
    done
    [ -n "$lines" ] && printf '%s\n' "$lines" | head -n 1
}
# secs_after T0 LINE: seconds from T0 (epoch) to LINE's timestamp.
secs_after() {
    local ts
    ts=$(date -d "${2%% *}" +%s.%N) || return 1
    awk -v a="$1" -v b="$ts" 'BEGIN { printf "%.1f", b - a }'
}
# expect_line WHAT SECS MARK T0 FIXED...: wait for the line, log it and how
# long after T0 rlun wrote it; the seconds are left in EXPECT_SECS.
expect_line() {
    local what=$1 secs=$2 mark=$3 t0=$4 line
    shift 4
    wait_for "rlun logs: $what" "$secs" logged "$mark" "$@"
    line=$(logged "$mark" "$@")
    EXPECT_SECS=$(secs_after "$t0" "$line")
    log "ok: $what, ${EXPECT_SECS}s after the change: $line"
}
log_mark() { wc -l <"$MP_LOG"; }

# mp_attach NAME ARGS...: rlun attach through both portals, its log in
# $LAB_WORK/NAME.log; tuned as 39 tunes dm-multipath and open-iscsi: a
# path check every second, 2 s path timeout, NOP-Out after 1 s of silence
# answered within 1 s. Sets MP_NBD, MP_PID, MP_LOG.
mp_attach() {
    local name=$1 W=$LAB_WORK
    shift
    MP_LOG=$W/$name.log
    on_exit "cp '$MP_LOG' '$LAB_OUT/logs/$LAB_SCENARIO-$name.log' 2>/dev/null; true"
    RUST_LOG=rlun=info setsid "$RLUN" attach "iscsi://$PA/$MP_IQN/0" --portal "$MP_B_URL" \
        --path-check-interval 1s --path-timeout 2s --nop-interval 1s --nop-timeout 1s "$@" \
        </dev/null >"$W/$name.out" 2>"$MP_LOG" &
    MP_PID=$!
    wait_for "rlun attach ($name) printed its device" 90 grep -q '^/dev/nbd' "$W/$name.out"
    MP_NBD=$(head -n 1 "$W/$name.out")
    wait_for "$MP_NBD connected" 30 test -e "/sys/block/${MP_NBD#/dev/}/pid"
    sed 's/^/  | rlun: /' "$MP_LOG"
    grep -qF "logged in portal=$PA" "$MP_LOG" || fail "rlun did not log in through $PA"
    grep -qF "logged in portal=$PB" "$MP_LOG" || fail "rlun did not log in through $PB"
    # "logged in through several portals paths=2 up=2" (the wording has
    # changed before: match the fields).
    grep -F "logged in through" "$MP_LOG" | grep -qF "paths=2 up=2" ||
        fail "rlun did not report both paths up: $(grep -F 'logged in' "$MP_LOG" | tr '\n' ' ')"
}

# mp_detach: read the whole device, detach, compare with the backing file.
mp_detach() {
    local rc=0 W=$LAB_WORK
    run "read all of $MP_NBD (O_DIRECT)" 180 dd if="$MP_NBD" of="$W/dev.img" bs=1M iflag=direct status=none
    run "rlun detach $MP_NBD" 120 "$RLUN" detach "$MP_NBD"
    wait_for "rlun exited" 60 bash -c "! kill -0 $MP_PID"
    wait "$MP_PID" || rc=$?
    assert_eq "rlun attach exit code" 0 "$rc"
    assert_same_data "$MP_NBD as read at the end vs LIO's backing file" "$LAB_DATA/mp.img" "$W/dev.img"
    if grep -E ' (ERROR|WARN) ' "$MP_LOG" >"$W/warn.txt"; then
        log "rlun's warnings and errors:"
        sed 's/^/  | /' "$W/warn.txt" | head -n 30
    fi
    MP_NBD=
}

mp_fio_loop() { # mp_fio_loop TAG
    local i=0 rc p=$LAB_WORK/fio-$1
    while [ ! -e "$p.stop" ]; do
        i=$((i + 1))
        rc=0
        echo "$i start $EPOCHREALTIME" >>"$p.passes"
        fio --name=mp --filename="${MP_FIO_DEV:-$MP_NBD}" --rw=randwrite --bsrange=4k-64k --ioengine=libaio \
            --iodepth=8 --direct=1 --size="$MP_FIO_SIZE" --randseed=$((7919 * i)) \
            --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 \
            --write_lat_log="$p-$i" --log_unix_epoch=1 \
            --output-format=json --output="$p-$i.json" </dev/null >/dev/null 2>"$p-$i.err" || rc=$?
        echo "$i end $EPOCHREALTIME rc=$rc" >>"$p.passes"
        if [ "$rc" -ne 0 ]; then
            echo "pass $i: exit code $rc: $(head -n 3 "$p-$i.err" | tr '\n' ' ')" >"$p.failed"
            return 1
        fi
    done
}

# mp_fio_start TAG / mp_fio_check TAG WHEN / mp_fio_stop TAG: the loop of
# fio passes in the background; FIO_MAX_MS is the longest I/O it saw.
mp_fio_start() {
    local p=$LAB_WORK/fio-$1
    rm -f "$p".*
    mp_fio_loop "$1" &
    echo $! >"$p.pid"
    on_exit "touch '$p.stop'; cat '$p'-*.err > '$LAB_OUT/logs/$LAB_SCENARIO-fio-$1.err' 2>/dev/null; cp '$p.passes' '$LAB_OUT/logs/$LAB_SCENARIO-fio-$1.passes' 2>/dev/null; true"
}
mp_fio_check() {
    [ ! -e "$LAB_WORK/fio-$1.failed" ] || fail "fio verify failed $2: $(cat "$LAB_WORK/fio-$1.failed")"
}
mp_fio_stop() {
    local p=$LAB_WORK/fio-$1 pid rc=0 passes n ios
    pid=$(cat "$p.pid")
    touch "$p.stop"
    wait_for "the fio loop ($1) ends its pass" 240 bash -c "! kill -0 $pid 2>/dev/null"
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "fio verify failed: $(cat "$p.failed" 2>/dev/null)"
    passes=$(grep -c ' end ' "$p.passes")
    for ((n = 1; n <= passes; n++)); do
        log "  fio $1 pass $n: $(grep "^$n " "$p.passes" | awk '{printf "%s %s  ", $2, $3}')longest I/O $(jq '[.jobs[0] | .write.clat_ns.max, .read.clat_ns.max] | max / 1000000 | floor' "$p-$n.json") ms"
    done
    FIO_MAX_MS=$(cat "$p"-*.json | jq -s '[.[].jobs[0] | .write.clat_ns.max, .read.clat_ns.max] | max / 1000000 | floor')
    ios=$(cat "$p"-*.json | jq -s '[.[].jobs[0] | .write.total_ios + .read.total_ios] | add')
    log "ok: fio $1: $passes write+verify passes, $ios I/Os, no error; longest I/O: $FIO_MAX_MS ms"
}

# dmesg_clean MARK WHAT: no I/O error or nbd message since line MARK.
dmesg_clean() {
    local new
    new=$(dmesg | tail -n +"$(($1 + 1))" | grep -Ei 'I/O error|blk_update_request|nbd[0-9]+: ' || true)
    [ -z "$new" ] || fail "$2: the kernel logged: $(echo "$new" | head -n 3 | tr '\n' ' ')"
    log "ok: $2: no I/O error or nbd message in dmesg"
}

# mp_cut IP: nftables drops every packet to and from IP:MP_PORT (one
# path). The rules go into a table made beforehand (nftables' modules load
# at the first use, seconds under emulation); MP_CUT_T is when nft
# returned: the cut was in force by then.
mp_cut() {
    local t_before
    run "nftables: an empty table for the cut" 60 nft -f - <<EOF
table inet rlun_mp {
    chain input {
        type filter hook input priority 0; policy accept;
    }
}
EOF
    t_before=$EPOCHREALTIME
    run "cut path $1:$MP_PORT with nftables" 30 nft -f - <<EOF
add rule inet rlun_mp input ip daddr $1 tcp dport $MP_PORT drop
add rule inet rlun_mp input ip saddr $1 tcp sport $MP_PORT drop
EOF
    MP_CUT_T=$EPOCHREALTIME
    log "cut: nft ran from $t_before to $MP_CUT_T ($(awk -v a="$t_before" -v b="$MP_CUT_T" 'BEGIN { printf "%.1f", b - a }') s)"
}
mp_restore() {
    run "restore the cut path" 30 nft delete table inet rlun_mp
}

# mp_sg_rtpg: what LIO answers to REPORT TARGET PORT GROUPS, through the
# kernel initiator (evidence only; logged out again before rlun starts).
mp_sg_rtpg() {
    if ! command -v iscsiadm >/dev/null || ! command -v sg_rtpg >/dev/null; then
        MP_RTPG="sg_rtpg not run (no iscsiadm or sg3-utils)"
        log "$MP_RTPG"
        return 0
    fi
    need iscsid
    local W=$LAB_WORK sd
    run "iscsiadm: node record $MP_IQN at $PA" 30 iscsiadm -m node -o new -T "$MP_IQN" -p "$PA"
    on_exit "iscsiadm -m node -T '$MP_IQN' -p '$PA' --logout >/dev/null 2>&1; iscsiadm -m node -T '$MP_IQN' -p '$PA' -o delete >/dev/null 2>&1; true"
    run "iscsiadm: login $MP_IQN at $PA" 90 iscsiadm -m node -T "$MP_IQN" -p "$PA" --login
    sd=$(kernel_disk "$MP_IQN" "$MP_PORT" 0) || fail "the kernel initiator's disk of $MP_IQN did not appear"
    capture "sg_rtpg through $PA (/dev/$sd)" 60 "$W/rtpg.txt" sg_rtpg -d "/dev/$sd"
    capture "sg_inq VPD 0x83 through $PA" 60 "$W/vpd83.txt" sg_inq -p 0x83 "/dev/$sd"
    run "iscsiadm: logout" 60 iscsiadm -m node -T "$MP_IQN" -p "$PA" --logout
    run "iscsiadm: delete node" 30 iscsiadm -m node -T "$MP_IQN" -p "$PA" -o delete
    if ! grep -qiE 'target port group id *: *0x1' "$W/rtpg.txt" || ! grep -qiE 'target port group id *: *0x2' "$W/rtpg.txt"; then
        fail "sg_rtpg does not list target port groups 1 and 2 (LIO setup?)"
    fi
    MP_RTPG="sg_rtpg: groups 1 and 2 listed"
}

