"""The composition root: the one place that knows every part of a running replica.

``process`` builds the ``turnstile controller`` process from the settings: migrations, the
controller, the webhook over TLS, the dashboard, the aggregated API, health and metrics, signals.
Nothing below imports this package; the CLI and engine cluster start the process through it.
"""
