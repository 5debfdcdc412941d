"""The scheduling cycle and its collaborators: intake, ordering and queues, nomination, the flavor
assigner, the preemptor (priority and fair sharing), reservations, retries and backoff,
waitForPodsReady, admission checks, explanations."""
