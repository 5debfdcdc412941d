"""Alembic migrations: one dated revision per schema change, each explaining itself."""
