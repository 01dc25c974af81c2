#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/bench_report.py on a tree of its own: a table edited by hand, a
results file without its machine, a ratio quoted in prose that the results
file its section names does not hold, or in a section that names none, all
fail the check; the generated tree passes it, and a bench's own JSON taken
with --from regenerates its table."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "bench_report.py")
MACHINE = {"cpu_model": "x", "cores": 2, "kernel": "6", "disk": "vda", "fio": "fio-3",
           "page_size": 4096, "huge_page_size": 2097152, "date": "2026-12-08", "commit": "c"}
RESULT = {"bench": "demo", "source": "run", "command": "kvtier-bench demo", "machine": MACHINE,
          "data": {"tables": {"main": {"columns": ["op", "ratio"], "rows": [["LOAD", 0.85]],
                                       "formats": [None, ".2f"]}}}}
PAGE = "# Demo\n\nLOAD runs at 0.85x memcpy.\n\n<!-- table:results/demo.json -->\n<!-- /table -->\n"


class BenchReport(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        os.makedirs(os.path.join(self.root, "docs", "results"))
        self.write_result(RESULT)
        self.page = os.path.join(self.root, "docs", "benchmarks.md")
        with open(self.page, "w") as f:
            f.write(PAGE)

    def tearDown(self):
        shutil.rmtree(self.root)

    def write_result(self, doc):
        with open(os.path.join(self.root, "docs", "results", "demo.json"), "w") as f:
            json.dump(doc, f)

    def run_report(self, *args):
        return subprocess.run([sys.executable, SCRIPT, "--root", self.root] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def generate(self):
        r = self.run_report()
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_generated_table_passes(self):
        self.generate()
        self.assertIn("| LOAD | 0.85 |", open(self.page).read())
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_table_edited_by_hand_fails(self):
        self.generate()
        text = open(self.page).read().replace("| LOAD | 0.85 |", "| LOAD | 1.17 |")
        with open(self.page, "w") as f:
            f.write(text)
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("differs from its JSON", r.stdout)

    def test_results_without_machine_fail(self):
        doc = dict(RESULT, machine={"cores": 2})
        self.write_result(doc)
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("machine.cpu_model", r.stdout)

    def test_a_benchs_own_json_is_taken_with_the_machine(self):
        """--from wraps kvtier-bench dram --json's output with the machine
        it ran on, and the page's table is generated from its cases."""
        with open(self.page, "w") as f:
            f.write("# Demo\n\n<!-- table:results/dram.json -->\n<!-- /table -->\n")
        out = os.path.join(self.root, "dram-run.json")
        with open(out, "w") as f:
            json.dump({"bench": "dram", "cases": [{
                "block_bytes": 1 << 20, "put_gbps": 7.01, "get_gbps": 6.94,
                "memcpy_gbps": 7.04, "put_ratio": 0.995, "get_ratio": 0.986}]}, f)
        r = self.run_report("--from", "dram=" + out, "--command", "kvtier-bench dram")
        self.assertEqual(r.returncode, 0, r.stdout)
        doc = json.load(open(os.path.join(self.root, "docs", "results", "dram.json")))
        self.assertEqual(doc["source"], "run")
        self.assertEqual(doc["command"], "kvtier-bench dram")
        for k in ("cpu_model", "cores", "kernel", "disk", "fio", "page_size",
                  "huge_page_size", "date", "commit"):
            self.assertIn(k, doc["machine"])
        self.assertIn("| 1 MiB | 7.01 | 6.94 | 7.04 | 0.995 | 0.986 |", open(self.page).read())
        self.assertEqual(self.run_report("--check", "--tables").returncode, 0)

    def test_prose_ratio_from_no_results_file_fails(self):
        self.generate()
        with open(self.page, "a") as f:
            f.write("\nElsewhere LOAD was 1.17x memcpy.\n")
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("'1.17x' is in none of docs/results/demo.json", r.stdout)

    def test_prose_ratio_without_its_file_fails(self):
        """a figure in a section that names no results file has no source"""
        self.generate()
        with open(self.page, "a") as f:
            f.write("\n## Elsewhere\n\nLOAD runs at 0.85x memcpy.\n")
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("'0.85x' in a section that names no docs/results file", r.stdout)


if __name__ == "__main__":
    unittest.main()
