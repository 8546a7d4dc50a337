"""Unit tests of the lab runner's bookkeeping (no VM): scenario headers and
selection, reading results, the summary and the exit status.

    python3 -m unittest discover -s tests/lab -p 'test_*.py'
"""

import json
import sys
import tempfile
import unittest
from pathlib import Path

import compare_rounds as cr
import guest_cpu as gc
import lab


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


class ScenarioHeaders(unittest.TestCase):
    def test_header_lines_give_name_about_default_and_timeout(self):
        with tempfile.TemporaryDirectory() as d:
            p = write(
                Path(d) / "42-some-thing.sh",
                "# about: does a thing\n# default: yes\n# timeout: 99\nscenario() { :; }\n",
            )
            s = lab.parse_scenario(p)
        self.assertEqual(s.name, "some-thing")
        self.assertEqual(s.about, "does a thing")
        self.assertTrue(s.default)
        self.assertEqual(s.timeout, 99)

    def test_file_not_named_nn_name_is_rejected(self):
        with self.assertRaises(ValueError):
            lab.parse_scenario(Path("/nonexistent/scenario.sh"))

    def test_every_shipped_scenario_parses_and_has_an_about_line(self):
        scenarios = lab.all_scenarios()
        names = [s.name for s in scenarios]
        self.assertEqual(len(names), len(set(names)), "scenario names must be unique")
        for s in scenarios:
            self.assertTrue(s.about, f"{s.path.name} has no '# about:' line")
        self.assertIn(lab.SELFTEST_SCENARIO, names)
        self.assertIn(lab.COMPARE_SCENARIO, names)


class Selection(unittest.TestCase):
    def setUp(self):
        mk = lambda name, default: lab.Scenario(name, Path(name), "x", default, 10)
        self.all = [
            mk("a", True),
            mk("b", False),
            mk(lab.COMPARE_SCENARIO, False),
            mk("compare-ublk", False),
            mk(lab.SELFTEST_SCENARIO, False),
        ]

    def names(self, chosen):
        return [s.name for s in chosen]

    def test_no_names_selects_the_defaults(self):
        self.assertEqual(self.names(lab.select(self.all, [], False, False)), ["a"])

    def test_selftest_fail_env_adds_the_failing_scenario(self):
        chosen = lab.select(self.all, [], False, True)
        self.assertEqual(self.names(chosen), ["a", lab.SELFTEST_SCENARIO])

    def test_compare_adds_the_comparison(self):
        chosen = lab.select(self.all, ["b"], True, False)
        self.assertEqual(self.names(chosen), ["b", lab.COMPARE_SCENARIO, "compare-ublk"])

    def test_unknown_name_stops_with_the_known_ones(self):
        with self.assertRaises(SystemExit) as cm:
            lab.select(self.all, ["nope"], False, False)
        self.assertIn("nope", str(cm.exception))


