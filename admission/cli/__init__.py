"""The ``turnstile`` command (``spec/cli.md``)."""
