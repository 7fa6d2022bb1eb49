"""Samples, table lines, and the one table (Markdown for people, JSON for tools)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Stat:
    """Repeated samples of one quantity; the table shows the median and the spread."""

    samples: list[float]
    unit: str

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def show(self, value: float) -> str:
        if self.unit in ("ops/s", "MB/s"):
            return f"{value:,.0f} {self.unit}"
        return f"{value:.3g} {self.unit}" if value < 100 else f"{value:,.0f} {self.unit}"


@dataclass
class Line:
    """One line of the table: a measurement, or a reference it is compared with."""

    row: str
    what: str
    stat: Stat
    versus: str = ""  # "1.32x floor", "+41 ms over in-process"
    target: str = ""  # "reference" for a line others are compared with
    met: bool | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("stat")
        data.update(
            unit=self.stat.unit,
            median=self.stat.median,
            min=self.stat.min,
            max=self.stat.max,
            n=len(self.stat.samples),
            samples=self.stat.samples,
        )
        return data


def ratio(value: Stat, reference: Stat, name: str) -> str:
    return f"{value.median / reference.median:.2f}x {name}"


ORDER = (
    "child start",
    "remote start",
    "delegation",
    "batch",
    "api batches",
    "rate limit",
    "task CPU",
    "one-shot",
    "daemon",
    "memory",
    "CPU",
    "protocol",
    "CLI start",
    "parent tools",
)


def reference(row: str, what: str, stat: Stat, versus: str = "") -> Line:
    return Line(row, what, stat, versus, "reference")


def markdown(lines: list[Line], skipped: list[str]) -> str:
    out = [
        "| row | measured | median | min … max | n | vs reference | target | met |",
        "|---|---|---:|---:|---:|---|---|:---:|",
    ]
    notes: list[str] = []
    for line in sorted(lines, key=lambda line: ORDER.index(line.row)):
        marks = ""
        for note in line.notes:
            notes.append(note)
            marks += f" [{len(notes)}]"
        met = {True: "yes", False: "**no**", None: ""}[line.met]
        stat = line.stat
        out.append(
            f"| {line.row} | {line.what}{marks} | {stat.show(stat.median)} | "
            f"{stat.show(stat.min)} … {stat.show(stat.max)} | {len(stat.samples)} | "
            f"{line.versus} | {line.target} | {met} |"
        )
    out += [""] + [f"{i}. {note}" for i, note in enumerate(notes, 1)]
    out += [f"- skipped: {reason}" for reason in skipped]
    return "\n".join(out)
