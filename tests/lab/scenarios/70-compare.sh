# about: comparison mode: the same fio job on rlun's FUSE file and on the kernel initiator's /dev/sdX (open-iscsi), same LIO LUN, same VM run; also rlun bench; and over iSER: rlun bench (iSER and TCP), libiscsi iscsi-perf over iSER, fio on the kernel's ib_iser disk, with CPU s/GiB; prints ratios
# default: no
# timeout: 1200
#
# The same fio job (libaio, direct=1, QD 32) runs on the file `rlun mount`
# shows for the LUN and on the kernel initiator's disk; `rlun bench` (rlun's
# own I/O loop, no FUSE) is reported beside them. Software emulation: read
# ratios only.

scenario() {
    need lio_bench
    need iscsid
    local W=$LAB_WORK secs=${LAB_COMPARE_SECONDS:-10} dev
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_BENCH_IQN/0" limit=$((secs * 3 + 120))
    # Each case: name rlun-pattern bs fio-rw
    local cases=("randread4k randread 4k randread" "read128k read 128k read") c name pat bs rw

    # iSER rows first (their own block and table: compare_iser below).
    compare_iser "$secs" "$limit"
    # --set LAB_COMPARE_ISER_ONLY=1: the iSER block alone (a quicker run
    # when only the iSER path changed).
    if [ -n "${LAB_COMPARE_ISER_ONLY:-}" ]; then
        note "iSER comparison only (LAB_COMPARE_ISER_ONLY): see compare-iser.json"
        return 0
    fi

    # rlun first, while no kernel session exists.
    for c in "${cases[@]}"; do
        read -r name pat bs rw <<<"$c"
        capture "rlun bench $pat $bs qd32" "$limit" "$W/rlun-$name.json" \
            "$RLUN" bench "$url" --pattern "$pat" --bs "$bs" --qd 32 --duration "${secs}s" --json
    done

    # The same fio job on rlun's FUSE file.
    modules fuse
    local mnt=$W/mnt file pid
    mkdir -p "$mnt"
    setsid "$RLUN" mount "$url" "$mnt" </dev/null >"$W/mount.log" 2>&1 &
    pid=$!
    on_exit "fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt'; sleep 1; kill $pid 2>/dev/null; true"
    wait_for "the LUN file appears in the rlun mount" 60 \
        bash -c "find '$mnt' -maxdepth 1 -type f | grep -q ."
    file=$(find "$mnt" -maxdepth 1 -type f | head -n 1)
    for c in "${cases[@]}"; do
        read -r name pat bs rw <<<"$c"
        capture "fio $rw $bs qd32 on the rlun file" "$limit" "$W/fio-rlun-$name.json" \
            fio --name="$name" --filename="$file" --rw="$rw" --bs="$bs" --iodepth=32 \
            --ioengine=libaio --direct=1 --runtime="$secs" --time_based --output-format=json
    done
    run "unmount rlun" 60 fusermount3 -u "$mnt"

    kernel_login "$LIO_BENCH_IQN" "$LIO_TCP_PORT" default
    dev=$(kernel_disk "$LIO_BENCH_IQN" "$LIO_TCP_PORT" 0) || fail "no kernel disk for the bench LUN"
    for c in "${cases[@]}"; do
        read -r name pat bs rw <<<"$c"
        capture "fio $rw $bs qd32 on /dev/$dev" "$limit" "$W/fio-$name.json" \
            fio --name="$name" --filename="/dev/$dev" --rw="$rw" --bs="$bs" --iodepth=32 \
            --ioengine=libaio --direct=1 --runtime="$secs" --time_based --output-format=json
    done

    python3 - "$W" "$LAB_OUT/compare.json" "$secs" "${LAB_RLUN_SOURCE:-$RLUN}" <<'PY' || fail "could not read the benchmark results"
import json, sys
work, out, secs, rlun = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = []
for name, label in (("randread4k", "randread 4k qd32"), ("read128k", "read 128k qd32")):
    r = json.load(open(f"{work}/rlun-{name}.json"))
    f = json.load(open(f"{work}/fio-{name}.json"))["jobs"][0]["read"]
    m = json.load(open(f"{work}/fio-rlun-{name}.json"))["jobs"][0]["read"]
    k_iops, k_mbs = f["iops"], f["bw_bytes"] / 1e6
    rows.append({
        "case": label,
        "fio_rlun_iops": m["iops"], "fio_rlun_mb_s": m["bw_bytes"] / 1e6,
        "kernel_iops": k_iops, "kernel_mb_s": k_mbs,
        "ratio": (m["iops"] / k_iops) if k_iops else None,
        "rlun_bench_iops": r["iops"], "rlun_bench_mb_s": r["mb_per_s"],
        "rlun_bench_ratio": (r["iops"] / k_iops) if k_iops else None,
    })
doc = {
    "what": "the same fio job (libaio, direct=1, QD 32) on rlun's FUSE file and on the "
            "kernel initiator's /dev/sdX, same LIO LUN, same VM run; rlun bench beside them",
    "seconds_per_run": secs,
    "rlun": rlun,
    "note": "software emulation (no KVM): compare ratios only, never absolute figures",
    "rows": rows,
}
json.dump(doc, open(out, "w"), indent=1)
for row in rows:
    print(f"{row['case']}: fio on rlun {row['fio_rlun_iops']:.0f} IOPS {row['fio_rlun_mb_s']:.1f} MB/s, "
          f"fio on kernel {row['kernel_iops']:.0f} IOPS {row['kernel_mb_s']:.1f} MB/s, "
          f"ratio rlun/kernel {row['ratio']:.2f}; rlun bench {row['rlun_bench_iops']:.0f} IOPS "
          f"(ratio {row['rlun_bench_ratio']:.2f})")
PY
    # /dev/nbdN attached by rlun vs the kernel initiator's disk (own block).
    compare_nbd "$secs" "$limit" "/dev/$dev"
    note "same fio job on rlun's FUSE file and on the kernel initiator: see the comparison table"
}

