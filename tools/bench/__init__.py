"""run_benchmark: trustworthy load tests, SLO goodput and capacity search against live vLLM endpoints."""
