"""Whether a value is of the type an annotation names, and how to say what it should be:
``Options`` checks each field with these when it is built."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

_NAMES = {bool: "True or False", int: "int", float: "number", str: "str"}


def conforms(value: Any, hint: Any) -> bool:
    """``value`` is of type ``hint`` (``Literal``, unions, ``Sequence[X]``, ``Mapping[K, V]``,
    classes). A str is no ``Sequence``: where one is welcome, the hint says ``str |``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin is Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is Sequence or origin is list or origin is tuple:
        return (
            isinstance(value, Sequence)
            and not isinstance(value, str | bytes)
            and all(conforms(item, args[0]) for item in value)
        )
    if origin is Mapping or origin is dict:
        return isinstance(value, Mapping) and all(
            conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items()
        )
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def describe(hint: Any, article: bool = True) -> str:
    """``hint`` for people: "'auto', 'off' or 'on'", "a list of str or Path", "an int"."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType, Literal):
        return _either([_word(arg, article) for arg in _flat(hint)])
    if origin in (Sequence, list, tuple):
        return ("a " if article else "") + f"list of {describe(args[0], False)}"
    if origin in (Mapping, dict):
        of = f"{describe(args[0], False)} to {describe(args[1], False)}"
        return ("a " if article else "") + f"mapping of {of}"
    return _word(hint, article)


def _flat(hint: Any) -> list[Any]:
    """A union's members and a ``Literal``'s values, nested ones flattened, as ``_word``s."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return [member for arg in typing.get_args(hint) for member in _flat(arg)]
    if typing.get_origin(hint) is Literal:
        return [_Value(arg) for arg in typing.get_args(hint)]
    return [hint]


class _Value:
    def __init__(self, value: Any) -> None:
        self.value = value


def _word(hint: Any, article: bool) -> str:
    if isinstance(hint, _Value):
        return repr(hint.value)
    if hint is None or hint is type(None):
        return "None"
    if hint is Any:
        return "anything"
    if typing.get_origin(hint) is not None:
        return describe(hint, article)
    name = _NAMES.get(hint, getattr(hint, "__name__", str(hint)))
    if not article or hint is bool:
        return name
    return ("an " if name[0] in "aeiou" else "a ") + name


def literals(hint: Any) -> list[Any]:
    """The values a ``Literal`` in ``hint`` allows (none: it has no ``Literal``)."""
    if typing.get_origin(hint) is Literal:
        return list(typing.get_args(hint))
    return [value for arg in typing.get_args(hint) for value in literals(arg)]


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
