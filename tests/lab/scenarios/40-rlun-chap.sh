# about: rlun with CHAP to CHAP-protected LIO targets: right secret reads the data, wrong or missing secret is refused with exit code 4; mutual CHAP both ways
# default: yes
# timeout: 300

# rlun_auth_refused DESC URL [ALSO_OK_CODE]: rlun info must fail with exit
# code 4 (login refused), or ALSO_OK_CODE when given.
rlun_auth_refused() {
    local rc=0 also=${3:-4}
    log "+ $1 (must be refused): rlun info $2"
    timeout -k 5 60 "$RLUN" info "$2" >"$LAB_WORK/refused.out" 2>&1 || rc=$?
    sed 's/^/  | /' "$LAB_WORK/refused.out"
    case $rc in
    4 | "$also") log "ok: $1 refused with exit code $rc: $(tail -n 1 "$LAB_WORK/refused.out")" ;;
    0) fail "$1: rlun logged in although it should have been refused" ;;
    124 | 137) fail "$1: rlun timed out instead of reporting the refused login" ;;
    *) fail "$1: expected exit code 4 (login refused), got $rc: $(tail -n 1 "$LAB_WORK/refused.out")" ;;
    esac
}

scenario() {
    need lio_chap
    local W=$LAB_WORK portal="$LAB_IP_T:$LIO_TCP_PORT"
    local chap="iscsi://$portal/$LIO_CHAP_IQN/0" mutual="iscsi://$portal/$LIO_MUTUAL_IQN/0"

    # One-way CHAP, right secret: log in and read the whole LUN.
    export RLUN_CHAP_USER=$CHAP_USER RLUN_CHAP_SECRET=$CHAP_SECRET
    run "rlun cp with the right CHAP secret" 120 "$RLUN" cp --no-progress "$chap" "$W/chap.img"
    assert_same_data "CHAP LUN read by rlun vs the backing file" "$LAB_DATA/chap.img" "$W/chap.img"

    export RLUN_CHAP_SECRET=wrong-secret-0000
    rlun_auth_refused "wrong CHAP secret" "$chap"
    export RLUN_CHAP_USER=somebody-else RLUN_CHAP_SECRET=$CHAP_SECRET
    rlun_auth_refused "wrong CHAP user" "$chap"
    unset RLUN_CHAP_USER RLUN_CHAP_SECRET
    # LIO answers a lone AuthMethod=None by closing the connection without a
    # Login Response ("Proposer's value list None contains no valid values",
    # iscsi_target_handle_csg_zero), so "connection lost" (3) is right too.
    rlun_auth_refused "no credentials" "$chap" 3

    # Mutual CHAP: rlun also checks the target's answer.
    export RLUN_CHAP_USER=$CHAP_USER RLUN_CHAP_SECRET=$CHAP_SECRET
    export RLUN_CHAP_MUTUAL_USER=$MUTUAL_USER RLUN_CHAP_MUTUAL_SECRET=$MUTUAL_SECRET
    run "rlun cp with mutual CHAP" 120 "$RLUN" cp --no-progress "$mutual" "$W/mutual.img"
    assert_same_data "mutual-CHAP LUN read by rlun vs the backing file" "$LAB_DATA/mutual.img" "$W/mutual.img"
    export RLUN_CHAP_MUTUAL_SECRET=not-the-target-secret
    rlun_auth_refused "target proves the wrong mutual secret" "$mutual"
}
