#!/usr/bin/env python3
"""Run a unit's command the way systemd runs a Type=notify service and check
its readiness protocol (sd_notify(3)):

    notify.py mount MOUNTPOINT FILE -- COMMAND...
    notify.py nbd SOCKET -- COMMAND...
    notify.py device BEFORE_STOP -- COMMAND...

COMMAND gets NOTIFY_SOCKET pointing at a datagram socket made here. The check:
READY=1 arrives (before COMMAND exits, within --timeout seconds) and at that
moment the service is usable — MOUNTPOINT is a mount point and FILE reads
(mount), or SOCKET accepts a connection that opens with the NBD greeting
(nbd), or the device that READY=1's STATUS= names ("attached /dev/nbdN")
has a size and reads with O_DIRECT (device; then the program BEFORE_STOP runs
with DEV and MAINPID in its environment, as systemd runs ExecStop, and must
succeed); then SIGTERM brings STOPPING=1, and COMMAND exits 0 (and the mount
is gone). Prints one "ok   - ..." or "FAIL - ..." line per check and every
message received; exits 1 when a check failed.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

TIMEOUT = 60.0


def usable(kind, args, status):
    """Why the service is not usable yet (None when it is)."""
    if kind == "device":
        dev = status.removeprefix("attached ")
        if not dev.startswith("/dev/nbd"):
            return f"STATUS={status!r} names no /dev/nbdN"
        try:
            with open(f"/sys/block/{dev[5:]}/size") as f:
                if int(f.read()) == 0:
                    return f"{dev} has size 0"
        except OSError as e:
            return f"{dev}: {e}"
        r = subprocess.run(
            ["dd", f"if={dev}", "of=/dev/null", "bs=4096", "count=1", "iflag=direct", "status=none"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if r.returncode != 0:
            return f"{dev}: dd: {r.stderr.strip()}"
        return None
    if kind == "mount":
        mountpoint, path = args
        if not os.path.ismount(mountpoint):
            return f"{mountpoint} is not a mount point"
        try:
            with open(path, "rb") as f:
                if len(f.read(4096)) != 4096:
                    return f"{path}: short read"
        except OSError as e:
            return f"{path}: {e}"
        return None
    (path,) = args
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(path)
        greeting = s.recv(8)
    except OSError as e:
        return f"{path}: {e}"
    finally:
        s.close()
    if greeting != b"NBDMAGIC":
        return f"{path}: greeting {greeting!r}, not NBDMAGIC"
    return None


def main():
    argv = sys.argv[1:]
    if "--" not in argv or not argv or argv[0] not in ("mount", "nbd", "device"):
        print(__doc__, file=sys.stderr)
        return 2
    sep = argv.index("--")
    kind, args, command = argv[0], argv[1:sep], argv[sep + 1 :]
    if len(args) != (2 if kind == "mount" else 1) or not command:
        print(__doc__, file=sys.stderr)
        return 2

    failed = 0

    def check(ok, what):
        nonlocal failed
        print(("ok   - " if ok else "FAIL - ") + what, flush=True)
        failed += 0 if ok else 1

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        env = dict(os.environ, NOTIFY_SOCKET=path)
        log = open(os.path.join(tmp, "log"), "w+")
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=log)

        def receive(want, deadline):
            """Messages until one has the line WANT; None when COMMAND exits
            first or time runs out."""
            while time.monotonic() < deadline:
                sock.settimeout(0.2)
                try:
                    msg = sock.recv(4096).decode(errors="replace")
                except socket.timeout:
                    if proc.poll() is not None:
                        return None
                    continue
                print("     | " + msg.replace("\n", " "), flush=True)
                if want in msg.split("\n"):
                    return msg
            return None

        try:
            ready = receive("READY=1", time.monotonic() + TIMEOUT)
            check(ready is not None, f"READY=1 from {command[0]} {command[1]}")
            if ready is not None:
                fields = dict(line.split("=", 1) for line in ready.split("\n") if "=" in line)
                status = fields.get("STATUS", "")
                why = usable(kind, args, status)
                check(why is None, "usable when READY=1 arrived" + (f" ({why})" if why else ""))
                check(fields.get("MAINPID") == str(proc.pid), f"READY=1 names MAINPID={proc.pid}")
                if kind == "device" and why is None:
                    env = dict(os.environ, DEV=status.removeprefix("attached "), MAINPID=str(proc.pid))
                    r = subprocess.run([args[0]], env=env, capture_output=True, text=True, timeout=TIMEOUT)
                    for line in (r.stdout + r.stderr).splitlines():
                        print("     | " + line)
                    check(r.returncode == 0, f"{args[0]} (before the stop) exits 0 (exit {r.returncode})")
            proc.send_signal(signal.SIGTERM)
            stopping = receive("STOPPING=1", time.monotonic() + TIMEOUT)
            check(stopping is not None, "STOPPING=1 after SIGTERM")
            try:
                rc = proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            check(rc == 0, f"exits 0 after SIGTERM (exit {rc})")
            if kind == "mount":
                check(not os.path.ismount(args[0]), f"{args[0]} unmounted on exit")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if failed:
                log.seek(0)
                for line in log.read().splitlines()[-20:]:
                    print("     | " + line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
