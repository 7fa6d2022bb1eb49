"""Children through Slurm's ``srun -u`` on a one-node cluster that the test starts from a
temporary folder (munged, slurmctld, slurmd: the README's recipe); skipped, with the
reason, where Slurm is not installed or the test is not root."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support import slurm
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.remote_runs import run_batch, run_task

pytestmark = pytest.mark.skipif(bool(slurm.unavailable()), reason=slurm.unavailable() or "-")

PROBE = 'echo "job=${SLURM_JOB_ID:-none} depth=$ISOAGENT_DEPTH"'


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm.MiniSlurm]:
    running = slurm.MiniSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


def through(launcher: str, hosts: str) -> list[str]:
    return ["--hosts", hosts, "--launcher", launcher, "--remote-python", sys.executable]


def probe(req: Request) -> Reply:
    if req.turn == 0:
        return tool_reply("Bash", {"command": PROBE})
    return text_reply(req.tool_results[0]["content"])


def test_the_engine_places_children_when_the_template_names_no_host(
    api_server: MessagesServer, cluster: slurm.MiniSlurm, tmp_path: Path
) -> None:
    api_server.handler = probe
    args = ["-C", str(tmp_path), *through("srun -u -N1 -n1 --", "slurm:2")]
    done, records = run_batch(3, args, cluster.env(cli_env(api_server)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(records) == 3 and all(r["status"] == "ok" for r in records), records
    # srun exports the whole environment to the job; the child keeps only its allow-list
    assert all(r["summary"].strip() == "job=none depth=1" for r in records), records


def test_an_allocation_error_is_a_launch_failure(
    api_server: MessagesServer, cluster: slurm.MiniSlurm, tmp_path: Path
) -> None:
    api_server.handler = probe
    node = socket.gethostname()
    args = ["-C", str(tmp_path), *through("srun -u -N1 -n1 -w {host} --", f"x-none:1,{node}:1")]
    done = run_task(args, cluster.env(cli_env(api_server)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "job=none depth=1", done.stderr
    assert "did not start on host x-none" in done.stderr, done.stderr
