"""(Re)generate the demo's recording, ``parent/demo/cassette.jsonl``.

    python -m tests.support.demo_cassette

Runs the demo's three examples for real (sample project, parent loop, child
processes, tools) with a scripted model, through ``RecordingSource``. The script
is what a good model would answer for each conversation, keyed by agent and
prompt. Not needed at run time: ``isoagent demo`` only replays the recording.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from isoagent.parent.cli.demo import (
    CASSETTE,
    EXAMPLES,
    Outcome,
    copy_sample_project,
    run_examples,
)
from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.model.cassette import RecordingSource
from isoagent.protocol import (
    Block,
    ModelCall,
    ModelReply,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

FRAMEWORK_PROMPT = (
    "Find out which testing framework this project uses. Look at the test files, their "
    "imports and the project configuration, and report the framework with the evidence "
    "(file and line)."
)
LIBRARY_PROMPT = (
    "Read every .py file in the project root (not the tests/ folder) and summarize in one or "
    "two lines what each one does. Reply with one bullet per file."
)
TESTS_PROMPT = (
    "Read every .py file in the tests/ folder and summarize in one line what each one tests. "
    "Reply with one bullet per file."
)
MODULE_PROMPT = (
    "Create a new module `discounts.py` in the project root with a function "
    "`bulk_discount(quantity: int, unit_price: float) -> float` that returns the line total "
    "with 10% off when 10 or more units are bought, rounded to the cent. Follow the style of "
    "pricing.py and reuse its line_total. Check that the module imports and works before you "
    "finish."
)
DISCOUNTS_SOURCE = '''\
"""Volume discounts: cheaper by the box."""

from __future__ import annotations

from pricing import line_total

BULK_QUANTITY = 10
BULK_DISCOUNT = 0.10


def bulk_discount(quantity: int, unit_price: float) -> float:
    """Price of `quantity` units, 10% off from BULK_QUANTITY units, rounded to the cent."""
    total = line_total(quantity, unit_price)
    if quantity >= BULK_QUANTITY:
        total = round(total * (1 - BULK_DISCOUNT), 2)
    return total
'''
VERIFY_COMMAND = (
    'python3 -c "import discounts as d; '
    "assert d.bulk_discount(12, 2.5) == 27.0; "
    "assert d.bulk_discount(9, 1.0) == 9.0; "
    "assert d.bulk_discount(10, 1.0) == 9.0; "
    "print('discounts OK:', d.bulk_discount(12, 2.5))\""
)


def text(value: str) -> TextBlock:
    return TextBlock(value)


def use(id: str, name: str, **inp: Any) -> ToolUseBlock:
    return ToolUseBlock(f"toolu_demo_{id}", name, inp)


def task(id: str, description: str, prompt: str, agent: str) -> ToolUseBlock:
    return use(id, "Agent", description=description, prompt=prompt, subagent_type=agent)


# (agent, first user message) -> the model's content, turn by turn
SCRIPT: dict[tuple[str, str], list[list[Block]]] = {
    ("parent", EXAMPLES[0]): [
        [
            text("I'll hand the search to an Explore subagent, so the files it reads stay "
                 "out of my context."),
            task("1a", "Find the testing framework", FRAMEWORK_PROMPT, "Explore"),
        ],
        [
            text("This project uses **pytest** (found by a subagent):\n"
                 "- `pyproject.toml` declares `pytest>=7` as the test extra and configures it "
                 "in `[tool.pytest.ini_options]` (testpaths `tests`, `-q`);\n"
                 "- both test files import pytest and use fixtures, `pytest.raises` and "
                 "`@pytest.mark.parametrize`.\n"
                 "Run the suite with `python -m pytest`."),
        ],
    ],
    ("Explore", FRAMEWORK_PROMPT): [
        [
            text("Looking at the test files and the project configuration."),
            use("1b", "Glob", pattern="tests/**/*.py"),
            use("1c", "Read", file_path="pyproject.toml"),
        ],
        [
            use("1d", "Grep", pattern=r"pytest|unittest", glob="*.py", output_mode="content"),
            use("1e", "Read", file_path="tests/test_inventory.py"),
        ],
        [
            text("The project uses **pytest**.\n\nEvidence:\n"
                 "- pyproject.toml:9 `test = [\"pytest>=7\"]` and lines 11-13 "
                 "`[tool.pytest.ini_options]` with `testpaths = [\"tests\"]`;\n"
                 "- tests/test_inventory.py:1 and tests/test_pricing.py:1 `import pytest`; the "
                 "tests use `@pytest.fixture`, `pytest.raises` and `@pytest.mark.parametrize`;\n"
                 "- no unittest imports or TestCase classes anywhere."),
        ],
    ],
    ("parent", EXAMPLES[1]): [
        [
            text("Two independent reads: I'll start two Explore subagents at once, one for "
                 "the library modules and one for the tests."),
            task("2a", "Summarize library modules", LIBRARY_PROMPT, "Explore"),
            task("2b", "Summarize test files", TESTS_PROMPT, "Explore"),
        ],
        [
            text("What each .py file does (read by two subagents in parallel):\n"
                 "- `inventory.py`: the shelf model: `Item` (quantity, price, reorder level) "
                 "and `Inventory` to add and take stock (raising `OutOfStock`), list items to "
                 "reorder and value the shelf.\n"
                 "- `pricing.py`: price helpers: VAT (20%), line totals rounded to the cent, "
                 "the three-for-two offer and picking the cheapest offer.\n"
                 "- `report.py`: `stock_report` formats a table of items with quantities, "
                 "values, reorder flags and net/VAT totals.\n"
                 "- `tests/test_inventory.py`: pytest tests for adding, taking, reorder lists "
                 "and the shelf's value.\n"
                 "- `tests/test_pricing.py`: pytest tests for VAT rounding, refusing negative "
                 "quantities, three-for-two and tie-breaking in `cheapest`."),
        ],
    ],
    ("Explore", LIBRARY_PROMPT): [
        [use("2c", "Glob", pattern="*.py")],
        [
            use("2d", "Read", file_path="inventory.py"),
            use("2e", "Read", file_path="pricing.py"),
            use("2f", "Read", file_path="report.py"),
        ],
        [
            text("- inventory.py: `Item` (name, quantity, unit price, reorder level) and "
                 "`Inventory`, which adds and takes stock (raising `OutOfStock`), lists items "
                 "at or below their reorder level and computes the shelf's value.\n"
                 "- pricing.py: pricing helpers: `with_vat` (20% VAT), `line_total`, the "
                 "`three_for_two` offer and `cheapest` among offers, all rounded to the cent.\n"
                 "- report.py: `stock_report` renders an inventory as a text table with "
                 "quantities, values, reorder flags and net and VAT totals."),
        ],
    ],
    ("Explore", TESTS_PROMPT): [
        [use("2g", "Glob", pattern="tests/*.py")],
        [
            use("2h", "Read", file_path="tests/test_inventory.py"),
            use("2i", "Read", file_path="tests/test_pricing.py"),
        ],
        [
            text("- tests/test_inventory.py: pytest tests of `Inventory`: adding to a known "
                 "item keeps its price, taking too much raises `OutOfStock`, reorder listing "
                 "and the shelf's value.\n"
                 "- tests/test_pricing.py: pytest tests of `pricing`: VAT rounding "
                 "(parametrized), negative quantities refused, three-for-two, and tie-breaking "
                 "by name in `cheapest`."),
        ],
    ],
    ("parent", EXAMPLES[2]): [
        [
            text("I'll have a general-purpose subagent write the module, then verify it "
                 "here myself."),
            task("3a", "Create discounts module", MODULE_PROMPT, "general-purpose"),
        ],
        [
            text("The subagent reports the module is written. Verifying it from here:"),
            use("3b", "Bash", command=VERIFY_COMMAND),
        ],
        [
            text("Done. A subagent created `discounts.py` with `bulk_discount(quantity, "
                 "unit_price)`: 10% off from 10 units, built on `pricing.line_total`. I "
                 "verified it from the parent: it imports, and 12 x 2.50 = 27.00, "
                 "9 x 1.00 = 9.00 and 10 x 1.00 = 9.00 (`discounts OK: 27.0`)."),
        ],
    ],
    ("general-purpose", MODULE_PROMPT): [
        [
            text("Reading pricing.py for its style and line_total."),
            use("3c", "Read", file_path="pricing.py"),
        ],
        [use("3d", "Write", file_path="discounts.py", content=DISCOUNTS_SOURCE)],
        [
            use(
                "3e",
                "Bash",
                command='python3 -c "from discounts import bulk_discount as b; '
                'print(b(12, 2.5), b(3, 2.0))"',
            )
        ],
        [
            text("Created discounts.py with `bulk_discount(quantity, unit_price)`: it uses "
                 "`pricing.line_total` and takes 10% off from 10 units (`BULK_QUANTITY`), "
                 "rounded to the cent. Checked: bulk_discount(12, 2.5) = 27.0 and "
                 "bulk_discount(3, 2.0) = 6.0."),
        ],
    ],
}  # fmt: skip

_encoder = msgspec.json.Encoder()


class ScriptedModel:
    """A ModelSource answering from SCRIPT; a tool error on the way is a broken script."""

    async def aclose(self) -> None:
        pass

    async def complete(self, call: ModelCall) -> ModelReply:
        first = call.messages[0].content[0]
        assert isinstance(first, TextBlock)
        turns = SCRIPT[(call.agent, first.text)]
        for message in call.messages:
            for block in message.content:
                if isinstance(block, ToolResultBlock) and block.is_error:
                    raise RuntimeError(f"{call.agent}: a scripted tool call failed: {block}")
        content = turns[call.turn]
        has_tools = any(isinstance(b, ToolUseBlock) for b in content)
        usage = Usage(
            len(_encoder.encode(call.messages)) // 4 + 900, len(_encoder.encode(content)) // 4
        )
        return ModelReply(call.turn, content, "tool_use" if has_tools else "end_turn", usage)


class KeptOpen:
    """The one recording of the three examples, each a session that closes its source."""

    def __init__(self, inner: RecordingSource) -> None:
        self.inner = inner

    async def complete(self, call: ModelCall) -> ModelReply:
        return await self.inner.complete(call)

    async def aclose(self) -> None:
        pass


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="isoagent-demo-script-"))
    recording = RecordingSource(ScriptedModel(), CASSETTE)
    try:
        copy_sample_project(root)
        outcomes: list[Outcome] = []
        display = lambda: ProgressDisplay(verbose=True)  # noqa: E731
        asyncio.run(run_examples(root, KeptOpen(recording), display, print, outcomes))
    finally:
        asyncio.run(recording.aclose())
        shutil.rmtree(root)

    failed = [o for o in outcomes if o.result.status != "ok"]
    if failed or len(outcomes) != len(EXAMPLES):
        print(f"the script failed: {failed[0].result.error if failed else 'stopped'}")
        return 1
    print(f"wrote {CASSETTE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
