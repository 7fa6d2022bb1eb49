"""A run's timeline as one self-contained HTML page (``isoagent logs RUN --html``).

The parent and each child are bars on one time axis, from the times their transcripts were
written (``Event.timestamp``, one clock: the parent's). A bar's pieces follow its
conversation: a model call runs from the message that asked (the prompt, or the tools'
results) to the answer, so it includes any wait for a slot or the rate limit; the tools run
from the answer to the next results message, and a parent's ``Agent`` calls are its waits for
children. A child started by a child (``--max-depth 2``) is drawn under it, its name
indented; a batch has no parent agent, so no lane for one. The drawing scales to the page's
width; agents' names get the column they need; a tool call too short to see is drawn
``MIN_PIECE`` wide, over the model calls around it. Inline CSS and SVG only: no script, no
network; the details of each piece are in its tooltip (SVG ``<title>``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import Literal

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.parent.records.figures import duration, plural, tokens, usd
from isoagent.parent.records.past_run import AgentLog, PastRun
from isoagent.parent.records.terminal_text import shorten
from isoagent.protocol import ToolUseBlock, Usage

Kind = Literal["starting", "model", "tools", "children"]
COLOURS: dict[Kind, str] = {
    "starting": "#94a3b8",
    "model": "#2563eb",
    "tools": "#f59e0b",
    "children": "#8b5cf6",
}
TRACK = "#e2e8f0"  # a bar's whole life, under its pieces
LEGEND: dict[Kind, str] = {
    "starting": "starting (process, Hello, Task)",
    "model": "model call (with waits for a slot or the rate limit)",
    "tools": "tool calls",
    "children": "waiting for children (task)",
}

WIDTH = 1200  # the drawing's own width; the page scales it to its own
NAME_CHARACTER = 7.5  # pixels of a character of an agent's name, about (13px, semibold)
NAME_LIMIT = 64  # characters of a name and description shown before it is cut
MIN_PIECE = 3.0  # pixels: a tool call shorter than this still shows
LANE = 46  # one agent's height
BAR = 26
AXIS = 30


class NoTimes(Exception):
    """The run's transcripts carry no times: written before they did, or empty."""


@dataclass
class Piece:
    start: float  # seconds since the run started
    end: float
    kind: Kind
    title: str


@dataclass
class Lane:
    agent: AgentLog
    name: str
    description: str
    start: float
    end: float
    pieces: list[Piece] = field(default_factory=list)
    depth: int = 0  # 1 for a child of the parent's, 2 for a child's child

    @property
    def label(self) -> str:
        name = f"{self.name}: {self.description}" if self.description else self.name
        return "  " * max(self.depth - 1, 0) + shorten(name, NAME_LIMIT, "…")


def lanes(run: PastRun) -> list[Lane]:
    """The run's parent and children as lanes, their times in seconds since it started."""
    times = [e.timestamp for a in run.agents for e in a.events if e.timestamp is not None]
    if not times or run.start is None or run.start.timestamp is None:
        raise NoTimes(f"run {run.run_id} has no times in its transcripts: no timeline to draw")
    origin = run.start.timestamp
    last = run.final.timestamp if run.final and run.final.timestamp else max(times)
    end = _seconds(last, origin)
    # a batch's session has no agent of its own: its tasks are the lanes
    result = [_lane(run.parent, origin, 0.0, end)] if run.parent.messages else []

    def add(asking: str, depth: int) -> None:
        for child in run.children_of(asking):
            started = child.started.timestamp if child.started else None
            finished = child.finished.timestamp if child.finished else None
            start, stop = _seconds(started, origin), _seconds(finished, origin) or end
            result.append(_lane(child, origin, start, stop))
            result[-1].depth = depth
            add(child.child, depth + 1)

    add("", 1)
    return result


def _seconds(at: datetime | None, origin: datetime) -> float:
    return max((at - origin).total_seconds(), 0.0) if at is not None else 0.0


