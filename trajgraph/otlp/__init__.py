"""The OTLP/HTTP trace receiver of ``trajgraph serve`` (docs/otlp.md)."""
