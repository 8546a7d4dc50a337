# about: the rlun-mount@ unit's ExecStart with stderr on a journald stream and JOURNAL_STREAM set, as systemd runs a service: rlun's entries are native journal entries (none through the stream) carrying RLUN_TARGET and RLUN_PORTAL, RLUN_LUN on a LUN's event (capacity change after the unit's ExecReload), PRIORITY 4 for a warning (connection lost when the TPG is disabled) and 3 for an error (a second instance that cannot log in)
# default: yes
# timeout: 400
#
# No systemd in the VM (virtme-ng runs this script as init's child): the
# real systemd-journald is started by hand, and systemd-cat gives rlun the
# stream a unit's StandardError=journal gives it; JOURNAL_STREAM is set to
# that stream's dev:ino as systemd does (systemd.exec(5)). The unit's lines
# are read from packaging/systemd/rlun-mount@.service. Its own LIO target
# (…:journal, portal port 3263) so that disabling the TPG disturbs no other
# scenario.

JOURNAL_PORT=3263

scenario() {
    rlun_has mount || skip "rlun has no 'mount' subcommand"
    "$RLUN" --help | grep -q 'journal' || skip "rlun has no --log-format journal"
    local journald=/lib/systemd/systemd-journald
    [ -x "$journald" ] || skip "no $journald (package systemd)"
    command -v journalctl >/dev/null || skip "no journalctl"
    command -v systemd-cat >/dev/null || skip "no systemd-cat"
    need lio
    modules fuse
    local W=$LAB_WORK repo unit iqn="$LIO_IQN:journal" bad_iqn="$LIO_IQN:nosuch"
    local backing=$LAB_DATA/journal.img tpg portal="$LAB_IP_T:$JOURNAL_PORT"
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
    unit=$repo/packaging/systemd/rlun-mount@.service
    [ -r "$unit" ] || skip "no $unit"
    tpg=$LIO/iscsi/$iqn/tpgt_1

    # --- journald, alone
    if [ ! -S /run/systemd/journal/socket ]; then
        [ -s /etc/machine-id ] || systemd-machine-id-setup >/dev/null 2>&1 || true
        mkdir -p /run/systemd/journal /run/log/journal
        "$journald" </dev/null >"$W/journald.log" 2>&1 &
        local jpid=$!
        on_exit "kill $jpid 2>/dev/null; true"
        wait_for "journald's socket" 60 test -S /run/systemd/journal/socket
        wait_for "journald's stream socket" 60 test -S /run/systemd/journal/stdout
    fi

    # --- the target
    random_file "$backing" 16
    lio_fileio journal "$backing" 16 512
    lio_target "$iqn"
    lio_lun "$iqn" 0 journal
    lio_portal "$iqn" "$JOURNAL_PORT"
    lio_enable "$iqn"
    on_exit "echo 0 > '$tpg/enable'; rm -f '$tpg/lun/lun_0/journal'; rmdir '$tpg/lun/lun_0' '$tpg/np/$portal' '$tpg' '$LIO/iscsi/$iqn' '$LIO/core/fileio_0/journal'; true"

    {
        printf '[targets.jtest]\nurl = "iscsi://%s/%s"\n' "$portal" "$iqn"
        printf '[targets.jbad]\nurl = "iscsi://%s:1/%s"\n' "$LAB_IP_T" "$bad_iqn"
    } >"$W/rlun.toml"
    chmod 600 "$W/rlun.toml"

    # --- the unit's commands, %i = jtest
    local start reload pre
    pre=$(sed -n 's/^ExecStartPre=//p' "$unit" | sed 's/%i/jtest/g')
    start=$(sed -n 's/^ExecStart=//p' "$unit" | sed 's/%i/jtest/g; s|^/usr/bin/rlun|'"$RLUN"'|')
    reload=$(sed -n 's/^ExecReload=//p' "$unit")
    [ -n "$start" ] && [ -n "$reload" ] || fail "no ExecStart=/ExecReload= in $unit"
    log "ExecStartPre: $pre"
    log "ExecStart: $start"
    log "ExecReload: $reload"
    run "ExecStartPre" 30 $pre
    local mnt=/run/rlun/mount/jtest
    # What systemd does for StandardError=journal: stdout and stderr on a
    # stream connected to journald, JOURNAL_STREAM=dev:ino of it.
    # RUST_LOG=rlun=info as `systemctl edit` would set it (Environment=),
    # for the capacity change, an info event.
    cat >"$W/as-unit.sh" <<'EOF'
#!/bin/bash
JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2)
export JOURNAL_STREAM
echo "$$ $JOURNAL_STREAM" >"$PIDFILE"
exec "$@"
EOF
    chmod 755 "$W/as-unit.sh"
    local -a cmd
    read -r -a cmd <<<"$start"
    setsid env PIDFILE="$W/jtest.pid" RLUN_CONFIG="$W/rlun.toml" RUST_LOG=rlun=info \
        systemd-cat -t rlun-mount@jtest "$W/as-unit.sh" "${cmd[@]}" </dev/null &
    on_exit "fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt' 2>/dev/null; sleep 1; [ -s '$W/jtest.pid' ] && kill \$(cut -d' ' -f1 '$W/jtest.pid') 2>/dev/null; true"
    wait_for "lun0 in the unit's mount" 90 test -f "$mnt/lun0"
    local pid
    pid=$(cut -d' ' -f1 "$W/jtest.pid")
    log "rlun pid $pid, JOURNAL_STREAM=$(cut -d' ' -f2 "$W/jtest.pid")"
    assert_same_data "lun0 in the unit's mount vs the backing file" "$backing" "$mnt/lun0"

    # --- a LUN's event: the backstore grown, the unit's ExecReload
    head -c $((16 << 20)) /dev/urandom >>"$backing"
    cfs "$LIO/core/fileio_0/journal/control" "fd_dev_size=$((32 << 20))"
    run "ExecReload" 30 bash -c "MAINPID=$pid; $reload"
    wait_for "lun0 grows to 32 MiB" 60 bash -c "[ \$(stat -c %s '$mnt/lun0') = $((32 << 20)) ]"

    # --- a warning: the TPG disabled (LIO drops the session), a read
    # waits for the reconnect, the TPG enabled again
    cfs "$tpg/enable" 0
    dd if="$mnt/lun0" of=/dev/null bs=64k count=16 iflag=direct status=none &
    local reader=$!
    sleep 3
    cfs "$tpg/enable" 1
    local rc=0
    timeout 60 tail --pid="$reader" -f /dev/null || rc=$?
    wait "$reader" || rc=$?
    assert_eq "read across the TPG outage" 0 "$rc"

    # --- an error: a second instance of the unit that cannot log in
    local bad
    bad=$(sed -n 's/^ExecStart=//p' "$unit" | sed 's/%i/jbad/g; s|^/usr/bin/rlun|'"$RLUN"'|')
    mkdir -p /run/rlun/mount/jbad
    read -r -a cmd <<<"$bad"
    rc=0
    timeout 120 env PIDFILE="$W/jbad.pid" RLUN_CONFIG="$W/rlun.toml" \
        systemd-cat -t rlun-mount@jbad "$W/as-unit.sh" "${cmd[@]}" </dev/null || rc=$?
    log "jbad exited with $rc"
    [ "$rc" -ne 0 ] || fail "the jbad instance (nothing listens on port 1) exited 0"
    local badpid
    badpid=$(cut -d' ' -f1 "$W/jbad.pid")

    # --- stop jtest as systemd does (SIGTERM), then read the journal
    run "SIGTERM" 10 kill -TERM "$pid"
    timeout 120 tail --pid="$pid" -f /dev/null || fail "rlun did not exit within 120 s of SIGTERM"
    journalctl --sync 2>/dev/null || true
    sleep 1
    local J=$W/jtest.json B=$W/jbad.json
    run "journal of jtest" 60 bash -c "journalctl -o json --no-pager _PID=$pid > '$J'"
    run "journal of jbad" 60 bash -c "journalctl -o json --no-pager _PID=$badpid > '$B'"
    cp "$J" "$B" "$LAB_OUT/logs/" 2>/dev/null || true
    journalctl -o short-monotonic --no-pager "_PID=$pid" "_PID=$badpid" | sed 's/^/  | /'

    local n
    n=$(jq -s 'length' "$J")
    [ "$n" -gt 0 ] || fail "no journal entries of rlun (pid $pid)"
    # Everything native: a line through the stream would mean rlun did not
    # see that stderr is the journal (or wrote text anyway).
    assert_eq "jtest entries written to the stream instead of natively" 0 \
        "$(jq -s '[.[] | select(._TRANSPORT != "journal")] | length' "$J")"
    assert_eq "jtest entries without RLUN_TARGET=$iqn" 0 \
        "$(jq -s --arg t "$iqn" '[.[] | select(.RLUN_TARGET != $t)] | length' "$J")"
    assert_eq "jtest entries without RLUN_PORTAL=$portal" 0 \
        "$(jq -s --arg p "$portal" '[.[] | select(.RLUN_PORTAL != $p)] | length' "$J")"
    assert_eq "SYSLOG_IDENTIFIER of jtest's entries" rlun \
        "$(jq -rs '[.[].SYSLOG_IDENTIFIER] | unique | join(",")' "$J")"
    # The LUN's event: the capacity change, info (5), RLUN_LUN=0.
    assert_eq "capacity change entries with RLUN_LUN=0 and PRIORITY 5" 1 \
        "$(jq -s '[.[] | select((.MESSAGE | tostring | test("LUN capacity changed")) and .RLUN_LUN == "0" and .PRIORITY == "5")] | length' "$J")"
    jq -s '.[] | select(.MESSAGE | tostring | test("LUN capacity changed")) | {MESSAGE, PRIORITY, RLUN_LUN, RLUN_OLD_SIZE, RLUN_NEW_SIZE, RLUN_TARGET, RLUN_PORTAL}' "$J"
    # The warning: the connection lost, PRIORITY 4.
    local warn
    warn=$(jq -s '[.[] | select((.MESSAGE | tostring | test("connection lost")) and .PRIORITY == "4")] | length' "$J")
    [ "$warn" -ge 1 ] || fail "no 'connection lost' entry of PRIORITY 4: $(jq -c '{MESSAGE, PRIORITY}' "$J" | head -n 20)"
    log "ok: $warn 'connection lost' entries of PRIORITY 4"
    jq -s '[.[] | select(.PRIORITY == "4")][0] | {MESSAGE, PRIORITY, RLUN_ERROR, RLUN_TARGET, RLUN_PORTAL}' "$J"
    # The error: jbad's last word, PRIORITY 3, with its target and portal.
    assert_eq "jbad entries written to the stream instead of natively" 0 \
        "$(jq -s '[.[] | select(._TRANSPORT != "journal")] | length' "$B")"
    assert_eq "jbad error entries (PRIORITY 3) with its RLUN_TARGET and RLUN_PORTAL" 1 \
        "$(jq -s --arg t "$bad_iqn" --arg p "$LAB_IP_T:1" '[.[] | select(.PRIORITY == "3" and .RLUN_TARGET == $t and .RLUN_PORTAL == $p)] | length' "$B")"
    jq -s '.[] | select(.PRIORITY == "3") | {MESSAGE, PRIORITY, RLUN_TARGET, RLUN_PORTAL}' "$B"
}
