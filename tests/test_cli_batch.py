"""``isoagent batch``: one child per input line, -j at once, resumable output, bad lines."""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from isoagent.parent.batch.display import BatchDisplay
from isoagent.parent.children.sandbox_policy import landlock_available, mount_namespaces_available
from isoagent.parent.records.events import TaskRecord
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, read_jsonl, run_cli, shell, start_cli
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    error_reply,
    text_reply,
    tool_reply,
    unused_url,
)
from tests.support.terminal import screen_of


def answer(delay: float = 0.0):
    """Each child answers at once with a summary naming its prompt."""
    return lambda req: text_reply(f"did: {req.first_user_text}", delay=delay)


def tasks_file(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def env_for(server: MessagesServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    return cli_env(server, HOME=str(tmp_path / "home"), **extra)


def test_batch_of_20_with_j4_has_20_lines_and_at_most_4_children_in_flight(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer(delay=0.3)
    ids = [f"t{n:02d}" for n in range(1, 21)]
    tasks_file(tmp_path / "tasks.jsonl", [{"id": i, "prompt": f"task {i}"} for i in ids])
    done = shell(
        f"cat tasks.jsonl | isoagent batch - -j 4 -C {shlex.quote(str(workspace))} | cat > out",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    records = read_jsonl(tmp_path / "out")
    assert len(records) == 20
    assert sorted(r["id"] for r in records) == ids
    assert all(r["status"] == "ok" and r["summary"] == f"did: task {r['id']}" for r in records)
    assert all((tmp_path / r["transcript"]).is_file() for r in records)  # relative to the cwd
    assert 2 <= api_server.max_in_flight_where(lambda r: not r.is_parent) <= 4
    assert not any(r.is_parent for r in api_server.requests)
    assert "batch: 20/20 done, 0 failed" in done.stderr


def test_bad_lines_get_an_error_line_each_and_do_not_stop_the_others(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer()
    lines = [
        {"id": "a", "prompt": "first"},
        "{not json",
        {"id": "b"},
        "",
        "plain text prompt",
        {"id": "c", "prompt": "x", "agent": "NoSuchAgent"},
        {"id": "a", "prompt": "same id again"},
        {"id": 7, "prompt": 12},
        {"prompt": "read only please", "agent": "Explore"},
    ]
    tasks_file(tmp_path / "tasks.jsonl", lines)
    done = run_cli(
        ["batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 6, done.stderr
    records = {r["line"]: r for r in read_jsonl(tmp_path / "out.jsonl")}
    assert {line: (r["id"], r["status"]) for line, r in records.items()} == {
        1: ("a", "ok"),
        2: (records[2]["id"], "invalid"),
        3: ("b", "invalid"),
        5: (records[5]["id"], "ok"),
        6: ("c", "invalid"),
        7: ("a", "invalid"),
        8: (7, "invalid"),
        9: (records[9]["id"], "ok"),
    }
    assert records[2]["error"].startswith("invalid JSON")
    assert "missing required field `prompt`" in records[3]["error"]
    assert "unknown agent 'NoSuchAgent'" in records[6]["error"]
    assert "duplicate id 'a' (first on line 1)" in records[7]["error"]
    assert "$.prompt" in records[8]["error"]
    assert records[5]["summary"] == "did: plain text prompt"
    assert records[9]["agent"] == "Explore"
    assert len({records[line]["id"] for line in (2, 5, 9)}) == 3  # a hash of each line
    assert "task c invalid: unknown agent" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_misspelt_key_or_a_json_line_that_is_no_object_is_refused_said_once(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """{"agnet": "Explore"} ran the writing general-purpose agent without a word; a JSON
    string or array became its own literal prompt; a bad line's message said "line 2" twice."""
    api_server.handler = answer()
    lines = [
        {"prompt": "look", "agnet": "Explore"},
        '"just a string"',
        '["list"]',
        "{oops",
    ]
    tasks_file(tmp_path / "tasks.jsonl", lines)
    args = ["batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(workspace)]
    done = run_cli(args, env_for(api_server, tmp_path), cwd=tmp_path)
    assert done.returncode == 6, done.stderr
    assert api_server.requests == []
    records = {r["line"]: r for r in read_jsonl(tmp_path / "out.jsonl")}
    assert [records[n]["status"] for n in (1, 2, 3, 4)] == ["invalid"] * 4
    assert "unknown key 'agnet' (did you mean 'agent'?)" in records[1]["error"]
    assert "a JSON string, not a task" in records[2]["error"]
    assert "a JSON array, not a task" in records[3]["error"]
    for number in (1, 2, 3, 4):
        assert done.stderr.count(f"line {number}") == 1, done.stderr


def test_sigint_half_way_then_resume_gives_every_id_exactly_once(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer(delay=0.4)
    ids = [f"job-{n}" for n in range(12)]
    tasks_file(tmp_path / "tasks.jsonl", [{"id": i, "prompt": i} for i in ids])
    out = tmp_path / "out.jsonl"
    args = ["batch", "tasks.jsonl", "-j", "3", "-o", str(out), "-C", str(workspace)]
    env = env_for(api_server, tmp_path)

    cli = start_cli(args, env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (out.exists() and len(out.read_text().splitlines()) >= 4):
        assert cli.poll() is None and time.monotonic() < deadline, "batch did not get going"
        time.sleep(0.05)
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 130, stderr
    assert "run it again with the same -o to resume" in stderr
    first = read_jsonl(out)
    assert 4 <= len(first) < 12
    assert all(r["status"] == "ok" for r in first)  # an interrupted task is not recorded
    first_ids = {r["id"] for r in first}

    api_server.requests.clear()
    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"skipping {len(first)} tasks already done" in done.stderr
    assert not first_ids & {r.first_user_text for r in api_server.requests}
    final = read_jsonl(out)
    assert sorted(r["id"] for r in final) == sorted(ids)
    assert all(r["status"] == "ok" for r in final)


def test_resume_retries_failed_tasks_reports_bad_lines_once_and_drops_a_cut_line(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    def flaky(req: Request) -> Reply:
        if req.first_user_text == "fails":
            return error_reply(400, "invalid_request_error", "not today")
        return text_reply("fine")

    api_server.handler = flaky
    tasks_file(tmp_path / "tasks.jsonl", ["works", "fails", "{oops"])
    args = ["batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(workspace)]
    env = env_for(api_server, tmp_path)
    assert run_cli(args, env, cwd=tmp_path).returncode == 6
    out = tmp_path / "out.jsonl"
    assert sorted((r["line"], r["status"]) for r in read_jsonl(out)) == [
        (1, "ok"),
        (2, "error"),
        (3, "invalid"),
    ]
    with out.open("a") as file:  # a line cut short when a batch was killed mid-write
        file.write('{"id":"h-99","status":"o')

    api_server.handler = answer()
    api_server.requests.clear()
    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 6, done.stderr  # the bad line is still bad
    assert [r.first_user_text for r in api_server.requests] == ["fails"]
    records = read_jsonl(out)
    assert [(r["line"], r["status"]) for r in records] == [
        *[(r["line"], r["status"]) for r in records[:3]],
        (2, "ok"),
    ]
    assert records[3]["id"] == next(r["id"] for r in records if r["status"] == "error")
    assert sum(r["status"] == "invalid" for r in records) == 1


def test_a_line_that_is_not_utf8_is_one_invalid_line_and_the_others_run(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer()
    (tmp_path / "tasks.txt").write_bytes(
        b'first\ncaf\xe9 au lait\n{"id": "k", "prompt": "\xff"}\nlast\n'
    )
    done = run_cli(
        ["batch", "tasks.txt", "-o", "out.jsonl", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 6, done.stderr
    records = {r["line"]: r for r in read_jsonl(tmp_path / "out.jsonl")}
    assert {line: r["status"] for line, r in records.items()} == {
        1: "ok",
        2: "invalid",
        3: "invalid",
        4: "ok",
    }
    assert records[2]["error"] == "not UTF-8 text (byte 0xe9 at column 4)"
    assert records[3]["id"] == "k"  # named by its id where it has one
    assert sorted(r.first_user_text for r in api_server.requests) == ["first", "last"]
    assert "Traceback" not in done.stderr


def test_inserting_a_line_then_resuming_runs_only_the_new_task(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer()
    tasks = tmp_path / "tasks.txt"
    tasks_file(tasks, ["alpha", {"prompt": "beta"}, {"prompt": "gamma", "agent": "Explore"}])
    args = ["batch", "tasks.txt", "-o", "out.jsonl", "-C", str(workspace)]
    env = env_for(api_server, tmp_path)
    assert run_cli(args, env, cwd=tmp_path).returncode == 0
    first = {r["summary"]: r["id"] for r in read_jsonl(tmp_path / "out.jsonl")}

    tasks_file(tasks, ["new", "alpha", {"prompt": "beta"}, {"prompt": "gamma", "agent": "Explore"}])
    api_server.requests.clear()
    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [r.first_user_text for r in api_server.requests] == ["new"]
    assert "skipping 3 tasks already done" in done.stderr
    records = read_jsonl(tmp_path / "out.jsonl")
    assert {r["summary"]: r["id"] for r in records[:3]} == first
    assert [(r["summary"], r["line"]) for r in records[3:]] == [("did: new", 1)]
    assert len({r["id"] for r in records}) == 4


@pytest.mark.parametrize(
    "contents",
    [
        "my notes\nthe last line has no newline",
        '{"id": "a", "prompt": "a tasks file"}\n{"id": "b", "prompt": "more"}\n',
        '{"id":"a","prompt":"one compact task, no newline"}',
        '{"id":"h-1","status":"ok","line":1}\nthen something else\n',
    ],
)
def test_output_onto_a_file_that_is_not_batch_output_is_refused_and_kept(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, contents: str
) -> None:
    tasks_file(tmp_path / "tasks.txt", ["one"])
    (tmp_path / "notes.txt").write_text(contents)
    done = run_cli(
        ["batch", "tasks.txt", "-o", "notes.txt", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("isoagent: --output notes.txt is not isoagent batch output")
    assert len(done.stderr.splitlines()) == 1
    assert (tmp_path / "notes.txt").read_text() == contents
    assert not api_server.requests


def test_output_onto_an_empty_file_is_taken(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    tasks_file(tmp_path / "tasks.txt", ["one"])
    (tmp_path / "out.jsonl").touch()
    done = run_cli(
        ["batch", "tasks.txt", "-o", "out.jsonl", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in read_jsonl(tmp_path / "out.jsonl")] == ["ok"]


def test_a_rejected_key_stops_the_batch_at_once(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = lambda req: error_reply(401, "authentication_error", "invalid x-api-key")
    tasks_file(tmp_path / "tasks.txt", [f"task {n}" for n in range(12)])
    done = run_cli(
        ["batch", "tasks.txt", "-j", "2", "-o", "out.jsonl", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert 1 <= len(api_server.requests) <= 2  # the first wave; none after the first 401
    stopped = [line for line in done.stderr.splitlines() if "batch stopped" in line]
    assert len(stopped) == 1, done.stderr
    assert stopped[0].startswith("isoagent: ") and "rejected the credentials (401" in stopped[0]
    records = read_jsonl(tmp_path / "out.jsonl")  # the tasks that ran; the rest run on resume
    assert len(records) <= 2 and all(r["status"] == "error" for r in records)
    assert "Traceback" not in done.stderr


def test_input_with_a_line_longer_than_any_prompt_is_refused_unread(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    # 9 MB without a newline: from /dev/zero itself, the line would never end
    done = shell(
        f"head -c 9000000 /dev/zero | isoagent batch - -C {shlex.quote(str(workspace))}",
        env_for(api_server, tmp_path),
        tmp_path,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "isoagent: stdin: line 1 is longer than 8 MiB: not a task\n"
    assert not api_server.requests


def test_summaries_through_jq(api_server: MessagesServer, tmp_path: Path, workspace: Path) -> None:
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    api_server.handler = answer()
    tasks_file(tmp_path / "tasks.jsonl", ["alpha", "beta", "gamma"])
    done = shell(
        f"cat tasks.jsonl | isoagent batch - -j 2 -C {shlex.quote(str(workspace))} "
        "| jq -r .summary | sort",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "did: alpha\ndid: beta\ndid: gamma\n"


def test_batch_record_then_replay_without_a_server(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer()
    tasks_file(tmp_path / "tasks.jsonl", ["one", "two", "three"])
    base = ["batch", "tasks.jsonl", "-j", "2", "-C", str(workspace)]
    recorded = run_cli(
        [*base, "--record", "calls.jsonl"], env_for(api_server, tmp_path), cwd=tmp_path
    )
    assert recorded.returncode == 0, recorded.stderr

    offline = {**env_for(api_server, tmp_path), "ANTHROPIC_BASE_URL": unused_url()}
    replayed = run_cli([*base, "--replay", "calls.jsonl"], offline, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr

    def summaries(stdout: str) -> dict[Any, str]:
        return {r["line"]: r["summary"] for r in map(json.loads, stdout.splitlines())}

    assert (
        summaries(replayed.stdout)
        == summaries(recorded.stdout)
        == {
            1: "did: one",
            2: "did: two",
            3: "did: three",
        }
    )
    assert len(api_server.requests) == 3


def test_progress_line_on_a_terminal_replaces_the_child_lines(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer()
    tasks_file(tmp_path / "tasks.jsonl", ["one", "two", "{bad"])
    master, slave = os.openpty()
    try:
        done = subprocess.run(
            [*ISOAGENT, "batch", "tasks.jsonl", "-C", str(workspace)],
            env=env_for(api_server, tmp_path),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            timeout=60,
        )
        os.close(slave)
        screen = b""
        while chunk := _read(master):
            screen += chunk
    finally:
        os.close(master)
    text = screen.decode()
    assert done.returncode == 6
    lines = screen_of(text)
    assert lines[0].startswith("  line 3 invalid: invalid JSON"), lines
    assert lines[1].startswith("isoagent: batch: 3/3 done, 1 failed"), lines
    assert len(lines) == 2 and "batch: [" in text
    assert "[general-purpose]" not in text


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the terminal's other end is closed
        return b""


def test_batch_display_counts() -> None:
    stream = io.StringIO()
    display = BatchDisplay(3, stream, live=True)
    display.task_started()
    display.task_started()
    display.task_finished(TaskRecord("a", "ok", 1, tokens=_usage(12_000), cost_usd=0.25))
    display.task_finished(TaskRecord("b", "crashed", 2, error="child exited", cost_usd=0.5))
    status = display.status()
    assert status.startswith("batch: [#############.......] 2/3 done, 0 running, 1 failed, ")
    assert "/s, ETA " in status and status.endswith(", 12,000 tokens, $0.7500")
    display.close("; interrupted")
    assert screen_of(stream.getvalue()) == [
        "  task b crashed: child exited",
        "isoagent: batch: 2/3 done, 1 failed, 0ms, 12,000 tokens, $0.7500; interrupted",
    ]


def test_each_line_says_what_its_task_cost(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    from isoagent.parent.model.aliases import resolve_model
    from isoagent.parent.model.prices import cost_usd
    from isoagent.protocol import Usage

    api_server.handler = lambda req: text_reply("done", usage=(1000, 200))
    tasks_file(tmp_path / "tasks.jsonl", ["one", "two"])
    args = ["batch", "tasks.jsonl", "-o", "out", "-C", str(workspace), "--model", "sonnet"]
    done = run_cli(args, env_for(api_server, tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    price = round(cost_usd(resolve_model("sonnet"), Usage(1000, 200)), 6)
    assert price > 0 and [r["cost_usd"] for r in read_jsonl(tmp_path / "out")] == [price] * 2
    run = max(p.name for p in (workspace / ".isoagent" / "runs").iterdir() if p.is_dir())
    assert done.stderr.rstrip().endswith(f"${2 * price:.4f}; ws/.isoagent/runs/{run}")


def test_a_batch_off_a_terminal_writes_one_progress_line_a_task(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer()
    tasks_file(tmp_path / "tasks.jsonl", [f"task {n}" for n in range(30)])
    args = ["batch", "tasks.jsonl", "-o", "out", "-j", "4", "-C", str(workspace)]
    done = run_cli(args, env_for(api_server, tmp_path), cwd=tmp_path, process=True)
    assert done.returncode == 0, done.stderr
    assert len(done.stderr.splitlines()) <= 30 + 1  # and the closing counts


def _usage(total: int):
    from isoagent.protocol import Usage

    return Usage(total, 0)


def test_a_child_cannot_make_resume_skip_a_task_by_forging_an_ok_line(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Played by a prompt-injected child that can write the -o file (in the workspace,
    --sandbox off): it appends an ok line for task "b", which has not run. Resume skips
    only what the parent wrote: "b" runs."""
    out = workspace / "out.jsonl"
    forged = {"id": "b", "status": "ok", "line": 2, "agent": "general-purpose", "summary": "x"}

    def handler(req: Request) -> Reply:
        if req.first_user_text == "forge" and req.turn == 0:
            return tool_reply(
                "Bash", {"command": f"echo {shlex.quote(json.dumps(forged))} >> {out}"}
            )
        return text_reply(f"did: {req.first_user_text}")

    api_server.handler = handler
    env = env_for(api_server, tmp_path)
    tasks_file(tmp_path / "one.jsonl", [{"id": "a", "prompt": "forge"}])
    args = ["-o", str(out), "-C", str(workspace), "--sandbox", "off"]
    assert run_cli(["batch", "one.jsonl", *args], env, cwd=tmp_path).returncode == 0
    assert [r["id"] for r in read_jsonl(out)] == ["b", "a"]  # the forged line is there

    tasks_file(tmp_path / "two.jsonl", [{"id": "a", "prompt": "forge"}, {"id": "b", "prompt": "b"}])
    done = run_cli(["batch", "two.jsonl", *args], env, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "skipping 1 task already done" in done.stderr
    assert f"1 ok line in {out} not signed by isoagent batch" in done.stderr
    records = read_jsonl(out)
    assert [(r["id"], r["summary"]) for r in records][2:] == [("b", "did: b")]


@pytest.mark.skipif(
    not (landlock_available() and mount_namespaces_available()),
    reason="needs Landlock and mount namespaces for children",
)
@pytest.mark.parametrize("attack", ["rm -f", ": >"], ids=["unlink", "truncate"])
def test_a_writing_child_cannot_take_the_results_already_written_from_the_o_file(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, attack: str
) -> None:
    """The parent appends to the -o file it holds open: unlinked, every later line would
    go to a file nobody can read; truncated, the lines before would be gone."""
    out = workspace / "out.jsonl"

    def handler(req: Request) -> Reply:
        if req.first_user_text == "attack" and req.turn == 0:
            return tool_reply("Bash", {"command": f"{attack} {out}; echo rc=$?"})
        if req.first_user_text == "attack":
            return text_reply(f"saw {req.tool_results[0]['content']}")
        return text_reply(f"did: {req.first_user_text}")

    api_server.handler = handler
    tasks = [{"id": "a", "prompt": "first"}, {"id": "b", "prompt": "attack"}]
    tasks_file(tmp_path / "tasks.jsonl", [*tasks, {"id": "c", "prompt": "last"}])
    args = ["-o", str(out), "-C", str(workspace), "-j", "1"]
    done = run_cli(["batch", "tasks.jsonl", *args], env_for(api_server, tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = read_jsonl(out)
    assert [r["id"] for r in records] == ["a", "b", "c"]
    assert "rc=1" in records[1]["summary"]


def in_own_mounts(
    script: str, server: MessagesServer, tmp_path: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) in a mount namespace of its own, where it may mount a small tmpfs;
    skips the test where there is no ``unshare``."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    private = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    return subprocess.run(
        [*private, "sh", "-c", script],
        # no warm daemon: one started in the namespace is keyed by it, out of the suite's end
        env=env_for(server, tmp_path, ISOAGENT_WARM_GATEWAY="0", **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_full_output_disk_starts_no_more_tasks_and_keeps_what_finished_on_stdout(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Played by a child that fills the disk the workspace, the run folder and -o share
    (a 2 MB tmpfs, mounted in a mount namespace of the batch's own): its line cannot be
    written, so no task starts after it (they would be paid for lines nobody keeps, and
    paid again on resume); its line is on stdout, signed, said so, and once appended to -o
    the resume trusts it: each task runs exactly once in all."""
    filled = []

    def handler(req: Request) -> Reply:
        if req.first_user_text == "fill" and req.turn == 0 and not filled:
            filled.append(True)
            return tool_reply("Bash", {"command": "dd if=/dev/zero of=fill bs=64k count=100"})
        return text_reply(f"did: {req.first_user_text}")

    api_server.handler = handler
    tasks_file(tmp_path / "tasks.jsonl", [{"id": i, "prompt": i} for i in ("fill", "b", "c")])
    disk = tmp_path / "disk"
    disk.mkdir()
    batch = shlex.join(
        [
            *ISOAGENT,
            "batch",
            "tasks.jsonl",
            "-j",
            "1",
            "-o",
            f"{disk}/ws/out.jsonl",
            "-C",
            f"{disk}/ws",
        ]
    )
    script = f"""
        mount -t tmpfs -o size=2m tmpfs {disk} && mkdir {disk}/ws || exit 99
        {batch} --sandbox off >run1.out 2>run1.err; echo $? >run1.rc
        cp {disk}/ws/out.jsonl out1.jsonl; rm {disk}/ws/fill; cat run1.out >> {disk}/ws/out.jsonl
        {batch} >run2.out 2>run2.err; echo $? >run2.rc
        cp {disk}/ws/out.jsonl out2.jsonl
    """
    mounted = in_own_mounts(script, api_server, tmp_path)
    if mounted.returncode == 99 or not (tmp_path / "run1.rc").exists():
        pytest.skip(f"cannot mount a tmpfs in a mount namespace: {mounted.stderr}")

    first_err = (tmp_path / "run1.err").read_text()
    assert (tmp_path / "run1.rc").read_text().strip() == "1", first_err
    assert "Traceback" not in first_err
    assert "No space left on device" in first_err
    assert "cannot write 1 result line to" in first_err
    assert "append them to" in first_err and "will not run their tasks again" in first_err
    on_stdout = read_jsonl(tmp_path / "run1.out")
    assert [(r["id"], r["status"]) for r in on_stdout] == [("fill", "ok")]
    assert (tmp_path / "out1.jsonl").read_text() == ""  # no line, not half of one
    assert "batch: 1/3 done" in first_err  # b and c never began

    second_err = (tmp_path / "run2.err").read_text()
    assert (tmp_path / "run2.rc").read_text().strip() == "0", second_err
    assert "skipping 1 task already done" in second_err
    resumed = read_jsonl(tmp_path / "out2.jsonl")
    assert sorted((r["id"], r["status"]) for r in resumed) == [
        ("b", "ok"),
        ("c", "ok"),
        ("fill", "ok"),
    ]
    asked = Counter(r.first_user_text for r in api_server.requests)
    assert asked == {"fill": 2, "b": 1, "c": 1}  # fill's two turns, in the first run


def test_a_full_temp_disk_fails_a_childs_start_not_the_batch(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """TMPDIR on a disk with one inode left (a tmpfs in a mount namespace of the batch's
    own, filled as a child would fill it): a child that cannot get a temp folder fails to
    start, with the reason, and the batch goes on to its end."""
    out = tmp_path / "out.jsonl"
    tasks_file(tmp_path / "tasks.jsonl", ["a", "b"])
    disk = tmp_path / "disk"
    disk.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    batch = [*ISOAGENT, "batch", "tasks.jsonl", "-j", "2", "-o", str(out), "-C", str(workspace)]
    script = f"""
        mount -t tmpfs -o size=4m,nr_inodes=64 tmpfs {disk} || exit 99
        i=0; while touch {disk}/f$i 2>/dev/null; do i=$((i+1)); done; rm {disk}/f0
        exec {shlex.join(batch)}
    """
    done = in_own_mounts(script, api_server, tmp_path, TMPDIR=str(disk))
    if done.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs in a mount namespace: {done.stderr}")

    assert done.returncode == 6, done.stderr
    assert "Traceback" not in done.stderr
    records = read_jsonl(out)
    assert len(records) == 2
    failed = [r for r in records if r["status"] != "ok"]
    assert failed and all(r["status"] == "launch_failed" for r in failed)
    assert failed[0]["error"] == (
        "child was not started: cannot make its temp folder: No space left on device"
    )


def test_a_workspace_disk_without_room_for_a_run_folder_is_one_clear_line(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The workspace on a disk with no inode left (a tmpfs in a mount namespace of the
    commands' own): `task` cannot make its run folder, `batch -o` cannot make its ledger;
    each says so in one line and runs nothing."""
    disk = tmp_path / "disk"
    disk.mkdir()
    tasks_file(tmp_path / "tasks.jsonl", ["a"])
    task = [*ISOAGENT, "task", "go", "-C", str(disk)]
    batch = [*ISOAGENT, "batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(disk)]
    script = f"""
        mount -t tmpfs -o size=4m,nr_inodes=16 tmpfs {disk} || exit 99
        i=0; while touch {disk}/f$i 2>/dev/null; do i=$((i+1)); done
        {shlex.join(task)} 2>task.err; echo $? >task.rc
        {shlex.join(batch)} 2>batch.err; echo $? >batch.rc
    """
    done = in_own_mounts(script, api_server, tmp_path)
    if done.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs in a mount namespace: {done.stderr}")

    runs = disk / ".isoagent" / "runs"
    assert (tmp_path / "task.rc").read_text().strip() == "1"
    assert (tmp_path / "task.err").read_text() == (
        f"isoagent: cannot create the run folder in {runs}: No space left on device\n"
    )
    assert (tmp_path / "batch.rc").read_text().strip() == "1"
    batch_err = (tmp_path / "batch.err").read_text()
    assert batch_err.startswith(f"isoagent: cannot write {runs}/batch-")
    assert batch_err.endswith(".spent: No space left on device\n")
    assert api_server.requests == []


def test_a_batch_whose_stdout_fails_starts_no_more_tasks_and_resumes_from_the_run_folder(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """stdout on a full disk: the tasks running finish, no other starts; every line the
    batch made is in its run folder, and a batch run again with that file as -o runs only
    the tasks that never ran."""
    api_server.handler = answer(delay=0.3)
    ids = [f"t{n}" for n in range(6)]
    tasks_file(tmp_path / "tasks.jsonl", [{"id": i, "prompt": i} for i in ids])
    env = env_for(api_server, tmp_path)
    args = f"batch tasks.jsonl -j 2 -C {shlex.quote(str(workspace))}"
    done = shell(f"isoagent {args} > /dev/full", env, tmp_path)

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (stopped,) = [line for line in done.stderr.splitlines() if "batch stopped" in line]
    assert "cannot write to stdout (No space left on device)" in stopped
    kept = Path(stopped.split("-o ")[-1].removesuffix(" to resume"))
    assert kept.parent.parent == workspace / ".isoagent" / "runs"
    first = read_jsonl(kept)
    ran = {r.first_user_text for r in api_server.requests}
    assert {r["id"] for r in first} == ran  # every task that ran, and only those
    assert 1 <= len(ran) <= 2  # the first wave; none after stdout failed
    assert all(r["status"] == "ok" for r in first)

    api_server.requests.clear()
    resume = ["batch", "tasks.jsonl", "-j", "2", "-o", str(kept), "-C", str(workspace)]
    again = run_cli(resume, env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert sorted(r.first_user_text for r in api_server.requests) == sorted(set(ids) - ran)
    assert sorted(r["id"] for r in read_jsonl(kept)) == ids


@pytest.mark.parametrize("output", ["/dev/full", "/dev/stdout", "fifo"])
def test_an_output_that_is_not_a_regular_file_is_refused_up_front(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, output: str
) -> None:
    """Resume reads -o: /dev/full would never end (the kernel killed isoagent at 23.8 GB),
    a pipe cannot be read back."""
    if output == "fifo":
        os.mkfifo(tmp_path / "fifo")
    tasks_file(tmp_path / "tasks.txt", ["one"])
    done = shell(
        f"isoagent batch tasks.txt -o {output} -C {shlex.quote(str(workspace))} | cat",
        env_for(api_server, tmp_path),
        tmp_path,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"isoagent: --output {output} is not a regular file: a batch resumes from its -o, "
        "so it must be one (leave -o out to write the lines to stdout)\n"
    )
    assert not api_server.requests


def test_an_output_line_longer_than_any_result_is_refused_unread(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    tasks_file(tmp_path / "tasks.txt", ["one"])
    with (tmp_path / "out.jsonl").open("wb") as out:
        out.truncate(65 << 20)  # sparse: no newline for 65 MiB
    done = run_cli(
        ["batch", "tasks.txt", "-o", "out.jsonl", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "isoagent: --output out.jsonl is not isoagent batch output (line 1 is longer than "
        "64 MiB): name another file\n"
    )
    assert not api_server.requests


def test_two_batches_on_one_output_run_no_task_twice(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Started at once on the same -o: one holds it and runs every task, the other is
    refused, naming the first's pid; the model server sees each task once."""
    api_server.handler = answer(delay=0.5)
    ids = [f"t{n}" for n in range(4)]
    tasks_file(tmp_path / "tasks.jsonl", [{"id": i, "prompt": i} for i in ids])
    args = ["batch", "tasks.jsonl", "-j", "2", "-o", "out.jsonl", "-C", str(workspace)]
    # each batch in its own process, which the refusal names (through the warm daemon it
    # names the session's process)
    env = {**env_for(api_server, tmp_path), "ISOAGENT_DAEMON": "0"}
    batches = [start_cli(args, env, cwd=tmp_path) for _ in range(2)]
    ends = [(cli.pid, *cli.communicate(timeout=120), cli.returncode) for cli in batches]

    per_task = [r.first_user_text for r in api_server.requests]
    assert sorted(per_task) == ids  # each task once
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "out.jsonl")) == ids
    codes = sorted(code for *_, code in ends)
    if codes == [0, 1]:  # they overlapped: the second was refused
        (pid, _, _, _), (_, _, refused, _) = sorted(ends, key=lambda end: end[3])
        assert refused == (
            f"isoagent: --output out.jsonl is being written by another isoagent batch "
            f"(pid {pid}): wait for it to end, or name another file\n"
        )
    else:  # one ended before the other read -o: that one had nothing left to do
        assert codes == [0, 0], ends


def test_a_batch_whose_stdout_reader_goes_exits_141_quietly(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = answer(delay=1.0)
    tasks_file(tmp_path / "tasks.txt", ["one", "two", "three"])
    done = shell(
        f"isoagent batch tasks.txt -C {shlex.quote(str(workspace))} | true; "
        'echo "status ${PIPESTATUS[0]}"',
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.stdout == "status 141\n", done.stderr
    assert "Traceback" not in done.stderr
    assert "isoagent:" not in done.stderr
