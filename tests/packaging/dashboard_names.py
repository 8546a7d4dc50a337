#!/usr/bin/env python3
"""Check a Grafana dashboard against a live rlun /metrics endpoint.

    dashboard_names.py DASHBOARD.json http://ADDR:PORT/metrics

The dashboard must be valid JSON with panels whose targets have PromQL
expressions; every `rlun_...` name in those expressions must be a sample
name the endpoint serves (rlun_reads_total, rlun_command_duration_seconds_bucket,
...). Prints the names checked; exits 1 on a missing name, on no names at
all, or on anything unreadable.
"""

import json
import re
import sys
import urllib.request

NAME = re.compile(r"\brlun_[a-zA-Z0-9_]+")


def dashboard_names(path):
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    names = set()
    exprs = 0
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if expr:
                exprs += 1
                names.update(NAME.findall(expr))
    return names, exprs


def served_names(url):
    req = urllib.request.Request(url, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read().decode("utf-8")
    names = set()
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    wanted, exprs = dashboard_names(argv[1])
    if not wanted:
        print(f"{argv[1]}: no rlun_ metric in {exprs} expressions", file=sys.stderr)
        return 1
    served = served_names(argv[2])
    missing = sorted(wanted - served)
    print(f"{len(wanted)} names in {exprs} expressions: {' '.join(sorted(wanted))}")
    if missing:
        print(f"not served by {argv[2]}: {' '.join(missing)}", file=sys.stderr)
        print(f"served: {' '.join(sorted(served))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
