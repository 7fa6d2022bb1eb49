"""``isoagent logs RUN --html``: a run's timeline as a page, looked at in a headless browser."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from isoagent.parent.records.timeline import COLOURS, TRACK
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    text_reply,
    tool_reply,
    tools_reply,
)
from tests.support.png import pixel_rows

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (1280, 720)


def three_children(req: Request) -> Reply:
    if req.is_parent:
        if req.turn == 0:
            return tools_reply(
                [
                    ("Agent", {"description": f"part {n}", "prompt": f"look at part {n}",
                              "subagent_type": "Explore"})
                    for n in (1, 2, 3)
                ],
                usage=(100, 20),
            )  # fmt: skip
        return text_reply("ALL-PARTS-DONE", usage=(300, 30))
    if req.turn == 0:
        return tool_reply("Bash", {"command": "sleep 0.2"}, usage=(40, 8))
    return text_reply(f"summary of {req.first_user_text}", usage=(60, 12))


def _rgb(colour: str) -> tuple[int, int, int]:
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def bars_in(rows: list[list[tuple[int, int, int]]]) -> int:
    """Horizontal bands of at least 16 rows drawn in the bars' colours (a legend's swatches
    are 12 pixels high): one a bar."""
    colours = {_rgb(c) for c in (TRACK, *COLOURS.values())}
    bands, height = 0, 0
    for row in [*rows, []]:
        if sum(pixel in colours for pixel in row) >= 30:
            height += 1
            continue
        bands += height >= 16
        height = 0
    return bands


def screenshot(page: Path, png: Path, profile: Path) -> None:
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
         f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium to look at the page (apt-get install chromium)"
)
def test_timeline_of_a_three_child_run_shows_four_bars_in_a_browser(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    api_server.handler = three_children
    env = cli_env(api_server)
    done = run_cli(["run", "split the work"], env, cwd=workspace, input="")
    assert done.returncode == 0 and "ALL-PARTS-DONE" in done.stdout, done.stderr
    page = tmp_path / "run.html"
    drawn = run_cli(["logs", "last", "--html", "-o", str(page)], env, cwd=workspace)
    assert drawn.returncode == 0, drawn.stderr
    html = page.read_text()
    assert "http://" not in html and "https://" not in html and "<script" not in html
    assert html.count('<g class="bar"') == 4
    # parent 2 calls (100+20, 300+30) and three children of 2 calls (40+8, 60+12) each
    assert "810 tokens" in html
    png = tmp_path / "run.png"
    screenshot(page, png, tmp_path / "profile")
    rows = pixel_rows(png)
    assert (len(rows[0]), len(rows)) == WINDOW
    assert len({pixel for row in rows for pixel in row}) > 20  # not blank: text, bars, axis
    assert bars_in(rows) == 4


def test_timeline_of_a_run_without_times_is_one_clear_line(tmp_path: Path) -> None:
    run = tmp_path / ".isoagent" / "runs" / "20250101-000000-abcdef"
    run.mkdir(parents=True)
    (run / "run.jsonl").write_text(
        '{"type":"init","run_id":"20250101-000000-abcdef","run_dir":"x","model":"m",'
        '"workdir":"/","agents":[]}\n'
    )
    # by its id: `last` is the newest run isoagent sealed, and this one is written by hand
    args = ["logs", "20250101-000000-abcdef", "--html", "-o", str(tmp_path / "p.html")]
    done = run_cli(args, {}, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        "isoagent: run 20250101-000000-abcdef has no times in its transcripts: "
        "no timeline to draw\n"
    )
    assert not (tmp_path / "p.html").exists()


def test_timeline_draws_one_run_only(tmp_path: Path) -> None:
    done = run_cli(["logs", "--html"], {}, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "isoagent: --html draws one RUN, as a page: give RUN, without --json\n"
