"""Where the guest's CPU goes while one initiator reads: a window of a
running benchmark, measured from inside the VM (scenario `iser-cpu`,
scenarios/73-iser-cpu.sh).

    python3 guest_cpu.py measure OUT WINDOW [--acl INFO] [--perf FILE] -- CMD...
        runs CMD; once reads reach the target (LIO's command count on the
        bench LU rises) it waits a moment, snapshots the guest,
        sleeps WINDOW seconds (or records `perf record -a` over them), and
        snapshots again; while waiting it samples LIO's session `info`
        file INFO (an explicit node ACL's) for the commands outstanding at
        the target. OUT (JSON) holds the deltas and CMD's exit code and
        output.
    python3 guest_cpu.py report OUT.txt JSON...
        the table of every measured window (per initiator: throughput at
        the target, guest CPU by kind and by vCPU, softirqs, the busiest
        threads, packets per read, rxe counters, outstanding commands)

"ticks seen" is the share of the window the guest accounted on a vCPU
(all /proc/stat fields): the guest counts CPU time by timer ticks, and
under software emulation a vCPU thread the host does not run misses
them, so a figure well below 1.00 means the host starved that vCPU (host
load), and that run's throughput says more about the host than about
the initiator.

A snapshot reads /proc/stat (per-vCPU user/system/softirq/idle), the
/proc/softirqs counts, utime+stime of every thread (/proc/*/task/*/stat),
rdma_rxe's hw_counters, every network device's packet and byte counts and LIO's
per-LU command count. The parsing and the arithmetic are pure functions,
unit-tested in test_lab.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from compare_rounds import Drained  # beside this file, in the guest too

GIB = float(1 << 30)
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
LU_STATS = "/sys/kernel/config/target/core/fileio_0/bench/statistics/scsi_lu"


# --- parsing (pure) -------------------------------------------------------------


def parse_proc_stat(text: str) -> dict[str, dict[str, int]]:
    """Per-CPU tick counts from /proc/stat: {"cpu0": {"user": .., ...}, "cpu": total}."""
    out = {}
    for ln in text.splitlines():
        parts = ln.split()
        if not parts or not parts[0].startswith("cpu"):
            continue
        vals = [int(v) for v in parts[1 : 1 + len(CPU_FIELDS)]]
        out[parts[0]] = dict(zip(CPU_FIELDS, vals))
    return out


def parse_softirqs(text: str) -> dict[str, list[int]]:
    """/proc/softirqs: {"NET_RX": [cpu0, cpu1, ...], ...}."""
    lines = text.splitlines()
    out = {}
    for ln in lines[1:]:
        name, _, rest = ln.partition(":")
        if rest:
            out[name.strip()] = [int(v) for v in rest.split()]
    return out


def parse_task_stat(text: str) -> tuple[str, int, int, int, int]:
    """One /proc/PID/task/TID/stat line: (comm, ppid, utime, stime, last CPU).
    The comm may hold spaces and parentheses: it ends at the last ')'."""
    head, _, tail = text.rpartition(")")
    comm = head.partition("(")[2]
    f = tail.split()
    # tail starts at field 3 (state): ppid is field 4, utime 14, stime 15,
    # processor 39 (1-based, man 5 proc).
    return comm, int(f[1]), int(f[11]), int(f[12]), int(f[36])


def parse_lio_info(text: str) -> dict[str, int] | None:
    """LIO's node ACL `info`: the CmdSN window and what is left of it. The
    commands outstanding at the target are window - left."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if "CmdSN/WR" in ln and i + 1 < len(lines):
            v = [int(x, 16) for x in lines[i + 1].split()[:4]]
            return {"window": v[0], "left": v[1], "exp_cmdsn": v[2], "max_cmdsn": v[3]}
    return None


