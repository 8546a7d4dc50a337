"""Rounds of a comparison: the contenders run in turn, round after round, and
each is reported by its median (with min and max) over the rounds.

Software emulation makes single runs noisy (a load shift on the host lands
on whichever contender runs at that moment); alternating the contenders and
taking medians spreads such shifts over all of them. Used by the iSER block
of the `compare` scenario (scenarios/70-compare.sh, `compare_iser`):

    python3 compare_rounds.py iser WORK OUT SECONDS ROUNDS RLUN
        reads WORK/rN/{rlun-iser,rlun-tcp,perf,fio-iser}-CASE.json for
        rounds 1..ROUNDS, writes OUT (JSON with "rows" and a printed "table")
    python3 compare_rounds.py cpu-window OUT SECONDS CMD...
        runs CMD, writes OUT (JSON): its exit code, output, and the CPU
        seconds it used in its last SECONDS seconds (its I/O phase when CMD
        is a benchmark that runs for SECONDS and exits), from /proc samples
        and getrusage of the child

Pure functions (`summarize`, `iser_rows`, `iser_table`) are unit-tested in
test_lab.py.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

GIB = float(1 << 30)

# (case key, block size, label) of the iSER block, in table order.
ISER_CASES = (("read128k", 131072, "seq read 128k qd32"), ("randread4k", 4096, "randread 4k qd32"))
RLUN_ISER, RLUN_TCP = "rlun bench iSER", "rlun bench TCP"
LIBISCSI, KERNEL = "libiscsi iscsi-perf iSER", "fio on kernel ib_iser"


def median(xs: list[float]) -> float | None:
    """The median (mean of the middle two for an even count); None when empty."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def summarize(samples: list[dict], keys: tuple[str, ...]) -> dict:
    """Median, min and max of each key over the samples that have a number
    for it; `rounds` counts the samples, `ok` those without an error."""
    out: dict = {"rounds": len(samples), "ok": sum(1 for s in samples if not s.get("error"))}
    for k in keys:
        xs = [s[k] for s in samples if isinstance(s.get(k), (int, float)) and not s.get("error")]
        out[k] = median(xs)
        out[k + "_min"] = min(xs) if xs else None
        out[k + "_max"] = max(xs) if xs else None
        out[k + "_samples"] = xs
    errors = [s["error"] for s in samples if s.get("error")]
    if errors:
        out["errors"] = errors
    return out


def _load(path: Path):
    return json.loads(path.read_text())


def rlun_sample(path: Path) -> dict:
    try:
        r = _load(path)
        return {"iops": r["iops"], "mb_s": r["mb_per_s"], "cpu_s_per_gib": r["cpu_s_per_gib"],
                "copied_bytes": r.get("copied_bytes")}
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"no result: {e}"}


def libiscsi_sample(path: Path, bs: int, secs: float) -> dict:
    """iscsi-perf's own "iops average" over its run; CPU of its I/O phase
    (see cpu_window) per GiB moved in that phase."""
    try:
        p = _load(path)
        m = re.findall(r"iops average (\d+)", p["stdout"])
        if p["rc"] != 0 or not m:
            lines = (p["stdout"] + p["stderr"]).strip().splitlines()
            return {"error": lines[-1] if lines else "no output"}
        iops = float(m[-1])
        gib = iops * bs * secs / GIB
        cpu = p["cpu_seconds_window"]
        return {"iops": iops, "mb_s": iops * bs / 1e6,
                "cpu_s_per_gib": cpu / gib if gib else None, "copied_bytes": None}
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"no result: {e}"}


def fio_sample(path: Path) -> dict:
    """fio's usr+sys CPU of its job over the job's runtime, per GiB read."""
    try:
        f = _load(path)["jobs"][0]
        rd = f["read"]
        runtime = rd["runtime"] / 1000.0
        gib = rd["io_bytes"] / GIB
        cpu = (f["usr_cpu"] + f["sys_cpu"]) / 100.0 * runtime
        return {"iops": rd["iops"], "mb_s": rd["bw_bytes"] / 1e6,
                "cpu_s_per_gib": cpu / gib if gib else None, "copied_bytes": None}
    except (OSError, ValueError, KeyError, IndexError) as e:
        return {"error": f"no result: {e}"}


