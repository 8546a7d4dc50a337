#!/usr/bin/env python3
"""rlun's VM lab: the kernel paths (soft-RoCE, LIO iSCSI/iSER target, kernel
nbd, open-iscsi) that the host kernel lacks, in one small VM per run.

    tests/lab/lab.py                      install, boot once, run the default scenarios
    tests/lab/lab.py rlun-chap            one scenario alone (fast loop)
    tests/lab/lab.py --compare            also the rlun-vs-kernel comparison
    tests/lab/lab.py --list               list the scenarios

The VM is virtme-ng (`vng --disable-kvm`) booting Debian's kernel with the
host's files visible read-only; results come back through a --rwdir
directory, .lab-out/<run>/ (.lab-out/latest points at the newest). Each
scenario ends PASS, FAIL or SKIP (a feature that has not landed, never counted
as passed). The exit status is non-zero when a scenario failed or the VM did
not boot.

Environment: RLUN_LAB_SELFTEST_FAIL=1 adds a scenario that must fail;
RLUN_LAB_VERBOSE=1 shows the kernel console; RLUN_LAB_NO_INSTALL=1 skips the
install step; RLUN_LAB_TIMEOUT_SCALE=N multiplies every timeout (slow machines);
RLUN_LAB_MAX_SECONDS caps one VM run (default 3000); RLUN_LAB_RLUN picks the
rlun binary; RLUN_LAB_CACHE is where the virtme-ng venv lives; RLUN_LAB_KERNEL
(or --kernel) picks the kernel: 6.12 from bookworm-backports by default, 6.1
for Debian 12's own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LAB_DIR = Path(__file__).resolve().parent
REPO = LAB_DIR.parent.parent
SCENARIO_DIR = LAB_DIR / "scenarios"
GUEST_RUN = LAB_DIR / "guest" / "run.sh"

BOOT_TIMEOUT_S = 420  # software emulation on a busy 2-core machine: ~60 s usually
SELFTEST_SCENARIO = "selftest-fail"
COMPARE_SCENARIO = "compare"
# --compare runs these too (each skips itself where it cannot run).
COMPARE_EXTRA = ("compare-ublk",)

STATUSES = ("PASS", "FAIL", "SKIP")
KEEP_RUNS = 10  # result directories kept under .lab-out/


# --- scenarios ----------------------------------------------------------------


@dataclasses.dataclass
class Scenario:
    name: str
    path: Path
    about: str
    default: bool
    timeout: int


def parse_scenario(path: Path) -> Scenario:
    """Read NN-name.sh and its `# key: value` header lines."""
    m = re.fullmatch(r"\d+-(.+)\.sh", path.name)
    if not m:
        raise ValueError(f"scenario file {path.name} is not named NN-name.sh")
    headers: dict[str, str] = {}
    for line in path.read_text().splitlines():
        hm = re.match(r"#\s*(about|default|timeout):\s*(.*)", line)
        if hm and hm.group(1) not in headers:
            headers[hm.group(1)] = hm.group(2).strip()
    return Scenario(
        name=m.group(1),
        path=path,
        about=headers.get("about", ""),
        default=headers.get("default", "no") == "yes",
        timeout=int(headers.get("timeout", "300")),
    )


def all_scenarios(directory: Path = SCENARIO_DIR) -> list[Scenario]:
    return [parse_scenario(p) for p in sorted(directory.glob("[0-9]*-*.sh"))]


def select(
    scenarios: list[Scenario], names: list[str], compare: bool, selftest_fail: bool
) -> list[Scenario]:
    """The scenarios of one run, in file order: the named ones, or the defaults."""
    by_name = {s.name: s for s in scenarios}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(
            f"lab: unknown scenario(s) {', '.join(unknown)}; known: {', '.join(by_name)}"
        )
    wanted = set(names) if names else {s.name for s in scenarios if s.default}
    if compare:
        wanted.add(COMPARE_SCENARIO)
        wanted.update(n for n in COMPARE_EXTRA if n in by_name)
    if selftest_fail:
        wanted.add(SELFTEST_SCENARIO)
    return [s for s in scenarios if s.name in wanted]


# --- results ----------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    name: str
    status: str
    seconds: int
    reason: str


def read_results(out: Path, names: list[str], guest_note: str) -> list[Result]:
    """Each scenario's results/NAME.txt ("STATUS SECONDS" + reason line).

    A scenario without a result file failed: the VM died, did not boot or was
    stopped before it ended (guest_note says which)."""
    results = []
    for name in names:
        f = out / "results" / f"{name}.txt"
        try:
            lines = f.read_text().splitlines()
            status, secs = lines[0].split()
            reason = lines[1] if len(lines) > 1 else ""
            if status not in STATUSES:
                raise ValueError(status)
            results.append(Result(name, status, int(secs), reason))
        except (OSError, ValueError, IndexError):
            results.append(Result(name, "FAIL", 0, f"no result: {guest_note}"))
    return results


def summary(results: list[Result], width: int = 100) -> str:
    """The table printed at the end of a run."""
    name_w = max([len("scenario")] + [len(r.name) for r in results])
    lines = [f"{'scenario':<{name_w}}  result  secs  reason", "-" * min(width, name_w + 60)]
    for r in results:
        reason = r.reason if len(r.reason) <= 400 else r.reason[:397] + "..."
        lines.append(f"{r.name:<{name_w}}  {r.status:<6}  {r.seconds:>4}  {reason}")
    return "\n".join(lines)


def counts_line(results: list[Result]) -> str:
    n = {s: sum(1 for r in results if r.status == s) for s in STATUSES}
    return f"lab: {n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped"


def exit_code(results: list[Result], booted: bool) -> int:
    return 0 if booted and results and all(r.status != "FAIL" for r in results) else 1


def compare_table(doc: dict) -> str:
    rows = doc.get("rows", [])
    out = [
        "Comparison: " + doc.get("what", "the same fio job on rlun and on the kernel initiator"),
        f"  {doc.get('note', '')}; {doc.get('seconds_per_run', '?')} s per run; rlun = {doc.get('rlun', '?')}",
        f"  {'case':<18} {'rlun IOPS':>10} {'rlun MB/s':>10} {'kernel IOPS':>12} {'kernel MB/s':>12}"
        f" {'rlun/kernel':>12} {'bench/kernel':>13}",
    ]

    def fmt(v):
        return f"{v:.2f}" if v is not None else "-"

    for r in rows:
        out.append(
            f"  {r['case']:<18} {r['fio_rlun_iops']:>10.0f} {r['fio_rlun_mb_s']:>10.1f} "
            f"{r['kernel_iops']:>12.0f} {r['kernel_mb_s']:>12.1f} "
            f"{fmt(r.get('ratio')):>12} {fmt(r.get('rlun_bench_ratio')):>13}"
        )
    return "\n".join(out)


# --- host side: install, kernel, binary ---------------------------------------------


def say(msg: str) -> None:
    print(msg, flush=True)


def install() -> Path:
    """Run install.sh; return the vng path it reports."""
    try:
        proc = subprocess.run(
            [str(LAB_DIR / "install.sh")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            timeout=1200,
        )
    except subprocess.TimeoutExpired:
        raise SystemExit("lab: install timed out after 1200s (tests/lab/install.sh)") from None
    if proc.returncode != 0:
        raise SystemExit(f"lab: install failed (tests/lab/install.sh exit {proc.returncode})")
    for line in proc.stdout.splitlines():
        if line.startswith("vng="):
            return Path(line[4:])
    raise SystemExit("lab: tests/lab/install.sh did not report vng")


# Lines of a failed scenario's log repeated in the summary.
FAIL_TAIL_LINES = 30


def default_vng() -> Path:
    cache = Path(os.environ.get("RLUN_LAB_CACHE", "/var/cache/rlun-lab"))
    return cache / "venv" / "bin" / "vng"


def kernel_key(version: str) -> tuple[int, ...]:
    """Sort key of a kernel release such as 6.12.95+deb12-amd64 or 6.1.0-57-amd64."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def find_kernel(
    series: str | None = None, boot: Path = Path("/boot"), modules: Path = Path("/lib/modules")
) -> tuple[Path, str]:
    """The newest Debian kernel whose modules include soft-RoCE and LIO; with
    `series` (such as "6.1" or "6.12"), the newest of that series."""
    candidates = []
    for img in boot.glob("vmlinuz-*"):
        version = img.name[len("vmlinuz-") :]
        if series and not re.match(re.escape(series) + r"[.+-]", version):
            continue
        mods = modules / version / "kernel" / "drivers"
        if (mods / "infiniband" / "sw" / "rxe").is_dir() and (mods / "target").is_dir():
            candidates.append((kernel_key(version), img, version))
    if not candidates:
        which = f"of the {series} series " if series else ""
        raise SystemExit(
            f"lab: no kernel {which}in /boot with rdma_rxe and LIO modules; "
            "tests/lab/install.sh installs 6.12 (bookworm-backports) and 6.1 (bookworm)"
        )
    _, img, version = max(candidates)
    return img, version


