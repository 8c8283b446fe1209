"""`vllm-tune kb search|show|list`: read the cited knowledge base."""

from __future__ import annotations

import argparse
from typing import Any

from vllm_tune.cli.common import print_json

_KINDS = ("lever", "triage", "pitfall", "metric", "flag", "env", "default", "rule", "recipe", "hardware-note",
          "method", "change")


def register(sub: Any) -> None:
    kb = sub.add_parser("kb", help="search and read the knowledge base")
    kb_sub = kb.add_subparsers(dest="kb_command", metavar="ACTION", required=True)

    search = kb_sub.add_parser("search", help="keyword search")
    search.add_argument("query", nargs="+", help="keywords, e.g. preemption watermark")
    search.add_argument("--kind", choices=_KINDS, help="only entries of this kind")
    search.add_argument("--vllm-version", help="only entries that hold for this vLLM version")
    search.add_argument("--limit", type=int, default=8, help="most hits to show")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.set_defaults(handler=_search)

    show = kb_sub.add_parser("show", help="show one entry")
    show.add_argument("id", help="entry id, e.g. triage.preemption-kv-thrash")
    show.add_argument("--json", action="store_true", help="print the entry as JSON")
    show.set_defaults(handler=_show)

    lst = kb_sub.add_parser("list", help="list entries")
    lst.add_argument("--kind", choices=_KINDS, help="only entries of this kind")
    lst.add_argument("--json", action="store_true", help="print the list as JSON")
    lst.set_defaults(handler=_list)


def _search(args: argparse.Namespace) -> int:
    from vllm_tune.tools.kb.api import KnowledgeSearchInput, search_knowledge

    out = search_knowledge(KnowledgeSearchInput(query=" ".join(args.query), kind=args.kind,
                                                vllm_version=args.vllm_version, limit=args.limit))
    if args.json:
        print_json(out)
        return 0
    if not out.hits:
        print(f"no entries match {out.query!r} ({out.total_entries} entries searched)")
        return 0
    for hit in out.hits:
        print(f"{hit.id}  [{hit.kind}, {hit.evidence}]\n    {hit.title}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from vllm_tune.tools.kb.api import KnowledgeEntryInput, get_entry, render_entry_markdown

    entry = get_entry(KnowledgeEntryInput(id=args.id))
    if args.json:
        print_json(entry)
    else:
        print(render_entry_markdown(entry), end="")
    return 0


def _list(args: argparse.Namespace) -> int:
    from vllm_tune.tools.kb.api import list_entries

    out = list_entries(args.kind)
    if args.json:
        print_json(out)
        return 0
    for item in out.entries:
        print(f"{item['id']:<48} {item['kind']:<13} {item['evidence']}")
    print(f"{len(out.entries)} entries")
    return 0