def delta(a: dict, b: dict) -> dict:
    """b - a for nested dicts/lists of numbers (keys missing in a count from 0)."""
    out = {}
    for k, vb in b.items():
        va = a.get(k)
        if isinstance(vb, dict):
            out[k] = delta(va or {}, vb)
        elif isinstance(vb, list):
            va = va or [0] * len(vb)
            out[k] = [y - x for x, y in zip(va, vb)]
        elif isinstance(vb, (int, float)):
            out[k] = vb - (va or 0)
    return out


# --- snapshots (guest only) ---------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _int(path: str) -> int | None:
    t = _read(path)
    try:
        return int(t) if t is not None else None
    except ValueError:
        return None


def threads() -> dict[str, dict]:
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            t = _read(f"/proc/{pid}/task/{tid}/stat")
            if not t:
                continue
            try:
                comm, ppid, ut, st, cpu = parse_task_stat(t)
            except (IndexError, ValueError):
                continue
            out[tid] = {"comm": comm, "pid": int(pid), "ppid": ppid, "ticks": ut + st, "cpu": cpu}
    return out


def snapshot() -> dict:
    s = {"t": time.monotonic(), "stat": parse_proc_stat(_read("/proc/stat") or ""),
         "softirqs": parse_softirqs(_read("/proc/softirqs") or ""), "threads": threads(),
         "net": {}, "rxe": {}, "lu": {}}
    for dev in sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []:
        s["net"][dev] = {k: _int(f"/sys/class/net/{dev}/statistics/{k}") or 0
                         for k in ("tx_packets", "tx_bytes", "rx_packets", "rx_bytes")}
    ib = Path("/sys/class/infiniband")
    for d in sorted(ib.glob("*")) if ib.exists() else []:
        c = d / "ports/1/hw_counters"
        if c.is_dir():
            s["rxe"][d.name] = {f.name: _int(str(f)) or 0 for f in sorted(c.iterdir())}
    for k in ("num_cmds", "read_mbytes", "write_mbytes"):
        v = _int(f"{LU_STATS}/{k}")
        if v is not None:
            s["lu"][k] = v
    return s


def window_deltas(a: dict, b: dict, root_pid: int, hz: int) -> dict:
    """What happened between two snapshots: CPU seconds by kind per vCPU,
    softirq counts, per-thread CPU seconds (busiest first, the initiator's
    process tree marked), network, rxe and LIO counters."""
    secs = b["t"] - a["t"]
    cpus = {c: {k: v / hz for k, v in d.items()} for c, d in delta(a["stat"], b["stat"]).items()}
    th = []
    mine = {root_pid}
    for tid, t in b["threads"].items():
        if t["pid"] == root_pid or t["ppid"] in mine:
            mine.add(t["pid"])
    for tid, t in b["threads"].items():
        before = a["threads"].get(tid, {}).get("ticks", 0)
        d = (t["ticks"] - before) / hz
        if d > 0:
            th.append({"tid": int(tid), "pid": t["pid"], "comm": t["comm"], "cpu_s": d,
                       "last_cpu": t["cpu"], "initiator": t["pid"] in mine})
    th.sort(key=lambda x: -x["cpu_s"])
    return {"seconds": secs, "cpus": cpus, "softirqs": delta(a["softirqs"], b["softirqs"]),
            "threads": th, "net": delta(a["net"], b["net"]), "rxe": delta(a["rxe"], b["rxe"]),
            "lu": delta(a["lu"], b["lu"])}