def pick_kernel(choice: str | None) -> tuple[Path, str]:
    """--kernel / RLUN_LAB_KERNEL: a kernel image's path, or a series such as
    6.1 (Debian 12's own) or 6.12 (bookworm-backports, the default: newest)."""
    if choice and ("/" in choice or Path(choice).is_file()):
        return Path(choice), Path(choice).name.removeprefix("vmlinuz-")
    return find_kernel(choice or None)


def find_rlun(explicit: str | None, prefer_release: bool) -> Path:
    """The rlun binary the VM runs (the VM sees the host's files).

    Default: target/debug/rlun, brought up to date with `cargo build` (a no-op
    after `cargo test`); with prefer_release (the comparison), an existing
    target/release/rlun."""
    if explicit:
        p = Path(explicit).resolve()
        if not os.access(p, os.X_OK):
            raise SystemExit(f"lab: rlun binary {p} is not executable")
        return p
    release = REPO / "target" / "release" / "rlun"
    if prefer_release and release.exists():
        return release
    if prefer_release:
        say(
            "lab: note: no target/release/rlun, comparing with the debug build "
            "(cargo build --release for figures worth quoting)"
        )
    say("lab: cargo build --bin rlun")
    try:
        subprocess.run(
            ["cargo", "build", "--quiet", "--bin", "rlun"],
            cwd=REPO,
            check=True,
            stdin=subprocess.DEVNULL,
            timeout=3600,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        raise SystemExit(f"lab: cargo build --bin rlun failed: {e}") from None
    return REPO / "target" / "debug" / "rlun"


# --- the VM ---------------------------------------------------------------------


class Vm:
    """One vng process (and its qemu), its console log and the LAB- protocol."""

    def __init__(self, argv: list[str], console: Path, verbose: bool, t0: float):
        self.t0 = t0
        self.verbose = verbose
        self.up_at: float | None = None
        self.done = False
        self.fatal: str | None = None
        self.current: str | None = None
        self.console_path = console
        self.console = console.open("w")
        env = dict(os.environ)
        env["PATH"] = f"{Path(argv[0]).parent}:{env.get('PATH', '')}"
        # vng needs a standard input (it crashes when it is closed), and gets
        # its own process group so a timeout can stop qemu with it.
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            now = self.elapsed()
            self.console.write(f"[{now:7.1f}] {line}\n")
            self.console.flush()
            m = re.search(r"LAB-(GUEST-UP|BEGIN|END|GUEST-DONE|FATAL)\b ?(.*)", line)
            if not m:
                if self.verbose:
                    say(f"  | {line}")
                continue
            kind, rest = m.groups()
            if kind == "GUEST-UP":
                self.up_at = now
                say(f"[{now:5.0f}s] VM up ({rest}); boot took {now:.0f}s")
            elif kind == "BEGIN":
                self.current = rest.strip()
                say(f"[{now:5.0f}s] {self.current} ...")
            elif kind == "END":
                parts = rest.split(" ", 3)
                name, status, secs = parts[0], parts[1], parts[2]
                reason = parts[3] if len(parts) > 3 else ""
                self.current = None
                say(f"[{now:5.0f}s] {status} {name} ({secs}s){': ' + reason if reason else ''}")
            elif kind == "GUEST-DONE":
                self.done = True
            elif kind == "FATAL":
                self.fatal = rest
                say(f"[{now:5.0f}s] guest: {rest}")

    def wait(self, boot_timeout: float, total_timeout: float) -> str | None:
        """Wait for the VM to finish; return why it was stopped, or None."""
        while True:
            try:
                self.proc.wait(timeout=1)
                self.reader.join(timeout=10)
                return None
            except subprocess.TimeoutExpired:
                pass
            t = self.elapsed()
            if self.up_at is None and t > boot_timeout:
                self.kill()
                return f"no sign of the guest after {boot_timeout:.0f}s (boot timeout)"
            if t > total_timeout:
                self.kill()
                where = f" during scenario {self.current}" if self.current else ""
                return f"the lab run exceeded {total_timeout:.0f}s{where} and was stopped"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        self.reader.join(timeout=10)

    def close(self) -> None:
        self.console.close()


def tail(path: Path, n: int) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no console output)"
    return "\n".join(lines[-n:]) if lines else "(no console output)"


