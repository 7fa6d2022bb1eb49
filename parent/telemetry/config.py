"""Whether telemetry is on and where it goes, from the environment.

On with ``CLAUDE_CODE_ENABLE_TELEMETRY=1`` (Claude Code's switch) or an exporter named in
``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``; off with ``OTEL_SDK_DISABLED=true``.
The rest is the OTel SDK's own: ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``_HEADERS``, ``_TIMEOUT``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``... An endpoint alone turns nothing on:
it is often set for other programs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Signal = Literal["TRACES", "METRICS"]

_TRUE = {"1", "true", "yes", "on"}


def telemetry_enabled(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("CLAUDE_CODE_ENABLE_TELEMETRY", "").strip().lower() in _TRUE:
        return True
    signals: tuple[Signal, ...] = ("TRACES", "METRICS")
    return any(exporter_names(env, s) for s in signals if env.get(f"OTEL_{s}_EXPORTER"))


def exporter_names(env: Mapping[str, str], signal: Signal) -> list[str]:
    """The exporters ``OTEL_<signal>_EXPORTER`` names (comma-separated; default otlp)."""
    names = [name.strip() for name in env.get(f"OTEL_{signal}_EXPORTER", "otlp").split(",")]
    return [name for name in names if name and name != "none"]


def otlp_protocol(env: Mapping[str, str], signal: Signal) -> str:
    """``OTEL_EXPORTER_OTLP_<signal>_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
    the SDKs' default, http/protobuf."""
    return (
        env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()


class TelemetryUnavailable(Exception):
    """The environment asks for telemetry isoagent cannot export; it stays off."""
