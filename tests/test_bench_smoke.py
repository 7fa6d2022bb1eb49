"""The benchmark suite runs end to end at tiny sizes, so it cannot rot. No timing is asserted."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from bench.stats import ORDER

REPO = Path(__file__).resolve().parent.parent


def test_quick_bench_prints_one_table_and_writes_every_row_as_json(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("| row | measured | median |") == 1
    assert "Child imports beyond the floor" in done.stdout

    report = json.loads(out.read_text())
    assert report["quick"] is True
    rows = {line["row"] for line in report["lines"]}
    skipped_cli = any(reason.startswith("CLI start") for reason in report["skipped"])
    assert rows == set(ORDER) - ({"CLI start"} if skipped_cli else set())
    for line in report["lines"]:
        assert line["n"] == len(line["samples"]) >= 1
        assert all(math.isfinite(x) and x > 0 for x in line["samples"]), line
        assert line["min"] <= line["median"] <= line["max"]
        if line["target"] not in ("", "reference"):
            assert isinstance(line["met"], bool), line
    assert any(line["target"] == "reference" for line in report["lines"])
    assert all(cost["module"] for cost in report["child_imports"])
