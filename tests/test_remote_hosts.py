"""``--hosts`` and ``--launcher`` as written by a user: parsed, refused with a reason, placed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from isoagent.parent.children.hosts import HostEntry, HostSpecError, parse_hosts
from isoagent.parent.children.remote import HostPool, Launcher, LauncherError, NoHostLeft
from tests.support.cli import run_cli


def test_a_comma_list_gives_names_and_slots_one_by_default() -> None:
    assert parse_hosts("hostA:8, hostB,local:2") == [
        HostEntry("hostA", 8),
        HostEntry("hostB", 1),
        HostEntry("local", 2),
    ]


def test_a_hosts_file_has_one_entry_a_line_with_comments(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("# the pool\nnode1:4\n\nnode2:2  # the small one\n")
    assert parse_hosts(f"@{tmp_path / 'hosts'}") == [HostEntry("node1", 4), HostEntry("node2", 2)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no host in --hosts"),
        ("a:0", "slots must be a whole number of at least 1"),
        ("a:x", "slots must be a whole number"),
        (":3", "is not a host name[:slots]"),
        ("-oProxyCommand=x", "is not a host name"),  # never an option to the launcher
        ("a:1,a:2", "host 'a' is listed twice"),
        ("@/nonexistent/hosts", "cannot read the hosts file /nonexistent/hosts"),
    ],
)
def test_a_bad_spec_is_refused_with_the_reason(spec: str, message: str) -> None:
    with pytest.raises(HostSpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_hosts(spec)


def test_ssh_gets_the_remote_command_quoted_and_a_control_socket_per_host() -> None:
    launcher = Launcher("ssh -T {host} --", "/opt/my python/bin/python3")
    argv = launcher.argv(HostEntry("node1"))
    assert argv[:1] == ["ssh"] and "node1" in argv
    assert argv[argv.index("--") + 1 :] == [
        "'/opt/my python/bin/python3'", "-E", "-s", "-P", "-m", "isoagent.child"
    ]  # fmt: skip
    control = [word for word in argv if word.startswith("ControlPath=")]
    assert len(control) == 1 and launcher.argv(HostEntry("node2")) != argv
    launcher.close()


def test_other_engines_get_plain_words_and_no_ssh_options() -> None:
    launcher = Launcher("srun -u -N1 -n1 --", "python3")
    assert launcher.argv(HostEntry("slurm", 64)) == [
        "srun", "-u", "-N1", "-n1", "--", "python3", "-E", "-s", "-P", "-m", "isoagent.child"
    ]  # fmt: skip
    assert not launcher.places  # no {host}: the engine places the child


def test_a_template_with_its_own_control_path_is_left_alone() -> None:
    launcher = Launcher("ssh -o ControlPath=/tmp/mine -T {host} --", "python3")
    assert sum("ControlPath" in word for word in launcher.argv(HostEntry("h"))) == 1


def test_an_unparsable_template_is_refused() -> None:
    with pytest.raises(LauncherError, match="--launcher"):
        Launcher("ssh 'unclosed", "python3")


def test_the_pool_fills_the_freest_host_first_the_first_listed_on_a_tie() -> None:
    async def order() -> list[str]:
        pool = HostPool([HostEntry("a", 1), HostEntry("b", 2)])
        return [(await pool.acquire()).name for _ in range(3)]

    assert asyncio.run(order()) == ["b", "a", "b"]


def test_a_retry_waits_for_a_host_it_has_not_tried_while_one_is_up() -> None:
    async def scenario() -> str:
        pool = HostPool([HostEntry("a", 1), HostEntry("b", 1)])
        a = await pool.acquire()
        b = await pool.acquire()
        waiting = asyncio.ensure_future(pool.acquire(tried={"a"}))
        pool.release(a, launched=False)
        await asyncio.sleep(0.05)
        assert not waiting.done()  # a is free, but it was tried and b is up
        pool.release(b, launched=True)
        return (await waiting).name

    assert asyncio.run(scenario()) == "b"


def test_three_failed_launches_in_a_row_mark_a_host_down_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def scenario() -> list[str]:
        pool = HostPool([HostEntry("bad"), HostEntry("good")])
        placed = []
        for launched in (False, True, False, False, False, False, False):
            host = await pool.acquire(tried={"good"})  # bad, while it is up
            placed.append(host.name)
            pool.release(host, launched)
        return placed

    assert asyncio.run(scenario()) == ["bad"] * 5 + ["good"] * 2
    assert capsys.readouterr().err.count("isoagent: host bad marked down") == 1


def test_when_every_host_is_down_there_is_no_host_left() -> None:
    async def scenario() -> None:
        pool = HostPool([HostEntry("only")])
        for _ in range(3):
            pool.release(await pool.acquire(), launched=False)
        await pool.acquire()

    with pytest.raises(NoHostLeft):
        asyncio.run(scenario())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hosts", "a:0"], "isoagent: 'a:0' in --hosts: slots must be a whole number"),
        (["--hosts", "a", "--launcher", "ssh 'x"], 'isoagent: --launcher "ssh \'x": '),
        (["--retries", "5"], "isoagent: without --hosts, --retries cannot be used"),
    ],
)
def test_the_cli_refuses_unusable_remote_options_in_one_line(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = run_cli(["task", "go", *args], {**os.environ, "ANTHROPIC_API_KEY": "x"}, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