# --- main -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Boot the VM lab once and run scenarios in it.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    ap.add_argument("scenarios", nargs="*", help="scenario names (default: the default set)")
    ap.add_argument("--list", action="store_true", help="list scenarios and exit")
    ap.add_argument(
        "--compare",
        action="store_true",
        help="add the comparison: rlun bench vs fio on the kernel initiator, same LUN",
    )
    ap.add_argument("--compare-seconds", type=int, default=10, help="seconds per comparison run")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="LAB_K=V",
        help="pass a variable to the scenarios (e.g. LAB_PROFILE_BASE=/path/to/rlun for iser-profile)",
    )
    ap.add_argument("--rlun", help="rlun binary (default target/debug/rlun; release with --compare)")
    ap.add_argument(
        "--kernel",
        help="kernel to boot: an image's path, or a series such as 6.1 (Debian 12's own) or "
        "6.12 (default: the newest Debian one in /boot, 6.12 from bookworm-backports); "
        "also RLUN_LAB_KERNEL",
    )
    ap.add_argument("--out", help="results directory (default .lab-out/<timestamp>)")
    ap.add_argument("--memory", default="3G")
    ap.add_argument("--cpus", default="2")
    ap.add_argument("--boot-timeout", type=float, default=BOOT_TIMEOUT_S)
    ap.add_argument("--no-install", action="store_true", help="do not run tests/lab/install.sh")
    ap.add_argument("--verbose", action="store_true", help="show the kernel console")
    args = ap.parse_args(argv)

    scenarios = all_scenarios()
    if args.list:
        for s in scenarios:
            flag = "default" if s.default else "on request"
            say(f"{s.name:<28} {flag:<10} {s.about}")
        return 0

    selftest = os.environ.get("RLUN_LAB_SELFTEST_FAIL") == "1"
    chosen = select(scenarios, args.scenarios, args.compare, selftest)
    names = [s.name for s in chosen]
    verbose = args.verbose or os.environ.get("RLUN_LAB_VERBOSE") == "1"
    scale = max(1, int(os.environ.get("RLUN_LAB_TIMEOUT_SCALE", "1")))
    t_start = time.monotonic()

    # 1. install (quick when done)
    if args.no_install or os.environ.get("RLUN_LAB_NO_INSTALL") == "1":
        vng = default_vng()
        install_s = 0.0
    else:
        say("lab: install (tests/lab/install.sh)")
        vng = install()
        install_s = time.monotonic() - t_start
    if not os.access(vng, os.X_OK):
        raise SystemExit(f"lab: {vng} not found: run tests/lab/install.sh")

    kernel, kver = pick_kernel(args.kernel or os.environ.get("RLUN_LAB_KERNEL"))
    rlun = find_rlun(args.rlun or os.environ.get("RLUN_LAB_RLUN"), prefer_release=args.compare)

    # 2. results directory, shared read-write with the guest
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out).resolve() if args.out else REPO / ".lab-out" / stamp
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if not args.out:
        # Keep the newest runs only (each is a few hundred KB of logs).
        runs = sorted(p for p in (REPO / ".lab-out").glob("2*-*") if p.is_dir() and p != out)
        for old in runs[:-KEEP_RUNS]:
            shutil.rmtree(old, ignore_errors=True)
        latest = REPO / ".lab-out" / "latest"
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(stamp)

    # 3. boot and run
    guest_cmd = [
        "bash", str(GUEST_RUN), "--out", str(out), "--rlun", str(rlun),
        "--scale", str(scale), "--set", f"LAB_COMPARE_SECONDS={args.compare_seconds}",
        *(a for kv in args.set for a in ("--set", kv)),
        *names,
    ]  # fmt: skip
    vng_argv = [
        str(vng), "--disable-kvm", "--run", str(kernel),
        "--memory", args.memory, "--cpus", str(args.cpus),
        "--rwdir", str(out), "--cwd", str(REPO),
        *(["--verbose"] if verbose else []),
        "--exec", shlex.join(guest_cmd),
    ]  # fmt: skip
    # A backstop only: every scenario has its own timeout inside the VM.
    total_timeout = min(
        args.boot_timeout + scale * sum(s.timeout + 90 for s in chosen) + 120,
        float(os.environ.get("RLUN_LAB_MAX_SECONDS", "3000")) * scale,
    )
    say(f"lab: kernel {kver}, rlun {rlun}, results in {out}")
    say(f"lab: scenarios: {' '.join(names)}")
    say(f"lab: booting the VM (software emulation, about a minute) ...")
    boot_start = time.monotonic()
    vm = Vm(vng_argv, out / "console.log", verbose, boot_start)
    try:
        stopped = vm.wait(args.boot_timeout, total_timeout)
    except KeyboardInterrupt:
        vm.kill()
        raise
    finally:
        vm.close()
    vm_s = time.monotonic() - boot_start
    rc = vm.proc.returncode

    booted = vm.up_at is not None
    if not booted:
        why = stopped or f"vng exited with code {rc} before the guest script started"
        say("")
        say(f"lab: THE VM DID NOT BOOT: {why}")
        say(f"lab: command: {shlex.join(vng_argv)}")
        say(f"lab: last lines of {out / 'console.log'}:")
        say(tail(out / "console.log", 30))
        say(
            "lab: hints: KVM is not used on purpose (--disable-kvm: it hangs here); "
            "check that the kernel image is readable, busybox-static is installed "
            "(tests/lab/install.sh), and rerun with RLUN_LAB_VERBOSE=1 to see the kernel console"
        )
        note = f"the VM did not boot ({why})"
    elif stopped:
        note = stopped
    elif vm.fatal:
        note = f"the guest gave up: {vm.fatal}"
    elif not vm.done:
        note = f"the VM stopped before the scenarios finished (vng exit {rc}; see console.log)"
    else:
        note = "scenario did not report"
    results = read_results(out, names, note)

    say("")
    say(summary(results))
    say("")
    boot_s = vm.up_at
    total_s = time.monotonic() - t_start
    timing = {
        "install_s": round(install_s, 1),
        "boot_s": round(boot_s, 1) if boot_s is not None else None,
        "vm_s": round(vm_s, 1),
        "total_s": round(total_s, 1),
        "kernel": kver,
        "rlun": str(rlun),
        "results": [dataclasses.asdict(r) for r in results],
    }
    (out / "summary.json").write_text(json.dumps(timing, indent=1))
    boot_txt = f"{boot_s:.0f}s" if boot_s is not None else "failed"
    say(
        f"lab: install {install_s:.0f}s, boot {boot_txt}, VM total {vm_s:.0f}s, "
        f"lab total {total_s:.0f}s"
    )
    compare_file = out / "compare.json"
    if compare_file.exists():
        say("")
        say(compare_table(json.loads(compare_file.read_text())))
    # Further comparison blocks (compare-NAME.json) carry their own table.
    for extra in sorted(out.glob("compare-*.json")):
        table = json.loads(extra.read_text()).get("table")
        if table:
            say("")
            say("\n".join(table))
    for r in results:
        log = out / "logs" / f"{r.name}.log"
        if r.status == "FAIL" and log.exists():
            # The last lines here too: CI keeps this output, not the logs.
            last = log.read_text(errors="replace").splitlines()[-FAIL_TAIL_LINES:]
            say(f"lab: {r.name} failed; log: {log}; its last {len(last)} lines:")
            for line in last:
                say(f"  | {line}")
    say(f"lab: logs in {out}/logs, console in {out}/console.log")
    say(counts_line(results))
    return exit_code(results, booted)


if __name__ == "__main__":
    sys.exit(main())
