# about: rlun over iSER (soft-RoCE) to LIO and to tgtd: RDMA CM connect, login as Sends, SendTargets discovery; a port with no iSER listener, an address no RDMA device reaches and a too small RLIMIT_MEMLOCK fail with exit code 3, a target refusing RDMAExtensions with exit code 4, each saying why
# default: yes
# timeout: 240

# rlun_iser_refused DESC EXPECTED_TEXT URL: rlun discover must fail with exit
# code 3 (portal unreachable) and a message containing EXPECTED_TEXT.
rlun_iser_refused() {
    local rc=0
    log "+ $1 (must fail): rlun discover $3"
    timeout -k 5 60 "$RLUN" discover --connect-timeout 10 "$3" >"$LAB_WORK/refused.out" 2>&1 || rc=$?
    sed 's/^/  | /' "$LAB_WORK/refused.out"
    case $rc in
    3) grep -qi -- "$2" "$LAB_WORK/refused.out" ||
        fail "$1: exit code 3 but the message does not say '$2': $(tail -n 1 "$LAB_WORK/refused.out")"
       log "ok: $1: exit code 3: $(tail -n 1 "$LAB_WORK/refused.out")" ;;
    0) fail "$1: rlun discover succeeded although nothing should answer" ;;
    124 | 137) fail "$1: rlun timed out instead of failing" ;;
    *) fail "$1: expected exit code 3, got $rc: $(tail -n 1 "$LAB_WORK/refused.out")" ;;
    esac
}

scenario() {
    local W=$LAB_WORK rc=0
    need lio_iser
    timeout -k 5 60 "$RLUN" discover "iser://$LAB_IP_T:$LIO_ISER_PORT" >"$W/probe.out" 2>"$W/probe.err" || rc=$?
    if [ "$rc" -ne 0 ] && grep -qi 'not available yet' "$W/probe.err"; then
        skip "rlun has no iSER yet: $(head -n 1 "$W/probe.err")"
    fi
    capture "rlun discover over iSER" 60 "$W/targets.txt" "$RLUN" -v discover "iser://$LAB_IP_T:$LIO_ISER_PORT"
    grep -q "^$LIO_IQN " "$W/targets.txt" || fail "discovery over iSER does not list $LIO_IQN: $(tr '\n' ' ' <"$W/targets.txt")"
    log "ok: $LIO_IQN listed by discovery over iSER"
    # The same answer as discovery over TCP on the plain portal.
    capture "rlun discover over TCP" 60 "$W/targets-tcp.txt" "$RLUN" discover "iscsi://$LAB_IP_T:$LIO_TCP_PORT"
    assert_eq "targets over iSER vs over TCP" "$(cut -d' ' -f1 "$W/targets-tcp.txt" | sort | tr '\n' ' ')" "$(cut -d' ' -f1 "$W/targets.txt" | sort | tr '\n' ' ')"

    rlun_iser_refused "no iSER listener on the port (RDMA CM rejects)" "rejected" "iser://$LAB_IP_T:3999"
    rlun_iser_refused "an address no RDMA device reaches" "RDMA" "iser://192.0.2.1:3260"

    # Pinned memory over the limit: an unprivileged rlun with a 64 KiB
    # RLIMIT_MEMLOCK (soft and hard) cannot register its buffers.
    # (udev's 0666 for the RDMA device nodes, which the VM's devtmpfs lacks.)
    run "let unprivileged users open the RDMA devices" 10 chmod a+rw /dev/infiniband/uverbs0 /dev/infiniband/uverbs1 /dev/infiniband/rdma_cm
    rc=0
    log "+ rlun discover as nobody with ulimit -l 64 (must fail)"
    timeout -k 5 60 bash -c "ulimit -l 64 && exec setpriv --reuid=65534 --regid=65534 --clear-groups \
        '$RLUN' discover 'iser://$LAB_IP_T:$LIO_ISER_PORT'" >"$W/memlock.out" 2>&1 || rc=$?
    sed 's/^/  | /' "$W/memlock.out"
    [ "$rc" -eq 3 ] || fail "expected exit code 3 with RLIMIT_MEMLOCK 64 KiB, got $rc: $(tail -n 1 "$W/memlock.out")"
    grep -q "ulimit -l" "$W/memlock.out" || fail "the memlock failure does not say what to raise: $(tail -n 1 "$W/memlock.out")"
    log "ok: RLIMIT_MEMLOCK too small: $(tail -n 1 "$W/memlock.out")"

    # A second iSER target: tgtd (it lists only targets whose ACL names us).
    if ! (need tgtd_iser); then
        fail "tgtd iSER could not start: $(cat "$LAB_REASON")"
    fi
    capture "rlun discover over iSER (tgtd)" 60 "$W/targets-tgt.txt" \
        "$RLUN" discover --initiator-name "$RLUN_LAB_IQN" "iser://$LAB_IP_T:$TGT_ISER_PORT"
    grep -q "^$TGT_ISER_IQN " "$W/targets-tgt.txt" ||
        fail "discovery over iSER at tgtd does not list $TGT_ISER_IQN: $(tr '\n' ' ' <"$W/targets-tgt.txt")"
    log "ok: $TGT_ISER_IQN listed by discovery over iSER at tgtd"

    # A target that refuses iSER: tgtd's iSER target with RDMAExtensions=No
    # answers RDMAExtensions=No at login; rlun stops with "login refused"
    # (exit code 4) and says why.
    local t=(tgtadm -C "$TGT_CONTROL_PORT" --lld iser)
    run "tgtd: RDMAExtensions=No on the iSER target" 10 "${t[@]}" --op update --mode target --tid 2 \
        --name RDMAExtensions --value No
    on_exit "${t[*]} --op update --mode target --tid 2 --name RDMAExtensions --value Yes; true"
    rc=0
    log "+ rlun info at a target that refuses RDMAExtensions (must fail)"
    timeout -k 5 60 "$RLUN" info --initiator-name "$RLUN_LAB_IQN" \
        "iser://$LAB_IP_T:$TGT_ISER_PORT/$TGT_ISER_IQN/1" >"$W/nordma.out" 2>&1 || rc=$?
    sed 's/^/  | /' "$W/nordma.out"
    [ "$rc" -eq 4 ] || fail "expected exit code 4 (login refused) from a target refusing RDMAExtensions, got $rc: $(tail -n 1 "$W/nordma.out")"
    grep -q "refused RDMAExtensions" "$W/nordma.out" ||
        fail "the refusal does not name RDMAExtensions: $(tail -n 1 "$W/nordma.out")"
    log "ok: target refusing RDMAExtensions: exit code 4: $(tail -n 1 "$W/nordma.out")"
    run "tgtd: RDMAExtensions=Yes again" 10 "${t[@]}" --op update --mode target --tid 2 \
        --name RDMAExtensions --value Yes
}
