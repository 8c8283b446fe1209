"""Real test components (vLLM CPU server, Prometheus, load generator) shared by the integration tests."""
