# about: comparison mode: fio (libaio, direct, QD 32, 4 KiB random and 128 KiB sequential reads) on rlun's /dev/ublkbN, on rlun's /dev/nbdN (both --cache none) and on the kernel initiator's /dev/sdX of the same LIO LUN, in rounds with medians, with each initiator's CPU per GiB; prints ratios
# default: no
# timeout: 1500
#
# Rounds (LAB_COMPARE_ROUNDS, default 3, of LAB_COMPARE_ROUND_SECONDS,
# default 5, per run): in each round every device runs each case once, so
# that a load shift on the host spreads over all of them; the table gives
# medians and min-max, the ratios come from medians. All three are set up
# before the first round and stay (idle) while the others run. CPU: rlun's
# own process (utime + stime from /proc, its queue threads included) per
# GiB read; for the kernel initiator fio's usr+sys per GiB stands in, which
# misses the iSCSI work done in softirq and kernel threads (a lower bound).
# Software emulation: compare the rows with each other only.

scenario() {
    rlun_has attach || skip "rlun has no 'attach' subcommand yet"
    "$RLUN" attach --help | grep -q -- '--ublk' || skip "this rlun has no attach --ublk"
    modinfo ublk_drv >/dev/null 2>&1 || skip "kernel $(uname -r) has no ublk_drv (the lab's default 6.12 has it)"
    need lio_bench
    need iscsid
    need nbd
    modules ublk_drv
    wait_for "/dev/ublk-control" 30 test -c /dev/ublk-control
    local W=$LAB_WORK secs=${LAB_COMPARE_ROUND_SECONDS:-5} rounds=${LAB_COMPARE_ROUNDS:-3}
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_BENCH_IQN/0" limit=$((secs * 3 + 120))
    local ublk nbd sd upid npid
    on_exit "for d in /dev/ublkb0 /dev/ublkb1 /dev/nbd0 /dev/nbd1; do '$RLUN' detach \$d 2>/dev/null; done; true"
    on_exit "for f in $W/*.log; do cp \"\$f\" '$LAB_OUT/logs/$LAB_SCENARIO-'\$(basename \"\$f\") 2>/dev/null; done; true"

    setsid "$RLUN" attach --ublk --cache none "$url" </dev/null >"$W/ublk.out" 2>"$W/ublk.log" &
    upid=$!
    setsid "$RLUN" attach --cache none --connections 2 "$url" </dev/null >"$W/nbd.out" 2>"$W/nbd.log" &
    npid=$!
    wait_for "rlun attach --ublk printed its device" 60 grep -q '^/dev/ublkb' "$W/ublk.out"
    wait_for "rlun attach printed its device" 60 grep -q '^/dev/nbd' "$W/nbd.out"
    ublk=$(head -n 1 "$W/ublk.out") nbd=$(head -n 1 "$W/nbd.out")
    wait_for "$nbd connected" 30 test -e "/sys/block/${nbd#/dev/}/pid"
    kernel_login "$LIO_BENCH_IQN" "$LIO_TCP_PORT" default
    sd=/dev/$(kernel_disk "$LIO_BENCH_IQN" "$LIO_TCP_PORT" 0) || fail "no kernel disk for the bench LUN"
    log "devices: ublk $ublk (pid $upid), nbd $nbd (pid $npid), kernel initiator $sd"

    # rlun's own I/O loop on the same LUN, no front end: what the
    # initiator alone reaches here (after the rounds, as one more row).
    local r d c name bs rw who dev pid t0 t1
    local cases=("randread4k 4k randread" "read128k 128k read")
    for r in $(seq 1 "$rounds"); do
        d=$W/r$r
        mkdir -p "$d"
        log "round $r of $rounds ($secs s per run)"
        for c in "${cases[@]}"; do
            read -r name bs rw <<<"$c"
            for who in ublk nbd sd; do
                case $who in
                ublk) dev=$ublk pid=$upid ;;
                nbd) dev=$nbd pid=$npid ;;
                sd) dev=$sd pid= ;;
                esac
                t0=0 t1=0
                [ -z "$pid" ] || t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
                capture "r$r: fio $rw $bs qd32 on $dev ($who)" "$limit" "$d/fio-$who-$name.json" \
                    fio --name="$name" --filename="$dev" --rw="$rw" --bs="$bs" --iodepth=32 \
                    --ioengine=libaio --direct=1 --runtime="$secs" --time_based --output-format=json
                [ -z "$pid" ] || t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
                echo "$((t1 - t0))" >"$d/ticks-$who-$name.txt"
            done
        done
    done
    for c in "${cases[@]}"; do
        read -r name bs rw <<<"$c"
        capture "rlun bench $rw $bs qd32" "$limit" "$W/bench-$name.json" \
            "$RLUN" bench "$url" --pattern "$rw" --bs "$bs" --qd 32 --duration "${secs}s" --json
    done
    run "rlun detach $ublk" 120 "$RLUN" detach "$ublk"
    run "rlun detach $nbd" 120 "$RLUN" detach "$nbd"

    python3 - "$W" "$LAB_OUT/compare-ublk.json" "$secs" "$rounds" "${LAB_RLUN_SOURCE:-$RLUN}" "$(getconf CLK_TCK)" <<'PY' || fail "could not read the results"
