"""Help a person can read: everyday options first and the rest by group, ``-h`` everywhere,
a bare ``isoagent`` is its help, and a near miss is told what was meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from isoagent.parent.cli.main import COMMANDS
from tests.support.cli import run_cli

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def isoagent(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    done = run_cli(args, ENV, cwd=tmp_path)
    return done.returncode, done.stdout, done.stderr


def test_a_bare_isoagent_prints_its_help_and_succeeds(tmp_path: Path) -> None:
    code, out, err = isoagent([], tmp_path)
    assert (code, err) == (0, "")
    assert out.startswith("Usage: isoagent [OPTIONS] [COMMAND]") and "Commands:" in out


@pytest.mark.parametrize("command", [[], ["-p"], *([name] for name in sorted(COMMANDS))])
def test_dash_h_is_help_everywhere(command: list[str], tmp_path: Path) -> None:
    for flag in ("-h", "--help"):
        code, out, err = isoagent([*command, flag], tmp_path)
        assert (code, err) == (0, ""), (command, flag, err)
        assert out.startswith("Usage: isoagent"), out


def test_print_modes_help_is_its_own(tmp_path: Path) -> None:
    code, out, _ = isoagent(["-p", "--help"], tmp_path)
    assert code == 0 and "--permission-mode" in out and "--output-format" in out


@pytest.mark.parametrize(
    ("args", "meant"),
    [(["runn", "go"], "'run'"), (["tsak", "go"], "'task'"), (["agent"], "'agents'")],
)
def test_a_mistyped_command_is_told_the_one_it_is_close_to(
    args: list[str], meant: str, tmp_path: Path
) -> None:
    code, out, err = isoagent(args, tmp_path)
    assert code == 2 and out == ""
    assert err.startswith(f"isoagent: No such command '{args[0]}'. Did you mean {meant}?")


def test_a_command_close_to_none_is_told_no_guess(tmp_path: Path) -> None:
    code, _, err = isoagent(["zzzz"], tmp_path)
    assert code == 2 and "No such command 'zzzz'." in err and "Did you mean" not in err


@pytest.mark.parametrize("command", ["task", "batch"])
def test_an_agent_type_in_the_wrong_case_is_told_the_right_one(
    command: str, tmp_path: Path
) -> None:
    args = [command, "--agent", "explore", "-" if command == "batch" else "go"]
    done = run_cli(args, ENV, cwd=tmp_path, input="go\n")
    assert done.returncode == 2
    assert "unknown agent 'explore'; did you mean 'Explore'? choose one of: " in done.stderr


@pytest.mark.parametrize("command", ["run", "task", "batch"])
def test_help_shows_the_everyday_options_and_names_the_others_by_group(
    command: str, tmp_path: Path
) -> None:
    _, short, _ = isoagent([command, "--help"], tmp_path)
    _, full, _ = isoagent([command, "--help-all"], tmp_path)
    assert len(short.splitlines()) < len(full.splitlines()) // 2
    options = short.split("\nOptions:\n")[1].split("\n\n")[0]
    for everyday in ("--model", "--max-turns", "--workdir", "--timeout", "--verbose"):
        assert everyday in options
    assert "\n  --child-network " not in options and "\n  --hosts " not in options
    for group in ("Sandbox and network:", "Limits:", "Children on other machines:"):
        assert group in short and group in full
    assert "  --hosts, --launcher," in short  # named, not explained
    assert "--hosts SPEC" in full and "Run children on these hosts" in full
    assert f"Every option in full: isoagent {command} --help-all" in short


@pytest.mark.parametrize("command", ["task", "batch"])
def test_model_help_of_a_command_without_a_parent_speaks_of_no_parent(
    command: str, tmp_path: Path
) -> None:
    _, full, _ = isoagent([command, "--help-all"], tmp_path)
    model = full.split("--model TEXT")[1].split("--max-turns")[0]
    assert "parent" not in model and "subagents" in model


def test_batch_has_one_name_for_how_many_run_at_once(tmp_path: Path) -> None:
    _, full, _ = isoagent(["batch", "--help-all"], tmp_path)
    assert "-j, --jobs" in full and "--max-parallel" not in full
    assert "See the README" not in full and "half the price" in full
    # the older spelling still works
    done = run_cli(["batch", "-", "--max-parallel", "2", "--agent", "nope"], ENV, cwd=tmp_path)
    assert done.returncode == 2 and "unknown agent 'nope'" in done.stderr


def test_logs_o_without_html_is_refused_not_ignored(tmp_path: Path) -> None:
    code, out, err = isoagent(["logs", "-o", "page.html"], tmp_path)
    assert code == 2 and out == "" and "-o is where --html writes its page" in err
    assert not (tmp_path / "page.html").exists()
