"""The Prometheus endpoint: dcgm-exporter's GPU metrics plus distconsole's own.

Core: no textual, no rich. A scrape reads the latest samples the console already has
(:class:`~console.metrics.source.MetricsSource`); it never starts a round of SSH.
"""