class Kernels(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        self.boot, self.modules = root / "boot", root / "modules"
        self.boot.mkdir()
        for version, complete in [
            ("6.1.0-57-amd64", True),
            ("6.12.95+deb12-amd64", True),
            ("6.12.9+deb12-amd64", True),
            ("6.13.1-amd64", False),  # no LIO or rxe modules: never picked
        ]:
            (self.boot / f"vmlinuz-{version}").write_bytes(b"")
            drivers = self.modules / version / "kernel" / "drivers"
            (drivers / "infiniband" / "sw" / "rxe").mkdir(parents=True)
            if complete:
                (drivers / "target").mkdir()

    def tearDown(self):
        self.tmp.cleanup()

    def find(self, series=None):
        return lab.find_kernel(series, self.boot, self.modules)[1]

    def test_the_newest_complete_kernel_by_version_not_by_file_date(self):
        self.assertEqual(self.find(), "6.12.95+deb12-amd64")

    def test_a_series_picks_its_newest_and_6_1_is_not_6_12(self):
        self.assertEqual(self.find("6.1"), "6.1.0-57-amd64")
        self.assertEqual(self.find("6.12"), "6.12.95+deb12-amd64")

    def test_a_series_without_a_kernel_stops_with_the_reason(self):
        with self.assertRaises(SystemExit) as e:
            self.find("6.13")
        self.assertIn("6.13 series", str(e.exception))

    def test_a_path_is_taken_as_is(self):
        img, ver = lab.pick_kernel(str(self.boot / "vmlinuz-6.1.0-57-amd64"))
        self.assertEqual((img.name, ver), ("vmlinuz-6.1.0-57-amd64", "6.1.0-57-amd64"))


class Results(unittest.TestCase):
    def test_results_are_read_and_a_missing_one_is_a_failure(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            write(out / "results" / "ok.txt", "PASS 12\n\n")
            write(out / "results" / "later.txt", "SKIP 1\nfeature not landed\n")
            write(out / "results" / "bad.txt", "FAIL 3\nLUN 0: data differs\n")
            results = lab.read_results(out, ["ok", "later", "bad", "lost"], "the VM died")
        by = {r.name: r for r in results}
        self.assertEqual((by["ok"].status, by["ok"].seconds), ("PASS", 12))
        self.assertEqual((by["later"].status, by["later"].reason), ("SKIP", "feature not landed"))
        self.assertEqual(by["bad"].reason, "LUN 0: data differs")
        self.assertEqual(by["lost"].status, "FAIL")
        self.assertIn("the VM died", by["lost"].reason)

    def test_garbled_result_file_counts_as_failure(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            write(out / "results" / "x.txt", "MAYBE 1\n")
            (r,) = lab.read_results(out, ["x"], "n/a")
        self.assertEqual(r.status, "FAIL")

    def test_any_failure_or_no_boot_makes_the_run_fail(self):
        passed = lab.Result("a", "PASS", 1, "")
        skipped = lab.Result("b", "SKIP", 1, "not landed")
        failed = lab.Result("c", "FAIL", 1, "broken")
        self.assertEqual(lab.exit_code([passed, skipped], booted=True), 0)
        self.assertEqual(lab.exit_code([passed, failed], booted=True), 1)
        self.assertEqual(lab.exit_code([passed], booted=False), 1)
        self.assertEqual(lab.exit_code([], booted=True), 1)

    def test_skips_are_never_counted_as_passed(self):
        results = [lab.Result("a", "PASS", 1, ""), lab.Result("b", "SKIP", 1, "later")]
        self.assertEqual(lab.counts_line(results), "lab: 1 passed, 0 failed, 1 skipped")

    def test_summary_shows_status_seconds_and_reason(self):
        table = lab.summary([lab.Result("rlun-chap", "FAIL", 29, "wrong secret accepted")])
        self.assertRegex(table, r"rlun-chap\s+FAIL\s+29\s+wrong secret accepted")

    def test_compare_table_prints_the_ratio(self):
        doc = {
            "what": "the same fio job on rlun and on the kernel",
            "note": "ratios only",
            "seconds_per_run": 10,
            "rlun": "target/release/rlun",
            "rows": [
                {
                    "case": "randread 4k qd32",
                    "fio_rlun_iops": 500.0,
                    "fio_rlun_mb_s": 2.0,
                    "kernel_iops": 1000.0,
                    "kernel_mb_s": 4.1,
                    "ratio": 0.5,
                    "rlun_bench_iops": 700.0,
                    "rlun_bench_mb_s": 2.9,
                    "rlun_bench_ratio": 0.7,
                }
            ],
        }
        table = lab.compare_table(doc)
        self.assertIn("the same fio job", table)
        self.assertRegex(table, r"randread 4k qd32\s+500\s+2\.0\s+1000\s+4\.1\s+0\.50\s+0\.70")


class CompareRounds(unittest.TestCase):
    def test_median_of_odd_and_even_counts_and_of_nothing(self):
        self.assertEqual(cr.median([3.0, 1.0, 2.0]), 2.0)
        self.assertEqual(cr.median([4.0, 1.0, 3.0, 2.0]), 2.5)
        self.assertIsNone(cr.median([]))

    def test_summary_leaves_failed_rounds_out_and_keeps_their_errors(self):
        s = cr.summarize([{"iops": 100.0}, {"error": "login failed"}, {"iops": 300.0}, {"iops": 120.0}],
                         ("iops",))
        self.assertEqual(s["iops"], 120.0)
        self.assertEqual((s["iops_min"], s["iops_max"]), (100.0, 300.0))
        self.assertEqual((s["ok"], s["rounds"]), (3, 4))
        self.assertEqual(s["errors"], ["login failed"])

    def _write_round(self, work, r, name, bs, rlun_iser, rlun_tcp, perf, fio_iops):
        d = Path(work) / f"r{r}"
        for tr, (iops, cpu) in (("iser", rlun_iser), ("tcp", rlun_tcp)):
            write(d / f"rlun-{tr}-{name}.json", json.dumps(
                {"iops": iops, "mb_per_s": iops * bs / 1e6, "cpu_s_per_gib": cpu, "copied_bytes": 0}))
        iops, window = perf
        write(d / f"perf-{name}.json", json.dumps(
            {"rc": 0, "stdout": f"iops average 1 (0 MB/s)\niops average {iops} (1 MB/s)\n",
             "stderr": "", "cpu_seconds": 99.0, "cpu_seconds_window": window}))
        rt = 5000
        write(d / f"fio-iser-{name}.json", json.dumps({"jobs": [{
            "usr_cpu": 10.0, "sys_cpu": 30.0,
            "read": {"iops": fio_iops, "bw_bytes": fio_iops * bs, "runtime": rt,
                     "io_bytes": int(fio_iops * bs * rt / 1000)}}]}))

    def test_rows_and_ratios_come_from_medians_over_alternating_rounds(self):
        with tempfile.TemporaryDirectory() as w:
            # One noisy round (2) per contender must not decide the ratio.
            for r, (ri, li) in enumerate(((100, 110), (30, 200), (120, 100)), start=1):
                self._write_round(w, r, "read128k", 131072, (ri, 10.0 * r), (90, 30.0), (li, 1.0), 80)
                self._write_round(w, r, "randread4k", 4096, (500, 100.0), (400, 200.0), (450, 2.0), 300)
            rows = cr.iser_rows(Path(w), 3, 5.0)
            ratios = cr.iser_ratios(rows)
            table = cr.iser_table(rows, ratios, 5.0, 3)
        row = next(r for r in rows if r["case"] == "seq read 128k qd32" and r["who"] == cr.RLUN_ISER)
        self.assertEqual((row["iops"], row["iops_min"], row["iops_max"]), (100, 30, 120))
        self.assertEqual(row["cpu_s_per_gib"], 20.0)
        lib = next(r for r in rows if r["case"] == "seq read 128k qd32" and r["who"] == cr.LIBISCSI)
        self.assertEqual(lib["iops"], 110.0, "the last 'iops average' of each run, median over rounds")
        # CPU of the I/O window (1 s) per GiB moved in 5 s at 110 IOPS of 128 KiB.
        self.assertAlmostEqual(lib["cpu_s_per_gib"], 1.0 / (110 * 131072 * 5 / (1 << 30)))
        fio = next(r for r in rows if r["case"] == "randread 4k qd32" and r["who"] == cr.KERNEL)
        self.assertAlmostEqual(fio["cpu_s_per_gib"], 0.4 * 5 / (300 * 4096 * 5 / (1 << 30)), places=6)
        q = ratios["seq read 128k qd32"]
        self.assertAlmostEqual(q["rlun_iser_over_libiscsi_iops"], 100 / 110)
        self.assertAlmostEqual(q["rlun_iser_over_rlun_tcp_cpu_per_gib"], 20.0 / 30.0)
        self.assertRegex("\n".join(table), r"seq read 128k qd32\s+rlun bench iSER\s+100\s+30-120\s+")
        self.assertIn("rlun-iSER/libiscsi-iSER throughput 0.91 (goal >= 1)", "\n".join(table))
        self.assertIn("3/3", table[2])

    def test_ticks_seen_is_the_least_served_vcpus_share_of_the_wall_time(self):
        before = "t 100.0\ncpu  9 9 9 9 9 9 9 9 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 5 0 0 0 0 0 0 0 0 0\n"
        # 2 s at HZ 100: cpu0 accounted 200 ticks (all of it), cpu1 100 (half).
        after = "t 102.0\ncpu  9 9 9 9 9 9 9 9 0 0\ncpu0 50 0 50 100 0 0 0 0 0 0\ncpu1 5 0 20 60 0 0 20 0 0 0\n"
        self.assertAlmostEqual(cr.ticks_seen(before, after, 100), 0.5)
        self.assertIsNone(cr.ticks_seen("cpu0 1 0 0 0 0 0 0 0\n", after, 100), "no time mark")
        with tempfile.TemporaryDirectory() as w:
            for r in (1, 2):
                self._write_round(w, r, "read128k", 131072, (100, 10.0), (90, 30.0), (110, 1.0), 80)
                self._write_round(w, r, "randread4k", 4096, (500, 100.0), (400, 200.0), (450, 2.0), 300)
            d = Path(w) / "r1"
            write(d / "stat-perf-read128k.0", before)
            write(d / "stat-perf-read128k.1", after)
            rows = cr.iser_rows(Path(w), 2, 5.0, 100)
            table = "\n".join(cr.iser_table(rows, cr.iser_ratios(rows), 5.0, 2))
        lib = next(r for r in rows if r["case"] == "seq read 128k qd32" and r["who"] == cr.LIBISCSI)
        self.assertEqual(lib["ticks_seen_samples"], [0.5], "a round without marks has no figure")
        self.assertRegex(table, r"libiscsi iscsi-perf iSER .* 2/2 +0\.50-0\.50")

    def test_a_contender_failing_every_round_has_no_median_and_no_ratio(self):
        with tempfile.TemporaryDirectory() as w:
            self._write_round(w, 1, "read128k", 131072, (100, 10.0), (90, 30.0), (110, 1.0), 80)
            self._write_round(w, 1, "randread4k", 4096, (500, 100.0), (400, 200.0), (450, 2.0), 300)
            write(Path(w) / "r1" / "perf-read128k.json", json.dumps(
                {"rc": 1, "stdout": "", "stderr": "Failed to register memory\n", "cpu_seconds": 0.1,
                 "cpu_seconds_window": 0.1}))
            rows = cr.iser_rows(Path(w), 1, 5.0)
            ratios = cr.iser_ratios(rows)
            table = "\n".join(cr.iser_table(rows, ratios, 5.0, 1))
        self.assertIsNone(ratios["seq read 128k qd32"]["rlun_iser_over_libiscsi_iops"])
        self.assertIn("(Failed to register memory)", table)
        self.assertIn("throughput - (goal >= 1)", table)

    def test_cpu_window_leaves_out_what_ran_before_the_window(self):
        samples = [(0.0, 0.0), (1.0, 3.0), (2.0, 3.5), (3.0, 4.0)]
        self.assertEqual(cr.cpu_at(samples, 1.5), 3.0)
        self.assertEqual(cr.cpu_at(samples, -1.0), 0.0)
        with tempfile.TemporaryDirectory() as w:
            out = Path(w) / "o.json"
            rc = cr.cpu_window_main(str(out), "0.5", sys.executable, "-c",
                                    "import time\nt=time.process_time()\n"
                                    "while time.process_time()-t<0.8: pass\nprint('iops average 7')")
            doc = json.loads(out.read_text())
        self.assertEqual(rc, 0)
        self.assertIn("iops average 7", doc["stdout"])
        self.assertGreaterEqual(doc["cpu_seconds"], 0.8)
        self.assertLess(doc["cpu_seconds_window"], doc["cpu_seconds"])



class DrainedChild(unittest.TestCase):
    def test_a_child_filling_both_pipes_finishes_and_every_byte_is_returned(self):
        # 1 MiB on each stream: far past a pipe's 64 KiB, so a reader that
        # drained only one, or only at the end, would hang here.
        code = "import sys; sys.stdout.write('o' * 2**20); sys.stderr.write('e' * 2**20); sys.exit(3)"
        child = cr.Drained([sys.executable, "-c", code])
        out, err = child.finish()
        self.assertEqual((len(out), set(out)), (2**20, {"o"}))
        self.assertEqual((len(err), set(err)), (2**20, {"e"}))
        self.assertEqual(child.proc.returncode, 3)


class GuestCpu(unittest.TestCase):
    """guest_cpu.py: the parsing and arithmetic of the `iser-cpu` scenario."""

    def test_task_stat_comm_with_spaces_and_parentheses(self):
        line = ("42 (kworker/0:1 (x) y) S 2 0 0 0 -1 69238880 0 0 0 0 "
                "17 33 0 0 20 0 1 0 100 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0")
        comm, ppid, ut, st, cpu = gc.parse_task_stat(line)
        self.assertEqual((comm, ppid, ut, st, cpu), ("kworker/0:1 (x) y", 2, 17, 33, 1))

    def test_proc_stat_and_softirqs(self):
        stat = gc.parse_proc_stat("cpu  10 0 20 300 1 0 5 0 0 0\ncpu0 4 0 10 150 1 0 5 0 0 0\nintr 1 2\n")
        self.assertEqual(stat["cpu0"]["softirq"], 5)
        self.assertEqual(stat["cpu"]["idle"], 300)
        self.assertNotIn("intr", stat)
        si = gc.parse_softirqs("   CPU0 CPU1\n  NET_RX:  7  9\n TASKLET: 1 2\n")
        self.assertEqual(si, {"NET_RX": [7, 9], "TASKLET": [1, 2]})

    def test_lio_info_gives_the_window_and_what_is_left(self):
        text = ("InitiatorName: iqn.x\n---[iSCSI Session Values]---\n"
                "  CmdSN/WR  :  CmdSN/WC  :  ExpCmdSN  :  MaxCmdSN  :     ITT    :     TTT\n"
                " 0x00000040   0x00000021   0x00001000   0x00001020   0xffffffff   0xffffffff\n")
        info = gc.parse_lio_info(text)
        self.assertEqual(info, {"window": 64, "left": 33, "exp_cmdsn": 0x1000, "max_cmdsn": 0x1020})
        self.assertIsNone(gc.parse_lio_info("no session\n"))
        o = gc.outstanding([info, dict(info, left=32), None])
        self.assertEqual((o["n"], o["min"], o["max"], o["window"]), (2, 31, 32, 64))

    def test_window_marks_the_initiator_tree_and_sums_per_gib(self):
        def snap(t, ticks, cmds, idle):
            return {"t": t,
                    "stat": {"cpu": {"user": 0, "system": 100 + ticks, "idle": idle, "softirq": ticks},
                             "cpu0": {"user": 0, "system": 100 + ticks, "idle": idle, "softirq": ticks}},
                    "softirqs": {"NET_RX": [ticks]},
                    "threads": {"10": {"comm": "rlun", "pid": 10, "ppid": 1, "ticks": ticks, "cpu": 0},
                                "11": {"comm": "fio", "pid": 11, "ppid": 10, "ticks": 2 * ticks, "cpu": 0},
                                "3": {"comm": "ksoftirqd/0", "pid": 3, "ppid": 2, "ticks": ticks, "cpu": 0}},
                    "net": {"lo": {"tx_packets": 130 * cmds, "tx_bytes": 1100 * 130 * cmds}},
                    "rxe": {}, "lu": {"num_cmds": cmds}}
        w = gc.window_deltas(snap(0.0, 0, 0, 0), snap(2.0, 100, 8192, 100), 10, 100)
        self.assertEqual([t["comm"] for t in w["threads"]], ["fio", "rlun", "ksoftirqd/0"])
        self.assertEqual([t["initiator"] for t in w["threads"]], [True, True, False])
        s = gc.summary(w, 131072)
        self.assertAlmostEqual(s["reads_per_s"], 4096.0)
        self.assertAlmostEqual(s["initiator_s_per_gib"], 3.0)  # 3 s over 1 GiB
        self.assertAlmostEqual(s["busy_s_per_gib"], 2.0)  # system + softirq
        self.assertAlmostEqual(s["lo_packets_per_read"], 130.0)
        self.assertAlmostEqual(s["lo_bytes_per_packet"], 1100.0)
        table = gc.fmt_table([{"label": "x", "summary": s, "window": w}])
        self.assertTrue(any("ksoftirqd/0" in ln for ln in table))
        # Coverage is the plain sum of the shares: system, softirq and idle
        # each 100 ticks of a 2 s window at HZ 100.
        self.assertTrue(any("cpu0:" in ln and "ticks seen 1.50" in ln for ln in table), table)


if __name__ == "__main__":
    unittest.main()