def summary(w: dict, bs: int) -> dict:
    """Figures per initiator from a window: reads/s at the target, MB/s, guest
    CPU seconds by kind (all vCPUs), per GiB, the initiator's share, packets
    per read on the target's veth."""
    secs = w["seconds"]
    reads = w["lu"].get("num_cmds", 0)
    gib = reads * bs / GIB
    tot = w["cpus"].get("cpu", {})
    busy = sum(v for k, v in tot.items() if k not in ("idle", "iowait"))
    init = sum(t["cpu_s"] for t in w["threads"] if t["initiator"])
    per_cpu = {c: {k: round(v / secs, 3) for k, v in d.items()} for c, d in w["cpus"].items() if c != "cpu"}
    lo = w["net"].get("lo", {})
    per = lambda x: x / gib if gib else None
    return {
        "seconds": secs, "reads_per_s": reads / secs if secs else 0.0, "mb_s": reads * bs / 1e6 / secs if secs else 0.0,
        "guest_busy_cpus": busy / secs if secs else 0.0,
        "guest_kind_cpus": {k: round(v / secs, 3) for k, v in tot.items()} if secs else {},
        "per_cpu_share": per_cpu,
        "busy_s_per_gib": per(busy), "softirq_s_per_gib": per(tot.get("softirq", 0.0)),
        "system_s_per_gib": per(tot.get("system", 0.0)), "initiator_s_per_gib": per(init),
        "initiator_cpus": init / secs if secs else 0.0,
        "lo_packets_per_read": lo.get("tx_packets", 0) / reads if reads else None,
        "lo_bytes_per_packet": lo.get("tx_bytes", 0) / lo["tx_packets"] if lo.get("tx_packets") else None,
    }


