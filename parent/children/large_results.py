"""A child's Result larger than the parent holds, and the summary the parent keeps of it.

What of a child reaches the parent's context is its summary, so the parent keeps at most
``SUMMARY_LIMIT`` bytes of one (and of its error): its head, and a marker that says where
the whole text is, a file beside the child's transcript.

A frame body past ``FRAME_IN_MEMORY`` (``connection.py``) may only be a Result. It is
written to a nameless file of the run folder as it arrives (``Spool``), and decoded from a
read-only mapping of that file with its texts as ``msgspec.Raw``: views of the mapping,
not copies, so decoding touches a few pages. The summary goes from there to its file a
window at a time, each window's pages let go once written, in a thread: a 300 MB summary
costs the parent a window of memory, never the whole, and the event loop no wait.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import mmap
from collections.abc import Callable
from io import FileIO
from pathlib import Path
from typing import Any

import msgspec

from isoagent.child.agent.truncate import MARKER_ROOM, mark_cut
from isoagent.parent.children.connection import FRAME_IN_MEMORY, FrameRefused, check_decoded
from isoagent.parent.children.disk_budget import DiskBudget
from isoagent.parent.records.run_folder import RunFolder, write_all
from isoagent.protocol import FrameError, Result, Span
from isoagent.protocol.framing import frame_kind

SUMMARY_LIMIT = 1 << 20  # bytes of a child's summary, or of its error, the parent holds
WINDOW = 8 << 20  # bytes of a spooled summary mapped at once while it is copied to its file


def _default(field: msgspec.structs.FieldInfo) -> Any:
    """A field's default as ``defstruct`` takes it (a factory's, as a ``msgspec.field``)."""
    if field.default_factory is not msgspec.NODEFAULT:
        return msgspec.field(default_factory=field.default_factory)
    return field.default


# a Result whose texts and spans stay undecoded: views of the buffer it is decoded from
_RAW_TEXTS = msgspec.msgpack.Decoder(
    msgspec.defstruct(
        "Result",
        [
            (
                field.name,
                msgspec.Raw if field.type is str or field.name == "spans" else field.type,
                _default(field),
            )
            for field in msgspec.structs.fields(Result)
        ],
        tag=True,
    )
)
_SPANS = msgspec.msgpack.Decoder(list[Span])


class ResultFiles:
    """Where a child's Result goes when it is too large to hold: its transcript's folder."""

    def __init__(self, folder: RunFolder, transcript: Path, disk: DiskBudget | None = None) -> None:
        """``disk``: the child's budget, which the spool and the summary file count against."""
        self.folder = folder
        self.disk = disk or DiskBudget(0)
        self.summary_path = transcript.with_suffix(".summary.txt")
        self._spool_name = transcript.with_suffix(".frame").name

    def spool(self, length: int) -> Spool:
        """Where a frame body of ``length`` bytes goes as it arrives (``FrameAssembler``)."""
        try:
            return Spool(self, self.folder.scratch_file(self._spool_name), length)
        except OSError as exc:
            raise _unkept(length, exc) from None

    def bounded(self, result: Result) -> Result:
        """``result``, its summary and error cut to ``SUMMARY_LIMIT`` bytes."""
        if max(len(result.summary), len(result.error)) <= SUMMARY_LIMIT // 4:
            return result  # UTF-8 takes at most 4 bytes a character
        return self.cut(msgspec.structs.asdict(result))

    def cut(self, fields: dict[str, Any], release: Callable[[], None] | None = None) -> Result:
        """A Result of ``fields`` (its texts decoded, or ``Raw`` views of a spool) whose
        summary and error have at most ``SUMMARY_LIMIT`` bytes. A longer summary is kept
        whole in ``summary_path``; ``release`` is called after each window of it written."""
        summary, error = _utf8(fields["summary"]), _utf8(fields["error"])
        notes = [_text(error, "bytes")]
        where = ""
        if len(summary) > SUMMARY_LIMIT:
            where = self._keep(summary, release)
            notes.append(
                f"summary cut at {SUMMARY_LIMIT >> 20} MiB of {len(summary)} bytes; {where}"
            )
        return Result(
            **fields
            | {
                "summary": _text(summary, f"bytes ({where})"),
                "error": "; ".join(filter(None, notes)),
            }
        )

    def _keep(self, text: memoryview, release: Callable[[], None] | None) -> str:
        """Write ``text`` to ``summary_path`` a window at a time; where it is, for people."""
        try:
            self.disk.spend(len(text))
        except FrameRefused as exc:
            return f"the whole text could not be kept: the child {exc}"
        try:
            with self.folder.create_file(self.summary_path.name) as file:
                for start in range(0, len(text), WINDOW):
                    write_all(file, text[start : start + WINDOW])
                    if release is not None:
                        release()
        except OSError as exc:
            return f"the whole text could not be kept: {exc.strerror or exc}"
        return f"the whole text is in {self.folder.display(self.summary_path)}"


