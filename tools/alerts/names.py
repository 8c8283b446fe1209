"""The metric names a given vLLM version exports, read from the knowledge base's metric entries.

tools/diagnose/names.py says which old name maps to which current one; the metric entries say which versions
export each name (applies_to). An alert for 0.10 must read vllm:gpu_cache_usage_perc, one for 0.12 and later
vllm:kv_cache_usage_perc; a series no entry places in the version does not exist there.
"""

from __future__ import annotations

from vllm_tune.tools.diagnose import names as diagnose_names
from vllm_tune.tools.kb.loader import KnowledgeBase
from vllm_tune.tools.kb.schema import Entry


def _metric_entries(kb: KnowledgeBase) -> dict[str, Entry]:
    return {e.metric.name: e for e in kb if e.kind == "metric" and e.metric is not None}


def _base(wire: str) -> str:
    """'vllm:num_preemptions_total' -> 'num_preemptions' (the form tools/diagnose/names.py uses)."""
    stem = wire.removeprefix(diagnose_names.PREFIX)
    return stem[:-6] if stem.endswith("_total") else stem


class MetricNames:
    """Resolves a current metric name (as scraped) to the name the target version exports, or None."""

    def __init__(self, kb: KnowledgeBase, version: str | None) -> None:
        self.version = version
        self._entries = _metric_entries(kb)

    def _holds(self, entry: Entry) -> bool:
        return self.version is None or entry.applies_to.vllm.contains(self.version)

    def _entry(self, wire: str) -> Entry | None:
        return self._entries.get(wire) or self._entries.get(f"{wire}_total")

    def resolve(self, wire: str) -> str | None:
        entry = self._entry(wire)
        if entry is None:
            return wire  # not a catalogued vLLM series (e.g. http_requests_total): taken as exported
        if self._holds(entry):
            return entry.metric.name if entry.metric is not None else wire
        base = _base(wire)
        for old, new in diagnose_names.RENAMED.items():
            if new != base:
                continue
            old_entry = self._entry(diagnose_names.PREFIX + old)
            if old_entry is not None and old_entry.metric is not None and self._holds(old_entry):
                return old_entry.metric.name
        return None

    def knowledge_id(self, wire: str) -> str | None:
        resolved = self.resolve(wire)
        entry = self._entry(resolved) if resolved else None
        return entry.id if entry is not None else None
