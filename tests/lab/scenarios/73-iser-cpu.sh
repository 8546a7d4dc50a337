# about: measuring aid for iSER throughput: where the guest's CPU goes during 128 KiB sequential reads at QD 32 over iSER, per initiator (rlun bench, libiscsi iscsi-perf, fio on ib_iser): per-vCPU user/system/softirq, softirqs, the busiest threads, packets per read, rxe counters and the commands outstanding at LIO; writes iser-cpu.txt
# default: no
# timeout: 2400
#
# Not a pass/fail gate on speed: it fails only when an initiator cannot run.
# Each initiator runs alone; once read data flows, guest_cpu.py snapshots
# the guest, waits LAB_CPU_WINDOW seconds (default 8) and snapshots again
# (see guest_cpu.py). The target and both soft-RoCE devices live in this
# same VM, so the guest's CPU is the whole path, target included.
#
# Each initiator logs in under its own name, which has an explicit node ACL
# on the bench target, so LIO's ACL `info` shows its session's CmdSN window
# and what is left of it: the commands outstanding at the target.
#
# Variables (--set):
#   LAB_CPU_WHO      contenders, in order (default "rlun libiscsi kernel");
#                    NAME@N pins the initiator to vCPU N (taskset), e.g.
#                    "rlun@0 rlun@1"; "base" is LAB_PROFILE_BASE's rlun;
#                    "rlun2" and "libiscsi2" are two processes at QD 16
#                    each (two sessions, so two queue pairs), side by side
#   LAB_CPU_ROUNDS   rounds of the whole list (default 1)
#   LAB_CPU_WINDOW   seconds measured per run (default 8)
#   LAB_CPU_BS       block size (default 128k; 4k makes the reads random)
#   LAB_CPU_MTU      set the veth pair's MTU first (soft-RoCE's path MTU
#                    follows it: 1500 gives 1024-byte RDMA packets, 4200
#                    and above 4096-byte ones)
#   LAB_CPU_PERF=1   also one run per contender under `perf record -a`
#                    (slow under emulation: top symbols only; not yet seen
#                    to finish within its timeout)

GUEST_CPU_PY=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/guest_cpu.py

