"""``isoagent demo``: offline, scripted model turns, real children, files and transcripts."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from isoagent.parent.cli.demo import (
    CASSETTE,
    EXAMPLES,
    SAMPLE_PROJECT,
    Outcome,
    copy_sample_project,
    run_examples,
)
from isoagent.parent.model.cassette import ReplaySource
from tests.conftest import base_env
from tests.support.cli import ISOAGENT, read_jsonl, run_cli

STATS = re.compile(
    r"^(?P<n>\d)\. (?P<run>\S+): parent (?P<turns>\d+) turns?, (?P<calls>\d+) tool calls?; "
    r"(?P<kids>\d+) child(?:ren)? \(pid (?P<pids>[\d, ]+)\) .*; the children read "
    r"(?P<read>[\d,]+) bytes, (?P<got>[\d,]+) bytes reached the parent's context$"
)


@dataclass
class Example:
    stats: re.Match[str]
    run_dir: Path

    @property
    def parent(self) -> list[dict[str, Any]]:
        return read_jsonl(self.run_dir / "run.jsonl")

    @property
    def children(self) -> list[list[dict[str, Any]]]:
        return [read_jsonl(p) for p in sorted(self.run_dir.glob("child-*.jsonl"))]

    @property
    def answer(self) -> str:
        [final] = [e for e in self.parent if e["type"] == "result"]
        assert final["result"]["status"] == "ok"
        return final["result"]["summary"]


@dataclass
class Demo:
    done: subprocess.CompletedProcess[str]
    tmp: Path
    cwd: Path
    root: Path
    examples: list[Example]


def offline_env(**extra: str) -> dict[str, str]:
    return base_env(**extra)


def isoagent_demo(cwd: Path, tmp: Path, *python_flags: str) -> subprocess.CompletedProcess[str]:
    command = [ISOAGENT[0], *python_flags, *ISOAGENT[1:], "demo"]
    return subprocess.run(
        command,
        env=offline_env(TMPDIR=str(tmp), HOME=str(cwd)),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """One `isoagent demo` from an empty directory, with TMPDIR in a temporary folder."""
    base = tmp_path_factory.mktemp("demo")
    tmp, cwd = base / "tmp", base / "cwd"
    tmp.mkdir()
    cwd.mkdir()
    done = isoagent_demo(cwd, tmp)
    assert done.returncode == 0, done.stderr
    [transcripts] = re.findall(r"^Transcripts: (\S+) ", done.stdout, re.M)
    runs = Path(transcripts)
    examples = []
    for line in done.stdout.splitlines():
        if match := STATS.match(line):
            examples.append(Example(match, runs / match["run"]))
    return Demo(done, tmp, cwd, runs.parent, examples)


def tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        block
        for e in events
        if e["type"] == "message"
        for block in e["content"]
        if block["type"] == "tool_result"
    ]


def tool_uses(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [
        block
        for e in events
        if e["type"] == "message"
        for block in e["content"]
        if block["type"] == "tool_use" and block["name"] == name
    ]


def test_demo_says_first_that_model_turns_are_scripted(demo: Demo):
    first = demo.done.stdout.splitlines()[0]
    assert first.startswith("isoagent demo: the model turns are scripted")


def test_demo_leaves_only_the_temporary_folder_it_names(demo: Demo):
    assert list(demo.cwd.iterdir()) == []
    assert list(demo.tmp.iterdir()) == [demo.root]
    assert f"Working in a temporary copy of a sample project: {demo.root / 'project'}" in (
        demo.done.stdout
    )
    assert sorted(p.name for p in demo.root.iterdir()) == ["project", "runs"]


def test_demo_reports_each_example_from_its_transcripts(demo: Demo):
    assert [int(e.stats["n"]) for e in demo.examples] == [1, 2, 3]
    for example, prompt in zip(demo.examples, EXAMPLES, strict=True):
        parent, children = example.parent, example.children
        assert parent[0]["type"] == "init"
        assert parent[1]["content"] == [{"type": "text", "text": prompt}]
        started = [e for e in parent if e["type"] == "child_started"]
        assert example.stats["pids"] == ", ".join(str(e["pid"]) for e in started)
        assert int(example.stats["kids"]) == len(children) == len(started)
        read = sum(len(r["content"].encode()) for child in children for r in tool_results(child))
        task_ids = {use["id"] for use in tool_uses(parent, "Agent")}
        got = sum(
            len(r["content"].encode()) for r in tool_results(parent) if r["tool_use_id"] in task_ids
        )
        assert int(example.stats["read"].replace(",", "")) == read
        assert int(example.stats["got"].replace(",", "")) == got
        assert not [r for r in tool_results(parent) if r.get("is_error")]


CLOSING = re.compile(
    r"^isoagent: (?P<turns>[\d,]+) turns?, (?P<kids>\d+) child(?:ren)?, (?P<tokens>[\d,]+) "
    r"tokens, \$(?P<cost>[\d.]+); (?P<run>\S+)$",
    re.M,
)


def test_each_examples_closing_line_counts_that_example_alone_as_logs_does(demo: Demo):
    """The figures of an example's closing line are its run's, as ``logs`` reads them back
    (they once added up every example so far)."""
    closings = list(CLOSING.finditer(demo.done.stderr))
    assert len(closings) == len(demo.examples) == 3
    for closing, example in zip(closings, demo.examples, strict=True):
        assert Path(closing["run"]).name == example.run_dir.name
        args = ["logs", example.run_dir.name, "--json", "--run-dir", str(example.run_dir.parent)]
        logged = json.loads(run_cli(args, {}, cwd=demo.cwd).stdout)
        assert int(closing["turns"]) == logged["turns"]
        assert int(closing["kids"]) == logged["children"] == int(example.stats["kids"])
        assert int(closing["tokens"].replace(",", "")) == logged["tokens"]
        tree = run_cli([*args[:2], *args[3:]], {}, cwd=demo.cwd).stdout.splitlines()
        assert f", ${closing['cost']}, " in tree[0]  # the cost as logs says it
        parent_and_children = re.search(r"parent (\d+) turns?.* (\d+) turns?,", example.stats[0])
        assert parent_and_children is not None
        assert sum(map(int, parent_and_children.groups())) == logged["turns"]


def test_example_1_child_finds_pytest(demo: Demo):
    example = demo.examples[0]
    [child] = example.children
    assert child[0]["type"] == "child_started" and child[0]["agent"] == "Explore"
    seen = "\n".join(r["content"] for r in tool_results(child))
    assert "[tool.pytest.ini_options]" in seen  # the real pyproject.toml, read by the child
    assert "tests/test_pricing.py:1:import pytest" in seen  # the real grep output
    assert "pytest" in example.answer
    parent_saw = "\n".join(r["content"] for r in tool_results(example.parent))
    assert 'requires-python = ">=3.9"' in seen  # the child read the whole file
    assert "requires-python" not in parent_saw  # the parent got the summary only


def test_example_2_children_read_every_py_file(demo: Demo):
    example = demo.examples[1]
    children = example.children
    assert [c[0]["agent"] for c in children] == ["Explore", "Explore"]
    seen = "\n".join(r["content"] for child in children for r in tool_results(child))
    sources = sorted(p.relative_to(SAMPLE_PROJECT) for p in SAMPLE_PROJECT.rglob("*.py"))
    assert len(sources) == 5
    for source in sources:
        first_line = (SAMPLE_PROJECT / source).read_text().splitlines()[0]
        assert first_line in seen, source
        assert f"`{source}`" in example.answer
    assert int(example.stats["read"].replace(",", "")) > 4 * int(
        example.stats["got"].replace(",", "")
    )


def test_example_3_module_exists_and_parent_verified_it(demo: Demo):
    example = demo.examples[2]
    module = demo.root / "project" / "discounts.py"
    [child] = example.children
    [write] = tool_uses(child, "Write")
    assert write["input"]["file_path"] == "discounts.py"
    assert module.read_text() == write["input"]["content"]
    check = subprocess.run(
        [sys.executable, "-c", "import discounts; print(discounts.bulk_discount(20, 1.5))"],
        cwd=module.parent,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert check.stdout == "27.0\n", check.stderr
    [verify] = tool_uses(example.parent, "Bash")

    assert "import discounts" in verify["input"]["command"]
    [result] = [r for r in tool_results(example.parent) if r["tool_use_id"] == verify["id"]]
    assert not result.get("is_error")
    assert result["content"].strip() == "discounts OK: 27.0"


def test_demo_imports_no_anthropic(tmp_path: Path):
    done = isoagent_demo(tmp_path, tmp_path, "-X", "importtime")
    assert done.returncode == 0, done.stderr
    imported = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "isoagent.parent.session" in imported  # the trace covers the demo's own imports
    assert not [name for name in imported if name.split(".")[0] == "anthropic"]


def test_demo_recording_matches_the_sample_project_strictly(tmp_path: Path):
    """The shipped recording is current: every tool output it holds is what the tools say now."""
    copy_sample_project(tmp_path)
    source = ReplaySource(CASSETTE, "strict")
    outcomes: list[Outcome] = []
    quiet = lambda: lambda _event: None  # noqa: E731
    asyncio.run(run_examples(tmp_path, source, quiet, lambda _: None, outcomes))
    assert [o.result.status for o in outcomes] == ["ok", "ok", "ok"], outcomes[-1].result.error