def ticks_seen(before: str, after: str, hz: int) -> float | None:
    """The smallest share of the wall time between two marks (a "t SECONDS"
    line, then /proc/stat) that the guest accounted on any one vCPU. The
    guest counts CPU time by timer ticks; under software emulation a vCPU
    thread the host does not run misses them, so a run with a figure well
    below 1 was starved by host load, whoever the contender."""
    def parse(text):
        t = None
        cpus = {}
        for ln in text.splitlines():
            p = ln.split()
            if len(p) == 2 and p[0] == "t":
                t = float(p[1].replace(",", "."))
            elif p and p[0].startswith("cpu") and p[0] != "cpu":
                cpus[p[0]] = sum(int(v) for v in p[1:9])
        return t, cpus
    try:
        (t0, a), (t1, b) = parse(before), parse(after)
    except ValueError:
        return None
    if t0 is None or t1 is None or t1 <= t0 or not a:
        return None
    return min((b[c] - a[c]) / hz / (t1 - t0) for c in a if c in b)


def _ticks(d: Path, tag: str, hz: int) -> dict:
    try:
        v = ticks_seen((d / f"stat-{tag}.0").read_text(), (d / f"stat-{tag}.1").read_text(), hz)
    except OSError:
        return {}
    return {} if v is None else {"ticks_seen": v}


def iser_rows(work: Path, rounds: int, secs: float, hz: int = 100) -> list[dict]:
    """One row per case and contender, medians over the rounds present."""
    rows = []
    for name, bs, label in ISER_CASES:
        per: dict[str, list[dict]] = {RLUN_ISER: [], RLUN_TCP: [], LIBISCSI: [], KERNEL: []}
        for r in range(1, rounds + 1):
            d = work / f"r{r}"
            per[RLUN_ISER].append({**rlun_sample(d / f"rlun-iser-{name}.json"),
                                   **_ticks(d, f"rlun-iser-{name}", hz)})
            per[RLUN_TCP].append({**rlun_sample(d / f"rlun-tcp-{name}.json"),
                                  **_ticks(d, f"rlun-tcp-{name}", hz)})
            per[LIBISCSI].append({**libiscsi_sample(d / f"perf-{name}.json", bs, secs),
                                  **_ticks(d, f"perf-{name}", hz)})
            per[KERNEL].append({**fio_sample(d / f"fio-iser-{name}.json"), **_ticks(d, f"fio-iser-{name}", hz)})
        for who, samples in per.items():
            s = summarize(samples, ("iops", "mb_s", "cpu_s_per_gib", "ticks_seen"))
            copied = [x["copied_bytes"] for x in samples if isinstance(x.get("copied_bytes"), int)]
            rows.append({"case": label, "who": who, **s,
                         "copied_bytes": max(copied) if copied else None})
    return rows


def _get(rows: list[dict], case: str, who: str, key: str):
    return next((r.get(key) for r in rows if r["case"] == case and r["who"] == who), None)


def _ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def iser_ratios(rows: list[dict]) -> dict:
    """The goals' ratios, from medians."""
    out = {}
    for _, _, case in ISER_CASES:
        out[case] = {
            "rlun_iser_over_libiscsi_iops": _ratio(_get(rows, case, RLUN_ISER, "iops"),
                                                   _get(rows, case, LIBISCSI, "iops")),
            "rlun_iser_over_rlun_tcp_cpu_per_gib": _ratio(_get(rows, case, RLUN_ISER, "cpu_s_per_gib"),
                                                          _get(rows, case, RLUN_TCP, "cpu_s_per_gib")),
        }
    return out