class Spool:
    """A frame body too large to hold, written to a nameless file as it arrives."""

    def __init__(self, files: ResultFiles, file: FileIO, length: int) -> None:
        self.files = files
        self.file = file
        self.length = length
        self.written = 0

    def write(self, piece: memoryview) -> None:
        self.files.disk.spend(len(piece))
        self.written += len(piece)
        try:
            write_all(self.file, piece)
        except OSError as exc:
            raise _unkept(self.length, exc) from None

    def frame(self) -> asyncio.Future[Result]:
        """The Result, made in a thread: copying a summary of hundreds of MB to its file
        takes seconds, which the event loop (every other child) must not wait for."""
        body = mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ)
        return asyncio.get_running_loop().run_in_executor(None, self._result, body)

    def _result(self, body: mmap.mmap) -> Result:
        try:
            kind = frame_kind(body)
            try:
                fields = msgspec.structs.asdict(_RAW_TEXTS.decode(body)) if kind == "Result" else {}
                if isinstance(spans := fields.get("spans"), msgspec.Raw):
                    with memoryview(spans) as view:
                        check_decoded(view, f"a Result whose spans take {len(view)} bytes")
                    fields["spans"] = _SPANS.decode(spans)
            except (msgspec.DecodeError, RecursionError) as exc:
                raise FrameError(f"undecodable frame ({self.length} bytes): {exc}") from None
            if not fields:
                raise FrameRefused(
                    f"sent a {kind or 'frame'} of {self.length} bytes: only a Result may be "
                    f"over {FRAME_IN_MEMORY >> 20} MiB"
                )
            return self.files.cut(fields, lambda: body.madvise(mmap.MADV_DONTNEED))
        finally:
            with contextlib.suppress(BufferError):  # a view of it in a traceback: unmapped later
                body.close()

    def close(self) -> None:
        self.file.close()
        self.files.disk.give_back(self.written)  # a nameless file: gone once closed


def _unkept(length: int, exc: OSError) -> FrameRefused:
    return FrameRefused(
        f"sent a frame of {length} bytes, over the {FRAME_IN_MEMORY >> 20} MiB held in "
        f"memory, which the run folder could not take: {exc.strerror or exc}"
    )


_STR_HEADERS = {0xD9: 2, 0xDA: 3, 0xDB: 5}  # msgpack's str 8, str 16 and str 32


def _utf8(text: str | msgspec.Raw) -> memoryview:
    """A text's UTF-8 bytes: a str's, or a view of a msgpack str's (a ``Raw``)."""
    if isinstance(text, str):
        return memoryview(text.encode())
    view = memoryview(text)
    first = view[0] if view else 0
    header = 1 if 0xA0 <= first <= 0xBF else _STR_HEADERS.get(first)  # fixstr: 1
    if header is None:
        raise FrameError("a Result's summary and error must be strings")
    return view[header:]


def _text(utf8: memoryview, unit: str) -> str:
    """``utf8`` decoded; past ``SUMMARY_LIMIT`` bytes, its head and a marker at the end
    (where a reader that keeps a text's tail, as the parent's tool results do, sees it)
    that counts the bytes cut in ``unit``."""
    if len(utf8) <= SUMMARY_LIMIT:
        return str(utf8, "utf-8", "replace")
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    head = decoder.decode(utf8[: SUMMARY_LIMIT - MARKER_ROOM])  # a character cut in two: out
    kept = SUMMARY_LIMIT - MARKER_ROOM - len(decoder.getstate()[0])
    return mark_cut(head, "", len(utf8) - kept, unit)