def outstanding(samples: list[dict]) -> dict | None:
    """Commands outstanding at the target from LIO info samples."""
    samples = [s for s in samples if s]
    vals = [s["window"] - s["left"] for s in samples]
    if not vals:
        return None
    vals.sort()
    return {"n": len(vals), "min": vals[0], "median": vals[len(vals) // 2], "max": vals[-1],
            "mean": sum(vals) / len(vals), "window": samples[-1]["window"]}


def fmt_table(docs: list[dict]) -> list[str]:
    lines = []
    for d in docs:
        s, w = d["summary"], d["window"]
        o = d.get("outstanding")
        lines.append(f"== {d['label']} ({s['seconds']:.1f} s window, exit code {d.get('rc')})")
        lines.append(f"  at the target: {s['reads_per_s']:.0f} reads/s, {s['mb_s']:.1f} MB/s; "
                     f"outstanding at LIO: " + (f"median {o['median']} (min {o['min']}, max {o['max']}, "
                                                f"mean {o['mean']:.1f}, n {o['n']}) of window {o['window']}"
                                                if o else "-"))
        k = s["guest_kind_cpus"]
        lines.append("  guest CPUs busy {:.2f} of {}: ".format(s["guest_busy_cpus"], len(s["per_cpu_share"]))
                     + ", ".join(f"{n} {k.get(n, 0):.2f}" for n in ("user", "system", "softirq", "irq", "idle", "iowait")))
        for c, v in sorted(s["per_cpu_share"].items()):
            lines.append(f"    {c}: " + ", ".join(f"{n} {v.get(n, 0):.2f}" for n in ("user", "system", "softirq", "irq", "idle"))
                         + f"; ticks seen {sum(v.values()):.2f}")
        f = lambda x: f"{x:.2f}" if isinstance(x, (int, float)) else "-"
        lines.append(f"  per GiB: guest busy {f(s['busy_s_per_gib'])} s, softirq {f(s['softirq_s_per_gib'])} s, "
                     f"system {f(s['system_s_per_gib'])} s, initiator process {f(s['initiator_s_per_gib'])} s "
                     f"({s['initiator_cpus']:.2f} CPUs)")
        reads = s["reads_per_s"] * s["seconds"]
        lines.append("  network devices (tx packets per read, bytes per packet): " + "; ".join(
            f"{dev} {c['tx_packets'] / reads:.1f}, {c['tx_bytes'] / c['tx_packets']:.0f}"
            for dev, c in w["net"].items() if c.get("tx_packets") and reads))
        si = w["softirqs"]
        lines.append("  softirqs/s: " + ", ".join(
            f"{n} " + "/".join(f"{x / s['seconds']:.0f}" for x in v)
            for n, v in si.items() if sum(v)))
        lines.append("  busiest threads (CPU share of the window, last vCPU; * = initiator's process):")
        for t in w["threads"][:12]:
            lines.append(f"    {t['cpu_s'] / s['seconds']:5.2f} {'*' if t['initiator'] else ' '} "
                         f"{t['comm']:<24} tid {t['tid']:<6} cpu{t['last_cpu']}")
        rxe = {dev: {n: v for n, v in c.items() if v} for dev, c in w["rxe"].items()}
        lines.append("  rxe counters: " + "; ".join(
            f"{dev}: " + ", ".join(f"{n} {v}" for n, v in c.items()) for dev, c in rxe.items()))
        if d.get("perf_top"):
            lines.append("  perf record -a (cpu-clock) over the window, top symbols:")
            lines += [f"    {ln}" for ln in d["perf_top"]]
    return lines


# --- guest commands ---------------------------------------------------------------


def measure_main(argv: list[str]) -> int:
    out, window = argv[0], float(argv[1])
    rest = argv[2:]
    acl = perf = None
    bs = 131072
    while rest and rest[0] != "--":
        opt, val, rest = rest[0], rest[1], rest[2:]
        if opt == "--acl":
            acl = val
        elif opt == "--perf":
            perf = val
        elif opt == "--bs":
            bs = int(val)
        else:
            raise SystemExit(f"unknown option {opt}")
    cmd = rest[1:]
    hz = os.sysconf("SC_CLK_TCK")
    child = Drained(cmd)
    p = child.proc
    doc: dict = {"cmd": cmd, "window_asked": window}
    # Read data flows once LIO counts commands on the bench LU; failing that
    # (no LU statistics), after a fixed delay, and the result says so.
    started = None
    last = _int(f"{LU_STATS}/num_cmds")
    t0 = time.monotonic()
    while p.poll() is None and time.monotonic() < t0 + 120:
        time.sleep(0.5)
        now = _int(f"{LU_STATS}/num_cmds")
        if last is None or now is None:
            if time.monotonic() > t0 + 8:
                doc["start"] = "fixed delay (no LU statistics)"
                started = time.monotonic()
                break
            continue
        if now - last >= 4:
            doc["start"] = "LU command count rising"
            started = time.monotonic()
            break
        last = now
    if started is not None and p.poll() is None:
        time.sleep(1.0)
        samples = []
        a = snapshot()
        end = time.monotonic() + window
        pr = None
        if perf:
            # No build-id pass at the end (it reads every DSO hit, vmlinux
            # included: minutes under emulation).
            pr = subprocess.Popen(["perf", "record", "-a", "-e", "cpu-clock", "-F", "99", "--no-buildid",
                                   "--no-buildid-cache", "-o", perf,
                                   "--", "sleep", str(window)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while time.monotonic() < end:
            if acl:
                samples.append(parse_lio_info(_read(acl) or ""))
            time.sleep(0.5)
        b = snapshot()
        if pr:
            pr.wait()
        doc["window"] = window_deltas(a, b, p.pid, hz)
        doc["summary"] = summary(doc["window"], bs)
        doc["outstanding"] = outstanding(samples)
        doc["lio_info_last"] = _read(acl) if acl else None
    else:
        doc["error"] = "no read seen at the target before the command ended"
    stdout, stderr = child.finish()
    doc.update(rc=p.returncode, stdout=stdout[-3000:], stderr=stderr[-2000:])
    Path(out).write_text(json.dumps(doc))
    return 0 if "window" in doc else 1


def report_main(argv: list[str]) -> int:
    out, files = argv[0], argv[1:]
    docs = []
    for f in files:
        d = json.loads(Path(f).read_text())
        d["label"] = Path(f).stem
        if "summary" in d:
            docs.append(d)
        top = Path(f).with_suffix(".perf.txt")
        if top.exists():
            d["perf_top"] = top.read_text().splitlines()[:25]
    lines = fmt_table(docs)
    Path(out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "measure":
        sys.exit(measure_main(sys.argv[2:]))
    if len(sys.argv) > 2 and sys.argv[1] == "report":
        sys.exit(report_main(sys.argv[2:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
