"""The claude-agent-sdk's own e2e tests, run against the in-test server instead of the API:
a pytest plugin for a checkout of the SDK's repository (not part of this project's suite).

    cd SDK-CHECKOUT && PYTHONPATH=ISOAGENT-CHECKOUT ISOAGENT-CHECKOUT/.venv/bin/pytest \\
        -p tests.support.sdk_e2e -p anyio -o pythonpath= -o addopts= e2e-tests --sdk-cli isoagent

``--sdk-cli claude`` runs the Claude Code the installed SDK bundles instead (the reference).
The installed SDK is used, never the checkout's ``src`` (``-o pythonpath=``). Each test gets
a fresh ``HOME``; the model is ``sdk_model.play``; a failing test's report lists the model
calls it made.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

from tests.support.messages_server import MessagesServer
from tests.support.sdk_model import describe, play

CLIS = {
    "isoagent": Path(sys.executable).with_name("isoagent"),
    "claude": Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude",
}
_server = MessagesServer(play)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sdk-cli", choices=sorted(CLIS), default="isoagent")


def pytest_configure(config: pytest.Config) -> None:
    cli = str(CLIS[config.getoption("--sdk-cli")])
    SubprocessCLITransport._find_cli = lambda self: cli  # type: ignore[method-assign]
    _server.start()
    for name in [n for n in os.environ if n.startswith(("ANTHROPIC_", "ISOAGENT_", "CLAUDE"))]:
        del os.environ[name]
    os.environ.update(
        ANTHROPIC_BASE_URL=_server.base_url,
        ANTHROPIC_API_KEY="test-key",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        ISOAGENT_WARM_GATEWAY="0",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    _server.stop()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Passed of run, per test file, for the CLI the run used."""
    tally: dict[str, list[int]] = {}
    for outcome in ("passed", "failed", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if report.when == "call" or outcome == "error":
                counts = tally.setdefault(report.nodeid.split("::")[0], [0, 0])
                counts[0] += outcome == "passed"
                counts[1] += 1
    cli = config.getoption("--sdk-cli")
    terminalreporter.write_sep("-", f"passed with {cli}, per file")
    for path, (passed, run) in sorted(tally.items()):
        terminalreporter.write_line(f"{passed:3} / {run:<3} {path}")
    total = [sum(c[0] for c in tally.values()), sum(c[1] for c in tally.values())]
    terminalreporter.write_line(f"{total[0]:3} / {total[1]:<3} in all")


@pytest.fixture(autouse=True)
def _fresh_home_and_model(request: pytest.FixtureRequest) -> Iterator[None]:
    saved = os.environ.get("HOME")
    with tempfile.TemporaryDirectory(prefix="sdk-e2e-home-") as home:
        os.environ["HOME"] = home
        _server.reset(play)
        try:
            yield
        finally:
            calls = "\n".join(describe(r) for r in _server.requests)
            request.node.add_report_section("call", "model calls", calls)
            if saved is not None:
                os.environ["HOME"] = saved
