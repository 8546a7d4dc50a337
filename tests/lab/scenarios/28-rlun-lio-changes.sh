# about: the LIO target changes under rlun mount and rlun serve: a LUN mapped in configfs during reads appears in the mount (LIO's UNIT ATTENTION 3F/0E) with its data, `rlun rescan` shows it to serve's clients, unmapping it removes the file and the export, a fileio backstore grown by 16 MiB shows its new size after `rlun rescan` (in the mount, and to new NBD clients), and the reads running meanwhile never fail
# default: yes
# timeout: 600
#
# LIO (6.1) raises REPORTED LUNS DATA HAS CHANGED on the next command of
# each session when a LUN is mapped or unmapped in a demo-mode TPG, but no
# CAPACITY DATA HAS CHANGED when a fileio backstore grows (its size is
# `fd_dev_size`): that one needs `rlun rescan`, as the kernel initiator needs
# `iscsiadm -m session -R`. LUN numbers 5 and 6 keep clear of the lab's own.

scenario() {
    rlun_has rescan || skip "rlun has no 'rescan' subcommand yet"
    need lio
    modules fuse
    local W=$LAB_WORK mnt=$LAB_WORK/mnt sock=$LAB_WORK/nbd.sock
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_IQN"
    local added=$LAB_DATA/chg-added.img grown=$LAB_DATA/chg-grown.img reader rc

    # LUN 6, 16 MiB, there from the start (grown later).
    random_file "$grown" 16
    lio_fileio chggrow "$grown" 16 512
    lio_lun "$LIO_IQN" 6 chggrow
    mkdir -p "$mnt"
    setsid "$RLUN" -v mount --cache none "$url" "$mnt" </dev/null >"$W/mount.log" 2>&1 &
    local pid=$!
    on_exit "fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt'; sleep 1; kill $pid 2>/dev/null; true"
    on_exit "cp '$W/mount.log' '$LAB_OUT/logs/$LAB_SCENARIO-mount.log' 2>/dev/null; true"
    wait_for "lun0 and lun6 in the mount" 60 test -f "$mnt/lun0" -a -f "$mnt/lun6"
    run "rlun serve --daemon" 60 "$RLUN" serve --daemon --socket "$sock" "$url"
    on_exit "'$RLUN' list --json > '$W/list.json' 2>/dev/null; pkill -f 'rlun serve --daemon --socket $sock'; true"

    # Reads of lun0 all along (uncached: every one goes to LIO, and
    # collects its UNIT ATTENTIONs).
    (
        end=$((SECONDS + 120))
        while [ $SECONDS -lt $end ] && [ ! -e "$W/stop-reader" ]; do
            dd if="$mnt/lun0" of=/dev/null bs=64k iflag=direct status=none || exit 1
        done
        exit 0
    ) &
    reader=$!

    # --- a LUN mapped while reads run
    random_file "$added" 16
    lio_fileio chgadd "$added" 16 512
    lio_lun "$LIO_IQN" 5 chgadd
    wait_for "lun5 appears in the mount" 30 test -f "$mnt/lun5"
    assert_same_data "lun5 in the mount vs its backing file" "$added" "$mnt/lun5"
    capture "rlun rescan (serve)" 60 "$W/rescan-serve.txt" "$RLUN" rescan "$sock"
    grep -q "lun5: added" "$W/rescan-serve.txt" || fail "rescan of serve did not add lun5: $(cat "$W/rescan-serve.txt")"
    capture "nbdinfo --list" 60 "$W/list-added.txt" nbdinfo --list "nbd+unix:///?socket=$sock"
    grep -q 'export="lun5"' "$W/list-added.txt" || fail "serve does not offer lun5"

    # --- the mapping removed while reads run
    run "unmap lun_5" 60 rm -f "$LIO/iscsi/$LIO_IQN/tpgt_1/lun/lun_5/chgadd"
    run "rmdir lun_5" 60 rmdir "$LIO/iscsi/$LIO_IQN/tpgt_1/lun/lun_5"
    wait_for "lun5 leaves the mount" 30 bash -c "! test -e '$mnt/lun5'"
    capture "rlun rescan (serve)" 60 "$W/rescan-serve2.txt" "$RLUN" rescan "$sock"
    grep -q "lun5: removed" "$W/rescan-serve2.txt" || fail "rescan of serve did not remove lun5: $(cat "$W/rescan-serve2.txt")"
    capture "nbdinfo --list" 60 "$W/list-removed.txt" nbdinfo --list "nbd+unix:///?socket=$sock"
    grep -q 'export="lun5"' "$W/list-removed.txt" && fail "serve still offers lun5"

    # --- the backstore of lun6 grown by 16 MiB; LIO says nothing
    head -c $((16 << 20)) /dev/urandom >>"$grown"
    cfs "$LIO/core/fileio_0/chggrow/control" "fd_dev_size=$((32 << 20))"
    capture "rlun rescan (mount)" 60 "$W/rescan-mount.txt" "$RLUN" rescan "$mnt"
    grep -q "lun6: resized from 16.0 MiB to 32.0 MiB" "$W/rescan-mount.txt" ||
        fail "rescan of the mount: $(cat "$W/rescan-mount.txt")"
    assert_eq "lun6 size after rescan" $((32 << 20)) "$(stat -c %s "$mnt/lun6")"
    assert_same_data "grown lun6 vs its backing file" "$grown" "$mnt/lun6"
    capture "rlun rescan (serve)" 60 "$W/rescan-serve3.txt" "$RLUN" rescan "$sock"
    grep -q "lun6: resized from 16.0 MiB to 32.0 MiB" "$W/rescan-serve3.txt" ||
        fail "rescan of serve: $(cat "$W/rescan-serve3.txt")"
    capture "nbdinfo --size lun6" 60 "$W/size6.txt" nbdinfo --size "nbd+unix:///lun6?socket=$sock"
    assert_eq "lun6 size a new NBD client is told" $((32 << 20)) "$(tr -d '[:space:]' <"$W/size6.txt")"

    touch "$W/stop-reader"
    rc=0
    wait "$reader" || rc=$?
    assert_eq "reads of lun0 during the changes" 0 "$rc"
    note "lun5 mapped/unmapped under reads (mount by UA, serve by rescan), lun6 grown 16->32 MiB by rescan"
}