def _lane(agent: AgentLog, origin: datetime, start: float, end: float) -> Lane:
    if agent.child:
        description = agent.started.description if agent.started else ""
        lane = Lane(agent, f"{agent.child} {agent.agent}", description, start, end)
    else:
        lane = Lane(agent, "parent" if agent.messages else "session", "", start, end)
    asked: float | None = None  # when the pending model call was asked
    tools: Piece | None = None  # the tool calls running since the last answer
    for message in agent.messages:
        at = _seconds(message.timestamp, origin)
        if message.role == "user":
            if tools is not None:
                tools.end = at
                tools = None
            elif not lane.pieces and agent.child:  # its prompt: the process is up
                lane.pieces.append(Piece(start, at, "starting", "starting: process, Hello, Task"))
            asked = at
            continue
        usage = message.usage or Usage()
        cost = agent.price(message)
        said = f"turn {message.turn + 1}: model call, {tokens(usage.total)}, {usd(cost)}"
        lane.pieces.append(Piece(asked if asked is not None else at, at, "model", said))
        asked = None
        names = [b.name for b in message.content if isinstance(b, ToolUseBlock)]
        if names:
            kind: Kind = "children" if TASK_TOOL in names else "tools"
            tools = Piece(at, end, kind, f"turn {message.turn + 1}: " + ", ".join(names))
            lane.pieces.append(tools)
    for piece in lane.pieces:
        piece.title += f" ({duration(piece.end - piece.start)}, from {duration(piece.start)})"
    return lane


def timeline_page(run: PastRun) -> str:
    """The whole page: a heading with the run's totals, the bars, a legend, a table."""
    drawn = lanes(run)
    span = max(max(lane.end for lane in drawn), 0.001)
    step = _tick_step(span)
    names = max(len(lane.label) for lane in drawn)
    label_width = round(16 + NAME_CHARACTER * max(names, 24))
    plot_width = WIDTH - label_width - 60
    scale = plot_width / (math.ceil(span / step) * step)
    height = AXIS + LANE * len(drawn) + 10
    svg = [
        f'<svg viewBox="0 0 {WIDTH} {height}" width="100%" '
        'preserveAspectRatio="xMinYMin meet" shape-rendering="crispEdges" role="img">'
    ]
    ticks = math.ceil(span / step)
    for i in range(ticks + 1):
        x = label_width + i * step * scale
        svg.append(
            f'<line x1="{x:.1f}" y1="{AXIS - 6}" x2="{x:.1f}" y2="{height - 6}" class="grid"/>'
        )
        svg.append(f'<text x="{x:.1f}" y="{AXIS - 12}" class="tick">{_tick_label(i * step)}</text>')
    for index, lane in enumerate(drawn):
        svg.extend(_lane_svg(lane, AXIS + index * LANE, label_width, scale))
    svg.append("</svg>")
    final = run.final
    seconds = f", {duration(final.result.duration)}" if final else ""
    started = run.start.timestamp if run.start else None
    when = f"started {started:%Y-%m-%d %H:%M:%S} UTC · " if started else ""
    heading = (
        f"{when}{escape(run.status)}, {plural(len(run.children), 'child', 'children')}, "
        f"{plural(run.turns, 'turn')}, {plural(run.tool_calls, 'tool call')}, "
        f"{tokens(run.usage.total)}, {usd(run.cost)}{seconds}"
    )
    legend = "".join(
        f'<span class="key"><i style="background:{COLOURS[kind]}"></i>{escape(text)}</span>'
        for kind, text in LEGEND.items()
    )
    return _PAGE.format(
        title=escape(f"isoagent run {run.run_id}"),
        run_id=escape(run.run_id),
        label=escape(shorten(run.label, 160, "…")),
        heading=heading,
        legend=legend,
        svg="\n".join(svg),
        rows="\n".join(_row(lane, run) for lane in drawn),
        bars=len(drawn),
    )


