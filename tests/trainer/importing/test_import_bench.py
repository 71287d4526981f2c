"""The importer benchmark script runs end to end on a tiny graph and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_import.py"


def test_bench_import_smoke_run_prints_one_row_per_input_and_partition_count(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCH), "--edges", "3000", "--nodes", "300", "--relations", "3",
         "--partitions", "2", "--no-pbg", "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines()
            if line.startswith("| ") and "Tessera" in line]
    assert [(row[0].strip(), row[1].strip()) for row in rows] == [
        ("2 columns", "2"), ("3 columns, 3 relations", "2")]
    for row in rows:
        edges_per_second, peak_rss_mb = (float(row[i].replace(",", "")) for i in (4, 6))
        assert edges_per_second > 0 and peak_rss_mb > 0
    assert "failed" not in result.stdout
