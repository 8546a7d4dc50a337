# about: comparison mode: the same fio job on rlun's FUSE file and on the kernel initiator's /dev/sdX (open-iscsi), same LIO LUN, same VM run; also rlun bench; prints ratios
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
    note "same fio job on rlun's FUSE file and on the kernel initiator: see the comparison table"
}