def _lane_svg(lane: Lane, top: int, label_width: int, scale: float) -> list[str]:
    agent = lane.agent
    x = label_width + lane.start * scale
    width = max((lane.end - lane.start) * scale, 2.0)
    y = top + (LANE - BAR) // 2
    status = "ok" if not agent.child else agent.status
    failed = status not in ("ok", "unfinished")
    title = f"{lane.name}: {duration(lane.end - lane.start)}, {tokens(agent.usage.total)}"
    indent = 8 + NAME_CHARACTER * 2 * max(lane.depth - 1, 0)
    parts = [
        f'<g class="bar" data-agent="{escape(lane.name)}">',
        f'<text x="{indent:.0f}" y="{y + 11}" class="name" xml:space="preserve">'
        f"{escape(lane.label.lstrip())}</text>",
        f'<text x="{indent:.0f}" y="{y + 25}" class="facts">{tokens(agent.usage.total)} · '
        f"{usd(agent.cost)} · {plural(agent.turns, 'turn')}</text>",
        f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{BAR}" fill="{TRACK}">'
        f"<title>{escape(title)}</title></rect>",
    ]
    # model calls first: a tool call too short to see is drawn over them, never under
    for piece in sorted(lane.pieces, key=lambda piece: piece.kind == "tools"):
        px = label_width + piece.start * scale
        pw = max((piece.end - piece.start) * scale, MIN_PIECE if piece.kind == "tools" else 1.5)
        parts.append(
            f'<rect x="{px:.1f}" y="{y + 3}" width="{pw:.1f}" height="{BAR - 6}" '
            f'fill="{COLOURS[piece.kind]}"><title>{escape(piece.title)}</title></rect>'
        )
    if failed:
        parts.append(
            f'<text x="{x + width + 6:.1f}" y="{y + 18}" class="failed">{escape(status)}</text>'
        )
    parts.append("</g>")
    return parts


def _row(lane: Lane, run: PastRun) -> str:
    agent = lane.agent
    result = agent.result if agent.child else (run.final.result if run.final else None)
    cells = [
        "↳ " * max(lane.depth - 1, 0) + lane.name,
        shorten(lane.description, 60, "…"),
        agent.status if agent.child else run.status,
        str(agent.turns),
        str(agent.tool_calls),
        f"{agent.usage.total:,}",
        usd(agent.cost),
        duration(result.duration if result else lane.end - lane.start),  # as logs says it
        str(agent.finished.retries if agent.finished else ""),
        shorten(result.error, 120, "…") if result else "",
    ]
    return "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>"


def _tick_step(span: float) -> float:
    """1, 2 or 5 times a power of ten: at most ten ticks over ``span`` seconds."""
    power = 10 ** math.floor(math.log10(span / 10)) if span > 0 else 1
    return next(m * power for m in (1, 2, 5, 10) if span / (m * power) <= 10)


def _tick_label(value: float) -> str:
    return f"{value:g}s"


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: #0f172a;
  margin: 24px; background: #fff; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }}
p {{ margin: 0 0 12px; color: #334155; }}
.legend {{ display: flex; flex-wrap: wrap; gap: 18px; margin: 8px 0 12px; color: #334155; }}
.key i {{ display: inline-block; width: 12px; height: 12px; margin-right: 6px;
  vertical-align: -1px; }}
svg text {{ font-family: system-ui, sans-serif; fill: #0f172a; }}
.name {{ font-size: 13px; font-weight: 600; }}
.facts {{ font-size: 11px; fill: #475569; }}
.tick {{ font-size: 11px; text-anchor: middle; fill: #475569; }}
.grid {{ stroke: #f1f5f9; stroke-width: 1; }}
.failed {{ font-size: 12px; font-weight: 600; fill: #b91c1c; }}
table {{ border-collapse: collapse; margin-top: 16px; font-size: 13px; }}
th, td {{ padding: 3px 10px; border-bottom: 1px solid #e2e8f0; text-align: left; }}
th {{ color: #475569; font-weight: 600; }}
</style></head>
<body data-bars="{bars}">
<h1>run {run_id}</h1>
<p>{label}<br>{heading}</p>
<div class="legend">{legend}</div>
{svg}
<table><tr><th>agent</th><th>description</th><th>status</th><th>turns</th><th>tool calls</th>
<th>tokens</th><th>cost</th><th>time</th><th>retries</th><th>error</th></tr>
{rows}
</table>
</body></html>
"""
