"""The OpenTelemetry SDK: a run's spans and counters exported as the environment says.

Imported only when telemetry is on. A span reaches the SDK once it has ended, as data
(``Span``) with the id the run gave it, through a tracer whose id generator hands out
that id: so a child's spans, made in another process, and a span whose parent has not
ended yet keep their places in the tree. Each process a span was made in is a resource of
its own (``process.pid``).

The SDK's complaints (an export that failed and is retried) are one warning line for the
run, and the run's end does not wait on a collector that is not there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from isoagent.parent.records.terminal_text import warn
from isoagent.parent.telemetry.config import (
    Signal,
    TelemetryUnavailable,
    exporter_names,
    otlp_protocol,
)
from isoagent.protocol import Span, SpanValue

SCOPE = "isoagent"
CLOSE_WAIT = 10.0  # seconds the run's end waits for the last export: the OTLP exporters' default


class _Complaint:
    """An export's first complaint from the SDK, as one line on stderr; ``failed`` is set."""

    def __init__(self) -> None:
        self.failed = threading.Event()

    def say(self, message: str) -> None:
        if not self.failed.is_set():
            self.failed.set()
            warn(f"warning: telemetry is not exported: {message[:300]}")


# the export whose exporter a thread is running now, by thread: the SDK's loggers are the
# process's, and a session's complaint must not come from another's (one that was closed
# while its collector was away still retries in its threads, and the Python API may run
# sessions side by side)
_exporting: dict[int, _Complaint] = {}


class _ToItsExport(logging.Handler):
    """The SDK's warnings and errors, each said by the export whose exporter logged it."""

    def emit(self, record: logging.LogRecord) -> None:
        complaint = _exporting.get(record.thread or 0)
        if complaint is not None:
            complaint.say(record.getMessage())


_sdk_log = logging.getLogger("opentelemetry")
_sdk_log.propagate = False  # said only through ``_ToItsExport``
_sdk_log.addHandler(_ToItsExport(logging.WARNING))


@contextlib.contextmanager
def _exporting_for(complaint: _Complaint) -> Iterator[None]:
    thread = threading.get_ident()
    _exporting[thread] = complaint
    try:
        yield
    finally:
        del _exporting[thread]


