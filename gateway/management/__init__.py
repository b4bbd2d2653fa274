"""The management side of the HTTP listener: JSON API, Prometheus metrics, dashboard."""
