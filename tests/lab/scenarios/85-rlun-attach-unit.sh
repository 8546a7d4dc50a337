# about: the rlun-attach@ unit's commands as systemd runs them: its ExecStart under a test NOTIFY_SOCKET sends READY=1 only once /dev/nbdN has a size and reads; a buffered write to the held-open device is on LIO's backing file after the unit's ExecStop; SIGTERM: STOPPING=1, exit 0
# default: yes
# timeout: 300
#
# No systemd in the VM: tests/packaging/notify.py plays its part (a datagram
# NOTIFY_SOCKET, ExecStop with $MAINPID, then SIGTERM). The unit's lines are
# read from packaging/systemd/rlun-attach@.service, %i = lab, and the target
# named lab comes from a config file given by RLUN_CONFIG (the unit reads
# /etc/rlun/rlun.toml).

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    need lio
    need nbd
    local W=$LAB_WORK repo unit backing=$LAB_DATA/lun512.img
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
    unit=$repo/packaging/systemd/rlun-attach@.service
    [ -r "$unit" ] || skip "no $unit"
    printf '[targets.lab]\nurl = "iscsi://%s:%s/%s/0"\n' "$LAB_IP_T" "$LIO_TCP_PORT" "$LIO_IQN" >"$W/rlun.toml"
    chmod 600 "$W/rlun.toml"
    local start stop
    start=$(sed -n 's/^ExecStart=//p' "$unit" | sed 's/%i/lab/g; s|^/usr/bin/rlun|'"$RLUN"'|')
    stop=$(sed -n 's/^ExecStop=//p' "$unit")
    [ -n "$start" ] && [ -n "$stop" ] || fail "no ExecStart=/ExecStop= in $unit"
    log "ExecStart: $start"
    log "ExecStop:  $stop"
    # systemd's expansion of ExecStop: the "-" prefix dropped, $$ a dollar,
    # ${MAINPID} the main pid (here from the environment notify.py gives
    # the script); the installed /usr/bin/rlun is $RLUN here.
    stop=${stop#-}
    stop=${stop//'$$'/'$'}
    stop=${stop//'${MAINPID}'/'$MAINPID'}
    stop=${stop//\/usr\/bin\/rlun/$RLUN}
    random_file "$W/pattern.bin" 1
    # What runs before SIGTERM: a buffered write of 1 MiB at 8 MiB through
    # a descriptor the script keeps open, as a running application would
    # (the kernel writes a block device's page cache back when its last
    # descriptor closes, which also wakes udev's close-after-write rescan,
    # so a dd that opens and closes the device itself would leave nothing
    # dirty), then the unit's ExecStop, after which the data must be on
    # LIO's backing file already.
    {
        echo '#!/bin/bash'
        echo 'set -e'
        echo 'exec {holder}<>"$DEV"'
        printf 'dd if=%q bs=1M seek=8 conv=notrunc status=none >&$holder\n' "$W/pattern.bin"
        printf 'on_target() { dd if=%q bs=1M skip=8 count=1 status=none | cmp -s %q -; }\n' "$backing" "$W/pattern.bin"
        echo "grep -E '^(Dirty|Writeback):' /proc/meminfo"
        echo 'if on_target; then echo "before ExecStop: already on the target"; else echo "before ExecStop: not on the target yet"; fi'
        printf 'stop=%q\n' "$stop"
        echo 'echo "ExecStop: $stop"'
        echo 'eval "$stop"'
        echo 'on_target || { echo "after ExecStop: the write is not on the target"; exit 1; }'
        echo 'echo "after ExecStop: on the target"'
    } >"$W/before-stop.sh"
    chmod 755 "$W/before-stop.sh"
    local -a cmd
    read -r -a cmd <<<"$start"
    run "attach unit command under NOTIFY_SOCKET, ExecStop, SIGTERM" 240 \
        env RLUN_CONFIG="$W/rlun.toml" python3 "$repo/tests/packaging/notify.py" device "$W/before-stop.sh" -- "${cmd[@]}"
    run "read 1 MiB at 8 MiB of the backing file" 30 \
        dd if="$backing" of="$W/back.bin" bs=1M skip=8 count=1 status=none
    assert_same_data "the buffered write, after the unit's stop, on LIO's backing file" "$W/pattern.bin" "$W/back.bin"
}
