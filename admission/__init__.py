"""Turnstile's running system: everything that talks to PostgreSQL, Kubernetes, HTTP or a terminal.

The decisions come from the pure core in ``queues``; this package feeds it and enacts them.
"""