scenario() {
    need lio_bench
    need lio_iser
    need iscsid
    modules ib_iser
    local W=$LAB_WORK/cpu out=$LAB_OUT/iser-cpu
    local window=${LAB_CPU_WINDOW:-8} rounds=${LAB_CPU_ROUNDS:-1} bs=${LAB_CPU_BS:-128k}
    local dur=$((window + 10)) limit=$((window * 4 + 180))
    mkdir -p "$W" "$out"
    local tpg=$LIO/iscsi/$LIO_BENCH_IQN/tpgt_1
    local np=$tpg/np/$LAB_IP_T:$LIO_ISER_PORT
    if [ ! -d "$np" ]; then
        run "bench target: iSER portal" 10 mkdir -p "$np"
        cfs "$np/iser" 1
    fi
    if [ -n "${LAB_CPU_MTU:-}" ]; then
        run "veth MTU $LAB_CPU_MTU" 10 ip link set v0 mtu "$LAB_CPU_MTU"
        run "veth MTU $LAB_CPU_MTU" 10 ip link set v1 mtu "$LAB_CPU_MTU"
        sleep 1
    fi
    local -A name=(
        [rlun]=iqn.2026-11.org.rlun.lab:rlun-cpu
        [libiscsi]=iqn.2026-11.org.rlun.lab:libiscsi-cpu
        [kernel]=$(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi 2>/dev/null)
    )
    [ -n "${name[kernel]}" ] || name[kernel]=iqn.2026-11.org.rlun.lab:kernel
    local who
    for who in rlun libiscsi kernel; do
        local acl=$tpg/acls/${name[$who]}
        if [ ! -d "$acl" ]; then
            run "ACL ${name[$who]}" 10 mkdir -p "$acl/lun_0"
            run "ACL ${name[$who]} lun_0" 10 ln -s "$tpg/lun/lun_0" "$acl/lun_0/map"
        fi
    done
    {
        echo "veth: $(ip -o link show v0 | grep -o 'mtu [0-9]*'), v1 $(ip -o link show v1 | grep -o 'mtu [0-9]*')"
        for d in rxe0 rxe1; do
            echo "$d: $(ibv_devinfo -d "$d" -v 2>/dev/null | grep -E 'max_mtu|active_mtu|max_sge|max_qp_wr' | tr -s ' \t' ' ' | tr '\n' ';')"
        done
        echo "LIO default_cmdsn_depth $(<"$tpg/attrib/default_cmdsn_depth"); ACL cmdsn_depth: rlun $(<"$tpg/acls/${name[rlun]}/cmdsn_depth"), libiscsi $(<"$tpg/acls/${name[libiscsi]}/cmdsn_depth"), kernel $(<"$tpg/acls/${name[kernel]}/cmdsn_depth")"
        echo "guest CPUs: $(nproc); HZ $(getconf CLK_TCK)"
    } >"$out/setup.txt"
    cat "$out/setup.txt"

    local bsn pat rw blocks
    case $bs in
    128k) pat=read rw=read blocks=256 ;;
    4k) pat=randread rw=randread blocks=8 ;;
    *) fail "LAB_CPU_BS: 128k or 4k" ;;
    esac
    bsn=$(($(numfmt --from=iec "${bs^^}")))

    local iser="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_BENCH_IQN/0" dev=
    local wholist=${LAB_CPU_WHO:-rlun libiscsi kernel}
    case " $wholist " in
    *" kernel"*)
        kernel_login "$LIO_BENCH_IQN" "$LIO_ISER_PORT" iser
        dev=$(kernel_disk "$LIO_BENCH_IQN" "$LIO_ISER_PORT" 0) || fail "no kernel ib_iser disk for the bench LUN"
        ;;
    esac
    local base=
    if [ -n "${LAB_PROFILE_BASE:-}" ]; then
        [ -x "$LAB_PROFILE_BASE" ] || fail "LAB_PROFILE_BASE=$LAB_PROFILE_BASE is not an executable"
        base=$W/rlun-base
        cp "$LAB_PROFILE_BASE" "$base"
    fi

    local r w kind cpu pin cmd perf files=()
    for r in $(seq 1 "$rounds"); do
        for perf in "" ${LAB_CPU_PERF:+perf}; do
            for w in $wholist; do
                kind=${w%@*} cpu=
                [ "$kind" = "$w" ] || cpu=${w#*@}
                pin=()
                [ -z "$cpu" ] || pin=(taskset -c "$cpu")
                case $kind in
                rlun2)
                    cmd=(bash -c "for i in 1 2; do RLUN_INITIATOR_NAME='${name[rlun]}' ${pin[*]} '$RLUN' bench '$iser' --pattern $pat --bs $bs --qd 16 --duration ${dur}s --json & done; wait")
                    kind=rlun
                    ;;
                libiscsi2)
                    local flag2=
                    [ "$pat" = read ] || flag2=-r
                    cmd=(bash -c "for i in 1 2; do ${pin[*]} iscsi-perf -i '${name[libiscsi]}' -m 16 -b $blocks -t $dur $flag2 '$iser' & done; wait")
                    kind=libiscsi
                    ;;
                rlun | base)
                    local bin=$RLUN
                    if [ "$kind" = base ]; then
                        [ -n "$base" ] || fail "contender base needs LAB_PROFILE_BASE"
                        bin=$base
                    fi
                    cmd=(env RLUN_INITIATOR_NAME="${name[rlun]}" "${pin[@]}" "$bin" bench "$iser"
                        --pattern "$pat" --bs "$bs" --qd 32 --duration "${dur}s" --json)
                    kind=rlun
                    ;;
                libiscsi)
                    local flag=()
                    [ "$pat" = read ] || flag=(-r)
                    cmd=("${pin[@]}" iscsi-perf -i "${name[libiscsi]}" -m 32 -b "$blocks" -t "$dur" "${flag[@]}" "$iser")
                    ;;
                kernel)
                    [ -n "$dev" ] || fail "contender kernel: no ib_iser disk"
                    cmd=("${pin[@]}" fio --name=cpu --filename="/dev/$dev" --rw="$rw" --bs="$bs" --iodepth=32
                        --ioengine=libaio --direct=1 --runtime="$dur" --time_based --output-format=json)
                    ;;
                *) fail "LAB_CPU_WHO: unknown contender $w" ;;
                esac
                local f=$out/r$r-$w-$bs${perf:+-perf}
                f=${f//@/-cpu}
                local extra=()
                local lim=$limit
                [ -z "$perf" ] || extra=(--perf "$W/$(basename "$f").data") lim=$((limit * 3))
                log "+ r$r $w $bs${perf:+ (perf record)}: ${cmd[*]}"
                timeout -k 5 "$lim" python3 "$GUEST_CPU_PY" measure "$f.json" "$window" --bs "$bsn" \
                    --acl "$tpg/acls/${name[$kind]}/info" "${extra[@]}" -- "${cmd[@]}" ||
                    fail "$w $bs: no measurement (see $f.json)"
                if [ -n "$perf" ]; then
                    try 900 perf report -i "$W/$(basename "$f").data" --stdio --no-children \
                        --sort sym --output "$W/$(basename "$f").report" &&
                        grep -v '^#' "$W/$(basename "$f").report" | grep -v '^$' | head -n 25 >"$f.perf.txt"
                fi
                files+=("$f.json")
            done
        done
    done
    python3 "$GUEST_CPU_PY" report "$LAB_OUT/iser-cpu.txt" "${files[@]}" ||
        fail "could not read the measurements"
    note "guest CPU during iSER reads: see iser-cpu.txt"
}
