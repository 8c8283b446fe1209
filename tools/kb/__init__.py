"""Knowledge-base machinery: schema, loader and search over the YAML entries in knowledge/."""

from vllm_tune.tools.kb.loader import KnowledgeBase, load_from, load_knowledge
from vllm_tune.tools.kb.schema import Entry
from vllm_tune.tools.kb.search import SearchHit, search

__all__ = ["Entry", "KnowledgeBase", "SearchHit", "load_from", "load_knowledge", "search"]
