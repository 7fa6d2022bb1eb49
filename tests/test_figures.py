"""One set of figures: a run's closing line, ``logs``, its timeline and a batch's lines say
the same numbers the same way, turns included (every agent's model turns), however the run
ended; ``logs`` says how the command ended and lists only runs that ran something."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from isoagent.parent.records.figures import duration, plural, tokens, usd
from tests.conftest import cli_env
from tests.support.cli import run_cli, run_dirs, shell, start_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import wait_for


def test_each_figure_has_one_style() -> None:
    assert [tokens(1680), tokens(1), tokens(12_345_678)] == [
        "1,680 tokens", "1 token", "12,345,678 tokens"
    ]  # fmt: skip
    assert [plural(1, "tool"), plural(1, "turn"), plural(2, "child", "children")] == [
        "1 tool", "1 turn", "2 children"
    ]  # fmt: skip
    assert [usd(0.01274), usd(12.345), usd(1234.5)] == ["$0.0127", "$12.35", "$1,234.50"]
    assert [duration(0.045), duration(3.21), duration(125), duration(3725)] == [
        "45ms", "3.2s", "2m05s", "1h02m"
    ]  # fmt: skip


def _logged(tmp_path: Path, env: dict[str, str], run: str = "last") -> dict[str, object]:
    done = run_cli(["logs", run, "--json"], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


CLOSING = re.compile(
    r"^isoagent: (?P<turns>[\d,]+) turns?, (?:(?P<kids>\d+) child(?:ren)?, )?"
    r"(?P<tokens>[\d,]+) tokens?, \$(?P<cost>[\d.]+); ",
    re.M,
)


def test_after_ctrl_c_the_closing_line_counts_the_turns_taken_as_logs_does(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    marker = tmp_path / "working"

    def handler(req: Request) -> Reply:
        if req.is_parent:
            call = {"description": "work", "prompt": "work", "subagent_type": "general-purpose"}
            return tool_reply("Agent", call, usage=(100, 20))
        return tool_reply("Bash", {"command": f"touch {marker}; sleep 300"}, usage=(40, 8))

    api_server.handler = handler
    env = cli_env(api_server)
    cli = start_cli(["run", "go", "-v"], env, cwd=tmp_path)
    assert wait_for(marker.exists, 60)
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 130, stderr
    closing = CLOSING.search(stderr)
    assert closing is not None, stderr
    logged = _logged(tmp_path, env)
    assert logged["status"] == "cancelled"
    assert int(closing["turns"]) == logged["turns"] == 2  # the parent's and the child's
    assert int(closing["tokens"].replace(",", "")) == logged["tokens"] == 168


def test_logs_says_a_run_whose_answer_could_not_be_written_failed(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("the answer")
    env = cli_env(api_server)
    done = shell("isoagent task go > /dev/full", env, tmp_path)
    assert done.returncode == 1, done.stderr
    logged = _logged(tmp_path, env)
    assert logged["status"] == "error"
    assert logged["error"] == "cannot write to stdout: No space left on device"
    listed = run_cli(["logs"], env, cwd=tmp_path).stdout
    assert " error, 1 turn, 0 tool calls, " in listed and " ok, " not in listed


def test_a_batch_resumed_with_nothing_left_adds_no_run(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("done")
    env = cli_env(api_server)
    (tmp_path / "tasks.txt").write_text("one\ntwo\n")
    args = ["batch", "tasks.txt", "-o", "out.jsonl"]
    assert run_cli(args, env, cwd=tmp_path).returncode == 0
    [run] = [path for path in run_dirs(tmp_path) if path.is_dir()]
    again = run_cli(args, env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "skipping 2 tasks already done in out.jsonl" in again.stderr
    assert "nothing left to run" in again.stderr
    assert [path for path in run_dirs(tmp_path) if path.is_dir()] == [run]
    assert _logged(tmp_path, env)["run_id"] == run.name
