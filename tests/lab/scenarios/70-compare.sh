# about: comparison mode: rlun bench vs fio on the kernel initiator's /dev/sdX (open-iscsi), same LIO LUN, same VM run; prints ratios
# default: no
# timeout: 900
#
# rlun has no block device or FUSE file yet, so this compares `rlun bench`
# (its own I/O loop) with fio (libaio, direct=1) on the kernel initiator's
# disk, same pattern and queue depth. Once rlun has a mount, run the same fio
# job on rlun's file instead. Software emulation: read ratios only.

scenario() {
    need lio_bench
    need iscsid
    local W=$LAB_WORK secs=${LAB_COMPARE_SECONDS:-10} dev
    local url="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_BENCH_IQN/0" limit=$((secs * 3 + 120))
    # Each case: name rlun-pattern bs fio-rw
    local cases=("randread4k randread 4k randread" "read128k read 128k read") c name pat bs rw

    # rlun first, while no kernel session exists.
    for c in "${cases[@]}"; do
        read -r name pat bs rw <<<"$c"
        capture "rlun bench $pat $bs qd32" "$limit" "$W/rlun-$name.json" \
            "$RLUN" bench "$url" --pattern "$pat" --bs "$bs" --qd 32 --duration "${secs}s" --json
    done

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
    k_iops, k_mbs = f["iops"], f["bw_bytes"] / 1e6
    rows.append({
        "case": label,
        "rlun_iops": r["iops"], "rlun_mb_s": r["mb_per_s"],
        "kernel_iops": k_iops, "kernel_mb_s": k_mbs,
        "ratio": (r["iops"] / k_iops) if k_iops else None,
    })
doc = {
    "what": "rlun bench vs fio (libaio, direct=1) on the kernel initiator's /dev/sdX, "
            "same LIO LUN, same VM run; rlun has no mount yet, so rlun's side is its own "
            "bench loop, not fio",
    "seconds_per_run": secs,
    "rlun": rlun,
    "note": "software emulation (no KVM): compare ratios only, never absolute figures",
    "rows": rows,
}
json.dump(doc, open(out, "w"), indent=1)
for row in rows:
    print(f"{row['case']}: rlun {row['rlun_iops']:.0f} IOPS {row['rlun_mb_s']:.1f} MB/s, "
          f"kernel {row['kernel_iops']:.0f} IOPS {row['kernel_mb_s']:.1f} MB/s, "
          f"ratio rlun/kernel {row['ratio']:.2f}")
PY
    note "rlun bench vs fio on the kernel initiator: see the comparison table"
}
