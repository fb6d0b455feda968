"""The broker's HTTP endpoint (``--http``): ``/metrics`` for Prometheus (doc/observability.md)."""