def _f(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def _span(r: dict, key: str, fmt: str) -> str:
    lo, hi = r.get(key + "_min"), r.get(key + "_max")
    return f"{_f(lo, fmt)}-{_f(hi, fmt)}" if lo is not None else "-"


def iser_table(rows: list[dict], ratios: dict, secs: float, rounds: int) -> list[str]:
    table = [f"iSER comparison: same LIO LUN (256 MiB, 512-byte blocks), same VM run, "
             f"{rounds} alternating rounds of {secs:g} s each, medians (min-max); "
             "software emulation (soft-RoCE, no KVM): ratios only",
             f"  {'case':<20} {'initiator':<26} {'IOPS':>7} {'(min-max)':>13} {'MB/s':>7} "
             f"{'CPU s/GiB':>9} {'(min-max)':>15} {'copied':>10} {'ok':>4} {'vCPU ticks seen':>16}"]
    for r in rows:
        line = (f"  {r['case']:<20} {r['who']:<26} {_f(r['iops'], '7.0f')} {_span(r, 'iops', '.0f'):>13} "
                f"{_f(r['mb_s'], '7.1f')} {_f(r['cpu_s_per_gib'], '9.2f')} "
                f"{_span(r, 'cpu_s_per_gib', '.1f'):>15} {_f(r['copied_bytes'], '10d')} "
                f"{r['ok']}/{r['rounds']} {_span(r, 'ticks_seen', '.2f'):>16}")
        if r.get("errors"):
            line += f"  ({r['errors'][0]})"
        table.append(line)
    table.append("  vCPU ticks seen (min-max over the rounds): the least-served vCPU's accounted share of "
                 "the run; well below 1.00 = the host starved the VM in that run (host load)")
    for case, q in ratios.items():
        table.append(f"  {case}: rlun-iSER/libiscsi-iSER throughput "
                     f"{_f(q['rlun_iser_over_libiscsi_iops'], '.2f')} (goal >= 1), "
                     f"rlun-iSER/rlun-TCP CPU per GiB "
                     f"{_f(q['rlun_iser_over_rlun_tcp_cpu_per_gib'], '.2f')} (goal < 1)")
    return table


def iser_main(work: str, out: str, secs: str, rounds: str, rlun: str) -> int:
    s, n = float(secs), int(rounds)
    rows = iser_rows(Path(work), n, s, os.sysconf("SC_CLK_TCK"))
    ratios = iser_ratios(rows)
    table = iser_table(rows, ratios, s, n)
    doc = {"what": "iSER: rlun bench (iSER, TCP), libiscsi iscsi-perf (iSER), fio on the kernel's "
                   "ib_iser disk; contenders alternate, round after round; medians over the rounds",
           "seconds_per_run": s, "rounds": n, "rlun": rlun, "rows": rows, "ratios": ratios,
           "table": table}
    Path(out).write_text(json.dumps(doc, indent=1))
    print("\n".join(table))
    return 0


def cpu_at(samples: list[tuple[float, float]], t: float) -> float:
    """CPU seconds of the last sample taken at or before t (0 before any)."""
    best = 0.0
    for ts, cpu in samples:
        if ts <= t:
            best = cpu
        else:
            break
    return best


def _proc_cpu(pid: int, hz: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read()
        rest = f[f.rindex(")") + 2:].split()
        return (int(rest[11]) + int(rest[12])) / hz
    except (OSError, ValueError, IndexError):
        return None


class Drained:
    """A child process whose stdout and stderr two threads read to the end
    (so that neither pipe fills up and stalls it); `finish()` waits for
    them and returns what each said."""

    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._outs: dict[str, str] = {}
        self._threads = [threading.Thread(target=self._drain, args=(n, f))
                         for n, f in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))]
        for t in self._threads:
            t.start()

    def _drain(self, name, f):
        with f:
            self._outs[name] = f.read()

    def finish(self) -> tuple[str, str]:
        """Wait for the process and both readers; (stdout, stderr)."""
        self.proc.wait()
        for t in self._threads:
            t.join()
        return self._outs.get("stdout", ""), self._outs.get("stderr", "")


def cpu_window_main(out: str, secs: str, *cmd: str) -> int:
    """Run cmd; its CPU in the last `secs` seconds before it exited: the
    total from getrusage minus a /proc sample taken `secs` before the end
    (start-up — login, buffer allocation and registration — left out, as
    rlun bench and fio leave theirs out)."""
    window = float(secs)
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.monotonic()
    child = Drained(cmd)
    p = child.proc
    samples: list[tuple[float, float]] = []
    while p.poll() is None:
        c = _proc_cpu(p.pid, hz)
        if c is not None:
            samples.append((time.monotonic(), c))
        time.sleep(0.2)
    stdout, stderr = child.finish()
    end = time.monotonic()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru.ru_utime + ru.ru_stime
    before = cpu_at(samples, end - window)
    doc = {"rc": p.returncode, "stdout": stdout[-3000:],
           "stderr": stderr[-2000:], "cpu_seconds": total,
           "cpu_seconds_window": max(total - before, 0.0), "wall_seconds": end - t0}
    Path(out).write_text(json.dumps(doc))
    return p.returncode


if __name__ == "__main__":
    if len(sys.argv) >= 7 and sys.argv[1] == "iser":
        sys.exit(iser_main(*sys.argv[2:7]))
    if len(sys.argv) >= 5 and sys.argv[1] == "cpu-window":
        sys.exit(cpu_window_main(sys.argv[2], sys.argv[3], *sys.argv[4:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
