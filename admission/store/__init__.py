"""PostgreSQL: the source of truth for queues, quotas, workloads, admissions and usage.

``tables`` holds the schema, ``database`` engines and sessions (embedded PostgreSQL when no URL
is configured), and one repository module per concept. Repository functions take a session
and never commit: the caller owns the transaction.
"""