# --- iSER (issue 9) ------------------------------------------------------------
#
# compare_iser SECS LIMIT: the bench LUN also on LIO's iSER portal; for 128 KiB
# sequential reads and 4 KiB random reads at QD 32: rlun bench over iSER and
# over TCP, libiscsi's iscsi-perf over iSER and fio on the kernel's ib_iser
# disk, each with the initiator's CPU seconds per GiB. Writes
# $LAB_OUT/compare-iser.json (with a "table" the runner prints).
#
# Rounds: the four contenders run one after the other, round after round
# (LAB_COMPARE_ROUNDS, default 3, of LAB_COMPARE_ROUND_SECONDS, default 5,
# each), so that a load shift on the host spreads over all of them; the
# table gives each one's median (min-max) and the ratios come from medians
# (compare_rounds.py). Every contender gets the same LUN, queue depth, block
# size and duration, and none a warm-up: each run starts a fresh process
# (login included) and measures its own I/O phase. The kernel's ib_iser
# session is logged in once before the first round and stays (idle) while
# the others run.
#
# CPU: rlun bench counts its own process (user + system) over its timed
# loop; iscsi-perf's CPU is getrusage of the child minus a /proc sample
# taken SECS before it exited (its start-up left out, as rlun's is);
# fio's usr+sys CPU of its job stands for the kernel initiator, which misses
# ib_iser work done in softirq and kernel threads (so the kernel row is a
# lower bound). Soft-RoCE (rdma_rxe) does the "NIC" work in the kernel,
# partly in the initiator's context: compare the rows with each other, never
# with hardware figures.
# stat_mark FILE: the time and /proc/stat, before and after each run, for
# the table's "vCPU ticks seen" (a run the host starved shows there).
stat_mark() {
    printf 't %s\n%s\n' "$EPOCHREALTIME" "$(</proc/stat)" >"$1"
}

COMPARE_ROUNDS_PY=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/compare_rounds.py

