"""The admission webhook: suspends queued jobs at creation and catches mistakes at ``kubectl apply``."""
