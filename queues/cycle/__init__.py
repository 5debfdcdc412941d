"""The scheduling cycle and its collaborators: intake, ordering and queues, nomination, the flavor
assigner, the preemptor (priority and fair sharing), reservations, retries and backoff (with
waitForPodsReady's evictions; its policy is ``queues.podsready``), admission checks, elastic jobs
resized in place, explanations."""
