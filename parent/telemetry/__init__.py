"""OpenTelemetry, off unless configured as Claude Code and the OTel SDKs are.

``config.py`` reads the environment (no OpenTelemetry import: a run without telemetry pays
nothing), ``run_trace.py`` makes one run's spans as data (a child's come over the protocol)
and ``otel.py``, imported only when telemetry is on, hands them to the OpenTelemetry SDK.
"""