import json, statistics, sys
work, out, secs, rounds, rlun, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
GIB = float(1 << 30)
WHO = {"ublk": "rlun /dev/ublkb", "nbd": "rlun /dev/nbd", "sd": "kernel /dev/sd"}
CASES = {"randread4k": "randread 4k qd32", "read128k": "seq read 128k qd32"}
rows = []
for name, label in CASES.items():
    for who, dev in WHO.items():
        iops, mbs, cpu = [], [], []
        for r in range(1, rounds + 1):
            j = json.load(open(f"{work}/r{r}/fio-{who}-{name}.json"))["jobs"][0]
            rd = j["read"]
            gib = rd["io_bytes"] / GIB
            iops.append(rd["iops"])
            mbs.append(rd["bw_bytes"] / 1e6)
            if who == "sd":
                c = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * rd["runtime"] / 1000.0
            else:
                c = int(open(f"{work}/r{r}/ticks-{who}-{name}.txt").read()) / hz
            cpu.append(c / gib if gib else float("nan"))
        rows.append({"case": label, "who": dev, "iops_median": statistics.median(iops),
                     "iops_min": min(iops), "iops_max": max(iops), "mb_s_median": statistics.median(mbs),
                     "cpu_s_per_gib_median": statistics.median(cpu),
                     "cpu_kind": "fio usr+sys (lower bound)" if who == "sd" else "rlun process"})

bench = {}
for name, label in CASES.items():
    b = json.load(open(f"{work}/bench-{name}.json"))
    bench[label] = b["iops"]
    rows.append({"case": label, "who": "rlun bench", "iops_median": b["iops"], "iops_min": b["iops"],
                 "iops_max": b["iops"], "mb_s_median": b["mb_per_s"], "cpu_s_per_gib_median": None,
                 "cpu_kind": "one run after the rounds"})

def med(case, who):
    return next(r["iops_median"] for r in rows if r["case"] == case and r["who"] == who)

ratios = {
    "randread 4k: ublk / nbd": med("randread 4k qd32", WHO["ublk"]) / med("randread 4k qd32", WHO["nbd"]),
    "randread 4k: ublk / kernel": med("randread 4k qd32", WHO["ublk"]) / med("randread 4k qd32", WHO["sd"]),
    "seq read 128k: ublk / nbd": med("seq read 128k qd32", WHO["ublk"]) / med("seq read 128k qd32", WHO["nbd"]),
    "seq read 128k: ublk / kernel": med("seq read 128k qd32", WHO["ublk"]) / med("seq read 128k qd32", WHO["sd"]),
    "randread 4k: ublk / rlun bench": med("randread 4k qd32", WHO["ublk"]) / bench["randread 4k qd32"],
    "seq read 128k: ublk / rlun bench": med("seq read 128k qd32", WHO["ublk"]) / bench["seq read 128k qd32"],
}
table = [f"ublk comparison: fio (libaio, direct, QD 32) on rlun's /dev/ublkbN and /dev/nbdN (--cache none) and the "
         f"kernel initiator's /dev/sdX, same LIO LUN, {rounds} rounds of {secs} s, medians (min-max); software emulation: ratios only",
         f"  {'case':<20} {'device':<16} {'IOPS median':>12} {'(min-max)':>17} {'MB/s':>8} {'CPU s/GiB':>10}"]
for r in rows:
    table.append(f"  {r['case']:<20} {r['who']:<16} {r['iops_median']:12.0f} "
                 f"{'(%.0f-%.0f)' % (r['iops_min'], r['iops_max']):>17} {r['mb_s_median']:8.1f} {'-' if r['cpu_s_per_gib_median'] is None else format(r['cpu_s_per_gib_median'], '.2f'):>10}")
for k, v in ratios.items():
    table.append(f"  {k}: {v:.2f}")
json.dump({"what": "fio on rlun's ublk and nbd devices vs the kernel initiator", "seconds_per_run": secs,
           "rounds": rounds, "rlun": rlun, "rows": rows, "ratios": ratios, "table": table}, open(out, "w"), indent=1)
print("\n".join(table))
PY
    note "ublk vs nbd vs kernel initiator: see compare-ublk.json"
}