class _OwnSpans(SpanExporter):
    """A span exporter whose complaints are its export's."""

    def __init__(self, exporter: SpanExporter, complaint: _Complaint) -> None:
        self.exporter = exporter
        self.complaint = complaint

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with _exporting_for(self.complaint):
            return self.exporter.export(spans)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class _OwnMetrics(MetricExporter):
    """A metric exporter whose complaints are its export's."""

    def __init__(self, exporter: MetricExporter, complaint: _Complaint) -> None:
        # the reader asks its exporter for these; the SDK keeps them as attributes only
        super().__init__(exporter._preferred_temporality, exporter._preferred_aggregation)
        self.exporter = exporter
        self.complaint = complaint

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        with _exporting_for(self.complaint):
            return self.exporter.export(metrics_data, timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.exporter.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.exporter.shutdown(timeout_millis, **kwargs)


class _GivenIds(IdGenerator):
    """The ids the run gave its spans: each is set (under ``lock``) just before its span
    is started."""

    def __init__(self, trace_id: int) -> None:
        self.trace_id = trace_id
        self.span_id = 0
        self.lock = threading.Lock()

    def generate_span_id(self) -> int:
        return self.span_id

    def generate_trace_id(self) -> int:
        return self.trace_id


class OtelExport:
    def __init__(self, env: Mapping[str, str], trace_id: int) -> None:
        """Raises ``TelemetryUnavailable``."""
        self.trace_id = trace_id
        self._complaint = _Complaint()
        self.resource = _resource()
        self._ids = _GivenIds(trace_id)
        spans = [_OwnSpans(e, self._complaint) for e in _span_exporters(env)]
        metrics = [_OwnMetrics(e, self._complaint) for e in _metric_exporters(env)]
        self._exporters: list[SpanExporter | MetricExporter] = [*spans, *metrics]
        self._processors = [BatchSpanProcessor(e) for e in spans]
        self._tracers: dict[tuple[int, str], trace.Tracer] = {}
        readers = [PeriodicExportingMetricReader(e) for e in metrics]
        self._meters = MeterProvider(
            resource=self.resource, metric_readers=readers, shutdown_on_exit=False
        )
        meter = self._meters.get_meter(SCOPE)
        self.counters = {
            "tokens": meter.create_counter(
                "isoagent.token.usage", "tokens", "Tokens of model calls, by type"
            ),
            "cost": meter.create_counter("isoagent.cost.usage", "USD", "What model calls cost"),
            "tasks": meter.create_counter("isoagent.task.count", "{task}", "Children ended"),
            "retries": meter.create_counter(
                "isoagent.retry.count", "{retry}", "Model-call attempts the gateway retried"
            ),
        }

    def span(self, span: Span, pid: int = 0, host: str = "") -> None:
        """Export an ended span, made in process ``pid`` on ``host`` (0: this process)."""
        context = Context()  # a root: not under whatever span the caller is in
        if span.parent:
            flags = TraceFlags(TraceFlags.SAMPLED)
            parent = SpanContext(self.trace_id, span.parent, is_remote=False, trace_flags=flags)
            context = trace.set_span_in_context(NonRecordingSpan(parent), context)
        with self._ids.lock:  # spans end in the event loop and in the parent agent's threads
            tracer = self._tracer(pid or os.getpid(), host)
            self._ids.span_id = span.id
            made = tracer.start_span(
                span.name, context, attributes=span.attributes, start_time=span.start
            )
        if span.error:
            made.set_status(Status(StatusCode.ERROR, span.error))
        made.end(span.end)

    def count(self, counter: str, amount: float, attributes: dict[str, SpanValue]) -> None:
        self.counters[counter].add(amount, attributes)

    def close(self) -> None:
        """Export what is left, once: waited for up to ``CLOSE_WAIT`` seconds, and no
        longer once an export has failed; then an export still retrying is stopped, so
        nothing of this run goes on in the background."""
        ends = [threading.Thread(target=p.shutdown, daemon=True) for p in self._processors]
        ends.append(threading.Thread(target=self._meters.shutdown, daemon=True))
        for end in ends:
            end.start()
        deadline = time.monotonic() + CLOSE_WAIT
        for end in ends:
            while end.is_alive() and not self._complaint.failed.is_set():
                if time.monotonic() > deadline:
                    warn(f"warning: telemetry not exported within {CLOSE_WAIT:g} s: left out")
                    break
                end.join(0.05)
        if any(end.is_alive() for end in ends):
            for exporter in self._exporters:  # wakes a retry's wait, which then gives up
                exporter.shutdown()

    def _tracer(self, pid: int, host: str) -> trace.Tracer:
        tracer = self._tracers.get((pid, host))
        if tracer is None:
            where: dict[str, SpanValue] = {"process.pid": pid}
            if host:
                where["host.name"] = host
            provider = TracerProvider(
                resource=self.resource.merge(Resource(where)),
                id_generator=self._ids,
                shutdown_on_exit=False,
            )
            for processor in self._processors:
                provider.add_span_processor(processor)
            tracer = self._tracers[(pid, host)] = provider.get_tracer(SCOPE)
        return tracer


def _resource() -> Resource:
    """``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``; service.name isoagent if
    neither names one."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "isoagent"}))
    return resource


def _span_exporters(env: Mapping[str, str]) -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    for name in exporter_names(env, "TRACES"):
        if name == "console":
            exporters.append(ConsoleSpanExporter(out=sys.stderr))  # stdout is the payload
        elif name != "otlp":
            raise _unknown(name, "TRACES")
        elif _grpc(env, "TRACES"):
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )

            exporters.append(GrpcSpanExporter())
        else:  # each OTLP exporter reads its endpoint, headers, timeout... from the environment
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
    return exporters


def _metric_exporters(env: Mapping[str, str]) -> list[MetricExporter]:
    exporters: list[MetricExporter] = []
    for name in exporter_names(env, "METRICS"):
        if name == "console":
            exporters.append(ConsoleMetricExporter(out=sys.stderr))
        elif name != "otlp":
            raise _unknown(name, "METRICS")
        elif _grpc(env, "METRICS"):
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetricExporter,
            )

            exporters.append(GrpcMetricExporter())
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporters.append(OTLPMetricExporter())
    return exporters


def _grpc(env: Mapping[str, str], signal: Signal) -> bool:
    """Whether ``signal`` goes over grpc (else http/protobuf); grpc's exporter is not in
    the otel extra (it brings grpcio)."""
    protocol = otlp_protocol(env, signal)
    if protocol == "grpc":
        try:
            import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401
        except ImportError:
            raise TelemetryUnavailable(
                "OTLP over grpc needs the opentelemetry-exporter-otlp-proto-grpc package "
                "(or OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
            ) from None
        return True
    if protocol != "http/protobuf":
        raise TelemetryUnavailable(
            f"OTLP protocol {protocol!r} is not one isoagent exports with (http/protobuf, grpc)"
        )
    return False


def _unknown(name: str, signal: Signal) -> TelemetryUnavailable:
    return TelemetryUnavailable(
        f"OTEL_{signal}_EXPORTER={name} is not an exporter isoagent has (otlp, console, none)"
    )
