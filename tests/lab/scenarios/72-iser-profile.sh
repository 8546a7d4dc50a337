# about: measuring aid for the iSER data path: rlun bench 4 KiB random reads and 128 KiB sequential reads at QD 32 over iSER and TCP, CPU (user/system from getrusage) per I/O and system calls per I/O (perf stat on the system call tracepoints); with LAB_PROFILE_BASE=/path/to/rlun the same for a second binary, alternating, in the same VM run
# default: no
# timeout: 1500
#
# Not a pass/fail gate on speed: it fails only when a bench cannot run. It
# writes $LAB_OUT/iser-profile.txt (a table) and, for every run, the perf stat
# counts under $LAB_OUT/iser-profile/. Soft-RoCE does its protocol work in
# the kernel, partly in the context of the process that posts (each
# ibv_post_send on rxe is a write() to the uverbs device that runs the
# requester), so system time and system calls per I/O are the figures to
# compare between binaries, never absolute speeds.

scenario() {
    need lio_bench
    need lio_iser
    local W=$LAB_WORK secs=${LAB_COMPARE_SECONDS:-10} limit
    limit=$((secs * 4 + 120))
    local tpg=$LIO/iscsi/$LIO_BENCH_IQN/tpgt_1
    local np=$tpg/np/$LAB_IP_T:$LIO_ISER_PORT
    if [ ! -d "$np" ]; then
        run "bench target: iSER portal" 10 mkdir -p "$np"
        cfs "$np/iser" 1
    fi
    local -A url=(
        [iser]="iser://$LAB_IP_T:$LIO_ISER_PORT/$LIO_BENCH_IQN/0"
        [tcp]="iscsi://$LAB_IP_T:$LIO_TCP_PORT/$LIO_BENCH_IQN/0"
    )
    local bins=("new=$RLUN") b who bin tr c pat bs
    if [ -n "${LAB_PROFILE_BASE:-}" ]; then
        [ -x "$LAB_PROFILE_BASE" ] || fail "LAB_PROFILE_BASE=$LAB_PROFILE_BASE is not an executable"
        cp "$LAB_PROFILE_BASE" "$W/rlun-base"
        bins=("base=$W/rlun-base" "new=$RLUN")
    fi
    local out=$LAB_OUT/iser-profile events=raw_syscalls:sys_enter n
    for n in read write readv writev epoll_wait futex clock_gettime ioctl sched_yield; do
        events+=",syscalls:sys_enter_$n"
    done
    mkdir -p "$out"
    for c in "randread 4k" "read 128k"; do
        read -r pat bs <<<"$c"
        for tr in iser tcp; do
            for b in "${bins[@]}"; do
                who=${b%%=*} bin=${b#*=}
                log "+ $who $tr $pat $bs: rlun bench under getrusage"
                timeout -k 5 "$limit" python3 - "$out/$who-$tr-$pat-$bs.json" \
                    "$bin" bench "${url[$tr]}" --pattern "$pat" --bs "$bs" --qd 32 \
                    --duration "${secs}s" --json <<'PY' || fail "rlun bench $who $tr $pat $bs failed"
import json, resource, subprocess, sys
out, cmd = sys.argv[1], sys.argv[2:]
p = subprocess.run(cmd, capture_output=True, text=True)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
doc = {"rc": p.returncode, "stderr": p.stderr[-2000:], "user": ru.ru_utime, "sys": ru.ru_stime,
       "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw}
try:
    doc["bench"] = json.loads(p.stdout)
except ValueError:
    doc["stdout"] = p.stdout[-2000:]
json.dump(doc, open(out, "w"))
sys.exit(p.returncode)
PY
                # System calls counted by tracepoints (perf stat): unlike
                # strace, no stop per call, so the run keeps its pace.
                log "+ $who $tr $pat $bs: rlun bench under perf stat (system call tracepoints)"
                timeout -k 5 "$limit" perf stat -x, -o "$out/$who-$tr-$pat-$bs.sys" -e "$events" -- \
                    "$bin" bench "${url[$tr]}" --pattern "$pat" --bs "$bs" --qd 32 \
                    --duration "${secs}s" --json >"$out/$who-$tr-$pat-$bs.sys.json" ||
                    fail "rlun bench under perf stat $who $tr $pat $bs failed"
            done
        done
    done
    # Where the time goes (kernel included), 4 KiB random reads, this
    # binary: on request only (LAB_PROFILE_PERF=1), as perf record and
    # report are very slow under software emulation.
    if [ -n "${LAB_PROFILE_PERF:-}" ]; then
        for tr in iser tcp; do
            if try "$limit" perf record -e cpu-clock -F 500 -o "$W/perf-$tr.data" -- \
                "$RLUN" bench "${url[$tr]}" --pattern randread --bs 4k --qd 32 \
                --duration "${secs}s" --json; then
                try 600 perf report -i "$W/perf-$tr.data" --stdio --no-children \
                    --sort dso,sym --output "$W/perf-$tr.report" &&
                    grep -v '^#' "$W/perf-$tr.report" | grep -v '^$' | head -n 70 >"$out/perf-$tr.txt"
            fi
        done
    fi
    python3 - "$out" "$LAB_OUT/iser-profile.txt" <<'PY' || fail "could not read the profile results"
import json, re, sys
from pathlib import Path
d, out = Path(sys.argv[1]), sys.argv[2]
lines = ["rlun bench QD 32 (per I/O: CPU microseconds user/system from getrusage, "
         "context switches; system calls per I/O from perf stat tracepoints, top calls)"]
for f in sorted(d.glob("*.json")):
    if f.name.endswith(".sys.json"):
        continue
    r = json.loads(f.read_text())
    b = r.get("bench") or {}
    ios = b.get("ios") or 0
    if not ios:
        lines.append(f"{f.stem}: no result ({r.get('stderr', '')[-200:]})")
        continue
    s = json.loads((d / (f.stem + ".sys.json")).read_text())
    sios = s.get("ios") or 0
    calls = {}
    for ln in (d / (f.stem + ".sys")).read_text().splitlines():
        parts = ln.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit():
            calls[parts[2].split(":")[-1].replace("sys_enter_", "")] = int(parts[0])
    total = calls.pop("sys_enter", 0)
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:7]
    per = lambda n: n / sios if sios else float("nan")
    lines.append(
        f"{f.stem:<28} {b['iops']:8.0f} IOPS  user {r['user'] / ios * 1e6:7.1f} us  "
        f"sys {r['sys'] / ios * 1e6:7.1f} us  cs {(r['nvcsw'] + r['nivcsw']) / ios:5.2f}  "
        f"syscalls/IO {per(total):5.2f}: " + ", ".join(f"{k} {per(v):.2f}" for k, v in top))
Path(out).write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
    note "iSER profile: see iser-profile.txt"
}
