"""Scenario files and engine core: reading a scenario, the discrete-event simulator, the recorder of
what happened, and the simulated controllers of replicated workloads."""
