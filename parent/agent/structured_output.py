"""``--json-schema``: the parent's answer as JSON that fits a schema, as Claude Code gets it.

Claude Code offers the model a ``StructuredOutput`` tool whose input schema is the user's;
the model must call it once, at the end. A call that does not fit is an error result the
model reads (``Output does not match required schema: /answer: must be integer``); after
five such calls the run ends (``error_max_structured_output_retries``). The last valid
input is the result's ``structured_output``, and its JSON text the ``result``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from isoagent.child.agent.loop import LoopEnd
from isoagent.child.agent.tools.base import Tool, ToolContext, ToolOutput
from isoagent.protocol import Result, ToolSpec

TOOL_NAME = "StructuredOutput"
MAX_FAILURES = 5  # Claude Code's
# what Claude Code tells a model that answered without the tool (once)
ENFORCE = (
    "[structured-output-enforce] You MUST call the StructuredOutput tool to complete this "
    "request. Call this tool now."
)


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` if it is a JSON schema (an object a validator accepts); a ``ValueError``
    says why not."""
    from jsonschema import SchemaError, validators

    if not isinstance(schema, dict):
        raise ValueError("a JSON schema must be a JSON object")
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"not a valid JSON schema: {exc.message}") from None
    return schema


class StructuredOutputFailed(LoopEnd):
    """The model called the tool ``MAX_FAILURES`` times without a valid answer."""


class StructuredOutputTool(Tool[Any]):
    name = TOOL_NAME
    description = (
        "Use this tool to return your final response in the requested structured format. "
        "You MUST call this tool exactly once at the end of your response to provide the "
        "structured output."
    )

    def __init__(self, ctx: ToolContext, schema: dict[str, Any]) -> None:
        from jsonschema import validators

        super().__init__(ctx)
        self.schema = schema
        self.validator = validators.validator_for(schema)(schema)
        self.value: Any = None  # the last valid answer
        self.failures = 0

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.schema)

    def run(self, args: dict[str, Any]) -> ToolOutput:
        error = next(iter(sorted(self.validator.iter_errors(args), key=str)), None)
        if error is None:
            self.value = args  # the answer: the turn ends with it, as in Claude Code
            return ToolOutput("Structured output provided successfully", ends_turn=True)
        where = "".join(f"/{part}" for part in error.absolute_path)
        problem = f"Output does not match required schema: {where or '/'}: {error.message}"
        self.failures += 1
        if self.failures >= MAX_FAILURES:
            raise StructuredOutputFailed(
                f"Failed to provide valid structured output after {MAX_FAILURES} attempts — "
                f"last {TOOL_NAME} error: {problem}"
            )
        return ToolOutput(problem, is_error=True)

    @property
    def exhausted(self) -> bool:
        """Whether the run ended for want of a valid answer."""
        return self.failures >= MAX_FAILURES

    def result(self, result: Result) -> Result:
        """The run's ``result`` with the answer as its text: its JSON, compact, as Claude
        Code writes it."""
        if result.status != "ok" or self.value is None:
            return result
        text = json.dumps(self.value, separators=(",", ":"), ensure_ascii=False)
        return msgspec.structs.replace(result, summary=text)
