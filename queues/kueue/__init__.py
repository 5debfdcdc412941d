"""Kueue's objects as Turnstile reads them: the API types, their validation (Kueue's webhooks' rules),
and the CRDs Turnstile serves."""
