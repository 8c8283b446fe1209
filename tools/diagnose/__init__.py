"""diagnose_metrics: explain why a live vLLM deployment is slow, with evidence and knowledge citations.

Pipeline: parse (exposition text or Prometheus API) -> snapshot (per engine / model) -> window (deltas between
two snapshots, or a lifetime view) -> workload, latency, capacity -> named signals -> triage rules from the
knowledge base (engine) -> findings, next steps and a report.
"""