compare_iser() {
    local limit=$2 W=$LAB_WORK/iser
    local secs=${LAB_COMPARE_ROUND_SECONDS:-5} rounds=${LAB_COMPARE_ROUNDS:-3}
    mkdir -p "$W"
    need lio_iser
    modules ib_iser
    local tpg=$LIO/iscsi/$LIO_BENCH_IQN/tpgt_1
    local np=$tpg/np/$LAB_IP_T:$LIO_ISER_PORT
    if [ ! -d "$np" ]; then
        run "bench target: iSER portal" 10 mkdir -p "$np"
        cfs "$np/iser" 1
    fi
    local iser="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_BENCH_IQN/0"
    local tcp="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_BENCH_IQN/0"
    kernel_login "$LIO_BENCH_IQN" "$LIO_ISER_PORT" iser
    local dev
    dev=$(kernel_disk "$LIO_BENCH_IQN" "$LIO_ISER_PORT" 0) || fail "no kernel ib_iser disk for the bench LUN"
    assert_eq "kernel session transport" iser "$(kernel_transport "$LIO_BENCH_IQN" "$LIO_ISER_PORT")"
    # name pattern bs blocks(512-byte) fio-rw iscsi-perf-flag
    local cases=("read128k read 128k 256 read -" "randread4k randread 4k 8 randread -r") c name pat bs blocks rw rnd
    local r d
    for r in $(seq 1 "$rounds"); do
        d=$W/r$r
        mkdir -p "$d"
        log "round $r of $rounds ($secs s per run)"
        for c in "${cases[@]}"; do
            read -r name pat bs blocks rw rnd <<<"$c"
            stat_mark "$d/stat-rlun-iser-$name.0"
            capture "r$r: rlun bench $pat $bs qd32 over iSER" "$limit" "$d/rlun-iser-$name.json" \
                "$RLUN" bench "$iser" --pattern "$pat" --bs "$bs" --qd 32 --duration "${secs}s" --json
            stat_mark "$d/stat-rlun-iser-$name.1"
            local flag=()
            [ "$rnd" = "-" ] || flag=("$rnd")
            # iscsi-perf may fail over iSER for large requests (libiscsi's own
            # memory registration, see LAB.md): the row then says so.
            log "+ r$r: iscsi-perf over iSER $pat $bs qd32 (CPU of its last $secs s)"
            stat_mark "$d/stat-perf-$name.0"
            timeout -k 5 "$limit" python3 "$COMPARE_ROUNDS_PY" cpu-window "$d/perf-$name.json" "$secs" \
                iscsi-perf -m 32 -b "$blocks" -t "$secs" "${flag[@]}" "$iser" ||
                log "iscsi-perf over iSER $name failed (see $d/perf-$name.json)"
            stat_mark "$d/stat-perf-$name.1"
            grep -o '"rc": [0-9-]*\|iops average [0-9]*' "$d/perf-$name.json" | tail -n 2 | sed 's/^/  | /'
            stat_mark "$d/stat-rlun-tcp-$name.0"
            capture "r$r: rlun bench $pat $bs qd32 over TCP" "$limit" "$d/rlun-tcp-$name.json" \
                "$RLUN" bench "$tcp" --pattern "$pat" --bs "$bs" --qd 32 --duration "${secs}s" --json
            stat_mark "$d/stat-rlun-tcp-$name.1"
            stat_mark "$d/stat-fio-iser-$name.0"
            log "+ r$r: fio $rw $bs qd32 on the ib_iser disk /dev/$dev"
            timeout -k 5 "$limit" fio --name="$name" --filename="/dev/$dev" --rw="$rw" --bs="$bs" \
                --iodepth=32 --ioengine=libaio --direct=1 --runtime="$secs" --time_based \
                --output-format=json >"$d/fio-iser-$name.json" ||
                fail "fio $rw $bs on /dev/$dev failed"
            stat_mark "$d/stat-fio-iser-$name.1"
            grep -o '"iops" : [0-9.]*' "$d/fio-iser-$name.json" | head -n 1 | sed 's/^/  | /'
        done
    done

    python3 "$COMPARE_ROUNDS_PY" iser "$W" "$LAB_OUT/compare-iser.json" "$secs" "$rounds" \
        "${LAB_RLUN_SOURCE:-$RLUN}" || fail "could not read the iSER benchmark results"
    note "iSER comparison: see compare-iser.json"
}


