"""The controller's aggregated API (APIService): workloads and Kueue's visibility API via the API server."""
