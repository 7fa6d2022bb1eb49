"""Every row of the benchmark suite runs end to end at tiny sizes, so none can rot.

One test per row (``--quick --only ROW``), so that pytest-xdist spreads the rows over the
cores. No timing is asserted: only that each row measures, or says why it skipped.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import ROWS
from bench.stats import ORDER

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("row", ROWS)
def test_quick_bench_row_prints_one_table_and_writes_its_lines_as_json(
    row: str, tmp_path: Path
) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", row, "--json", str(out)],
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
    assert report["lines"] or report["skipped"], "a row measures something or says why not"
    for line in report["lines"]:
        assert line["row"] in ORDER
        assert line["n"] == len(line["samples"]) >= 1
        # finite, not positive: a row that is a difference (marginal CPU) can dip below 0
        # in a tiny run on a busy machine
        assert all(math.isfinite(x) for x in line["samples"]), line
        assert line["min"] <= line["median"] <= line["max"]
        if line["target"] not in ("", "reference"):
            assert isinstance(line["met"], bool), line
    assert all(cost["module"] for cost in report["child_imports"])