# --- kernel nbd (issue 10) -----------------------------------------------------
#
# compare_nbd SECS LIMIT KERNEL_DISK: the same fio jobs (libaio, direct=1,
# QD 32: 128 KiB sequential and 4 KiB random reads) on /dev/nbdN attached by
# `rlun attach` (2 connections, --cache none: like the kernel initiator,
# every read goes to the target) and on the kernel initiator's disk of the
# same LIO LUN, one after the other, with
# fio's usr+sys CPU per GiB (rlun's own CPU from /proc for the nbd rows).
# Writes $LAB_OUT/compare-nbd.json (with a "table" the runner prints).
compare_nbd() {
    local secs=$1 limit=$2 kdev=$3 W=$LAB_WORK/nbd
    mkdir -p "$W"
    need nbd
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_BENCH_IQN/0" dev pid c name bs rw t0 t1
    setsid "$RLUN" attach "$url" --connections 2 --cache none </dev/null >"$W/attach.out" 2>"$W/attach.log" &
    pid=$!
    on_exit "'$RLUN' detach \$(head -n 1 '$W/attach.out') 2>/dev/null; kill $pid 2>/dev/null; true"
    wait_for "rlun attach printed its device" 60 grep -q '^/dev/nbd' "$W/attach.out"
    dev=$(head -n 1 "$W/attach.out")
    wait_for "$dev connected" 30 test -e "/sys/block/${dev#/dev/}/pid"
    local cases=("read128k 128k read" "randread4k 4k randread")
    for c in "${cases[@]}"; do
        read -r name bs rw <<<"$c"
        t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        capture "fio $rw $bs qd32 on $dev (rlun attach)" "$limit" "$W/fio-nbd-$name.json" \
            fio --name="$name" --filename="$dev" --rw="$rw" --bs="$bs" --iodepth=32 \
            --ioengine=libaio --direct=1 --runtime="$secs" --time_based --output-format=json
        t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        echo "$(((t1 - t0)))" >"$W/rlun-ticks-$name.txt"
        capture "fio $rw $bs qd32 on $kdev (kernel initiator)" "$limit" "$W/fio-sd-$name.json" \
            fio --name="$name" --filename="$kdev" --rw="$rw" --bs="$bs" --iodepth=32 \
            --ioengine=libaio --direct=1 --runtime="$secs" --time_based --output-format=json
    done
    run "rlun detach $dev" 120 "$RLUN" detach "$dev"
    python3 - "$W" "$LAB_OUT/compare-nbd.json" "$secs" "${LAB_RLUN_SOURCE:-$RLUN}" "$(getconf CLK_TCK)" <<'PY' || fail "could not read the nbd benchmark results"
import json, sys
work, out, secs, rlun, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
GIB = float(1 << 30)
rows = []
for name, label in (("read128k", "seq read 128k qd32"), ("randread4k", "randread 4k qd32")):
    for who, f in (("fio on rlun /dev/nbd", f"fio-nbd-{name}"), ("fio on kernel /dev/sd", f"fio-sd-{name}")):
        j = json.load(open(f"{work}/{f}.json"))["jobs"][0]
        rd = j["read"]
        gib = rd["io_bytes"] / GIB
        cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * rd["runtime"] / 1000.0
        row = {"case": label, "who": who, "iops": rd["iops"], "mb_s": rd["bw_bytes"] / 1e6,
               "fio_cpu_s_per_gib": cpu / gib if gib else None}
        if who.startswith("fio on rlun"):
            ticks = int(open(f"{work}/rlun-ticks-{name}.txt").read())
            row["rlun_cpu_s_per_gib"] = ticks / hz / gib if gib else None
        rows.append(row)

def f1(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"

table = [f"nbd comparison: fio (libaio, direct, QD 32) on /dev/nbdN attached by rlun vs on the kernel "
         f"initiator's /dev/sdX, same LIO LUN, same VM run, {secs} s each; software emulation: ratios only",
         f"  {'case':<20} {'device':<22} {'IOPS':>9} {'MB/s':>9} {'fio CPU s/GiB':>14} {'rlun CPU s/GiB':>15}"]
for r in rows:
    table.append(f"  {r['case']:<20} {r['who']:<22} {f1(r['iops'], '9.0f')} {f1(r['mb_s'], '9.1f')} "
                 f"{f1(r['fio_cpu_s_per_gib'], '14.2f')} {f1(r.get('rlun_cpu_s_per_gib'), '15.2f')}")
ratios = {}
for case in ("seq read 128k qd32", "randread 4k qd32"):
    n, k = (next(r["iops"] for r in rows if r["case"] == case and r["who"].startswith(w))
            for w in ("fio on rlun", "fio on kernel"))
    ratios[case] = n / k if k else None
    table.append(f"  {case}: rlun nbd / kernel initiator throughput {f1(ratios[case], '.2f')}")
json.dump({"what": "fio on /dev/nbdN attached by rlun vs fio on the kernel initiator's /dev/sdX",
           "seconds_per_run": secs, "rlun": rlun, "rows": rows, "ratios": ratios, "table": table},
          open(out, "w"), indent=1)
print("\n".join(table))
PY
}
