"""Unit tests of the lab runner's bookkeeping (no VM): scenario headers and
selection, reading results, the summary and the exit status.

    python3 -m unittest discover -s tests/lab -p 'test_*.py'
"""

import tempfile
import unittest
from pathlib import Path

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
        self.assertEqual(self.names(chosen), ["b", lab.COMPARE_SCENARIO])

    def test_unknown_name_stops_with_the_known_ones(self):
        with self.assertRaises(SystemExit) as cm:
            lab.select(self.all, ["nope"], False, False)
        self.assertIn("nope", str(cm.exception))


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


if __name__ == "__main__":
    unittest.main()
