"""Bash (Claude Code's tool), with real bash processes in a temporary workspace."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from isoagent.child.agent.tools.base import ToolContext, ToolOutput
from isoagent.child.agent.tools.bash import Bash
from isoagent.protocol import Limits
from tests.support.processes import alive, wait_for


def run(tmp_path: Path, command: str, ctx: ToolContext | None = None, **args) -> ToolOutput:
    tool = Bash(ctx or ToolContext(tmp_path))
    return tool.run({"command": command, **args})


def wait_dead(pid: int, within: float = 2.0) -> bool:
    return wait_for(lambda: not alive(pid), within)


def test_bash_returns_stdout_and_stderr_combined(tmp_path: Path) -> None:
    out = run(tmp_path, "echo out; echo err >&2")
    assert out == ToolOutput("out\nerr\n")


def test_bash_runs_in_the_workspace(tmp_path: Path) -> None:
    assert run(tmp_path, "pwd").text.strip() == os.path.realpath(tmp_path)


def test_bash_empty_output_says_no_output(tmp_path: Path) -> None:
    assert run(tmp_path, "true") == ToolOutput("(no output)")


def test_bash_stdin_is_empty(tmp_path: Path) -> None:
    assert run(tmp_path, "cat") == ToolOutput("(no output)")


def test_bash_nonzero_exit_is_error_with_exit_line(tmp_path: Path) -> None:
    out = run(tmp_path, "echo partial; exit 3")
    assert out == ToolOutput("partial\n[exit code 3]", is_error=True)


def test_bash_nonzero_exit_without_output(tmp_path: Path) -> None:
    assert run(tmp_path, "exit 1") == ToolOutput("[exit code 1]", is_error=True)


def test_bash_killed_by_signal_names_the_signal(tmp_path: Path) -> None:
    out = run(tmp_path, "kill -KILL $$")
    assert out.is_error
    assert out.text.endswith("[killed by signal SIGKILL]")


def test_bash_timeout_in_milliseconds_kills_process_group(tmp_path: Path) -> None:
    """``timeout`` is in milliseconds, as Claude Code's Bash takes it."""
    pidfile = tmp_path / "bg.pid"
    out = run(tmp_path, f"sleep 30 & echo $! > {pidfile}; echo before; sleep 30", timeout=500)
    assert out.is_error
    assert out.text == "before\n[command timed out after 0.5 s and was killed]"
    assert wait_dead(int(pidfile.read_text()))


def test_bash_default_timeout_comes_from_limits(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path, Limits(bash_timeout=0.3))
    out = run(tmp_path, "sleep 30", ctx)
    assert out == ToolOutput("[command timed out after 0.3 s and was killed]", is_error=True)


@pytest.mark.parametrize("timeout", [0, -1, 600_001, None])
def test_bash_timeout_out_of_range_is_invalid_input(tmp_path: Path, timeout: float) -> None:
    out = run(tmp_path, "true", timeout=timeout)
    assert out.is_error
    assert out.text.startswith("invalid input for Bash")


def test_bash_takes_claude_codes_description_and_a_timeout_up_to_ten_minutes(
    tmp_path: Path,
) -> None:
    out = run(tmp_path, "echo hi", description="Say hi", timeout=600_000)
    assert out == ToolOutput("hi\n")


def test_bash_unknown_argument_is_invalid_input(tmp_path: Path) -> None:
    out = run(tmp_path, "true", cwd="/")
    assert out.is_error
    assert "cwd" in out.text


def test_bash_background_process_does_not_hang_the_call(tmp_path: Path) -> None:
    pidfile, late = tmp_path / "bg.pid", tmp_path / "late"
    out = run(tmp_path, f"(sleep 100; touch {late}) & echo $! > {pidfile}; echo done")
    assert out == ToolOutput("done\n")
    assert wait_dead(int(pidfile.read_text()))
    assert not late.exists()  # the call did not wait for the job: it ended it


def test_bash_background_process_with_redirected_output_is_ended(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    out = run(tmp_path, f"sleep 100 >/dev/null 2>&1 & echo $! > {pidfile}")
    assert out == ToolOutput("(no output)")
    assert wait_dead(int(pidfile.read_text()))


def test_bash_command_that_closes_its_output_is_still_waited_for(tmp_path: Path) -> None:
    out = run(tmp_path, "echo early; exec >/dev/null 2>&1; sleep 0.3; exit 3")
    assert out == ToolOutput("early\n[exit code 3]", is_error=True)


def test_bash_command_that_closes_its_output_still_times_out(tmp_path: Path) -> None:
    out = run(tmp_path, "exec >/dev/null 2>&1; sleep 30", timeout=500)
    assert out == ToolOutput("[command timed out after 0.5 s and was killed]", is_error=True)


def test_bash_50mb_output_is_truncated_with_marker(tmp_path: Path) -> None:
    cap = Limits().output_cap
    tracemalloc.start()
    try:
        out = run(tmp_path, "yes | head -c 50000000; echo END")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not out.is_error
    assert len(out.text) <= cap + 200
    assert "bytes truncated by isoagent" in out.text
    assert out.text.startswith("y\ny\n")
    assert out.text.endswith("y\nEND\n")
    assert peak < 5_000_000


def test_bash_output_a_little_over_cap_is_truncated_like_truncate(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path, Limits(output_cap=1000))
    out = run(tmp_path, "printf 'a%.0s' $(seq 1500)", ctx)
    assert len(out.text) <= 1000 + 100
    assert "characters truncated by isoagent" in out.text


def test_bash_truncated_error_keeps_exit_line_within_cap(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path, Limits(output_cap=1000))
    out = run(tmp_path, "yes | head -c 100000; exit 4", ctx)
    assert out.is_error
    assert len(out.text) <= 1000
    assert "truncated by isoagent" in out.text
    assert out.text.endswith("y\n[exit code 4]")


def test_bash_non_utf8_output_is_replaced(tmp_path: Path) -> None:
    out = run(tmp_path, r"printf 'ok \xff\xfe done'")
    assert out == ToolOutput("ok \ufffd\ufffd done")


def test_bash_cancel_kills_the_command(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    threading.Timer(0.3, ctx.cancelled.set).start()
    late = tmp_path / "late"
    out = run(tmp_path, f"sleep 30; touch {late}", ctx)
    assert out == ToolOutput("cancelled", is_error=True)
    assert not late.exists()  # killed, not waited for
    assert ctx.process_groups == set()


def test_bash_already_cancelled_runs_nothing(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    ctx.cancelled.set()
    out = run(tmp_path, "touch made", ctx)
    assert out == ToolOutput("cancelled", is_error=True)
    assert not (tmp_path / "made").exists()


def test_bash_registers_its_process_group_while_running(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    pidfile, release = tmp_path / "pid", tmp_path / "release"
    # the command runs until the test lets it go: no guess at how long the checks take
    command = f"echo $$ > {pidfile}.part; mv {pidfile}.part {pidfile}; "
    command += f"while [ ! -e {release} ]; do sleep 0.01; done"
    thread = threading.Thread(target=run, args=(tmp_path, command, ctx))
    thread.start()
    assert wait_for(pidfile.exists)
    pid = int(pidfile.read_text())
    # the shell may write its pid before the tool's thread, back from Popen, registers it
    assert wait_for(lambda: ctx.process_groups == {pid}), ctx.process_groups
    assert os.getpgid(pid) == pid
    release.touch()
    thread.join()
    assert ctx.process_groups == set()
