"""The bundled knowledge base: it validates, defects are caught with a useful message, and it covers what the
tools rely on (triage ids, flag catalogue, metric catalogue, attributed claims, searchability)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_tune.knowledge import ENTRIES_DIR
from vllm_tune.tools.errors import KnowledgeError
from vllm_tune.tools.kb import load_from, load_knowledge
from vllm_tune.tools.kb.schema import Entry
from vllm_tune.tools.kb.search import search

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "tests" / "data" / "captures"
TEST_VLLM = Version("0.32.0")

STABLE_TRIAGE_IDS = {
    "triage.ttft-high-queue-empty",
    "triage.ttft-high-queue-growing",
    "triage.tpot-high-decode-bound",
    "triage.itl-spikes-graph-miss",
    "triage.preemption-kv-thrash",
    "triage.running-below-limit-stall",
}

# Flag actions that may name a flag with no `flag` entry. Keep this empty unless a tool really needs it.
ALLOWED_UNCATALOGUED_FLAGS: set[str] = set()


def _flag_key(name: str) -> str:
    """`--no-enable-x` and `--enable-x` are the same catalogue entry."""
    return "--" + name[len("--no-"):] if name.startswith("--no-") else name


# ---------------------------------------------------------------- the real folder


def test_real_folder_validates_and_is_large_enough() -> None:
    kb = load_from(ENTRIES_DIR)
    assert len(kb) >= 120
    assert kb.dangling_references() == []


def test_stable_triage_ids_present() -> None:
    assert set(load_knowledge().ids()) >= STABLE_TRIAGE_IDS


def test_every_entry_has_sources_range_and_verification() -> None:
    for entry in load_knowledge():
        assert entry.sources, entry.id
        assert all(len(s.ref) >= 3 for s in entry.sources), entry.id
        Version(entry.last_verified.vllm)  # parses
        assert entry.statement.count(". ") <= 5, f"{entry.id}: statements should stay short"


def test_each_kind_is_represented() -> None:
    kinds = {e.kind for e in load_knowledge()}
    assert kinds >= {"lever", "triage", "pitfall", "metric", "flag", "env", "default", "rule", "recipe",
                     "hardware-note", "method", "change"}


# ---------------------------------------------------------------- one defect per temp copy


def _copy_with(tmp_path: Path, mutate: Callable[[Path], None]) -> Path:
    folder = tmp_path / "entries"
    shutil.copytree(ENTRIES_DIR, folder)
    mutate(folder)
    return folder


def _replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture text {old!r} not found in {path.name}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _extra_file(body: str) -> Callable[[Path], None]:
    def mutate(folder: Path) -> None:
        (folder / "zz_defect.yaml").write_text(body, encoding="utf-8")
    return mutate


_GOOD_ENTRY = """
  - id: lever.defect-probe
    kind: lever
    title: A probe entry for loader tests
    statement: This entry exists only to carry one defect at a time in a temporary copy.
    applies_to: {vllm: {spec: ">=0.10"}}
    evidence: attributed-claim
    sources: [{kind: doc, ref: "tests/unit/test_knowledge_base.py"}]
    last_verified: {date: 2026-12-03, vllm: "0.32.0"}
"""


DEFECTS: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "bad yaml": (
        lambda folder: _replace_once(folder / "flags.yaml", "  - id: flag.max-num-seqs\n",
                                     "  - id: flag.max-num-seqs\n   broken: [unclosed\n"),
        ["flags.yaml", "not valid YAML"],
    ),
    "unknown field": (
        lambda folder: _replace_once(folder / "metrics.yaml", "    kind: metric\n",
                                     "    kind: metric\n    colour: blue\n"),
        ["metrics.yaml", "metric.num-requests-running", "colour"],
    ),
    "duplicate id": (
        _extra_file("entries:" + _GOOD_ENTRY.replace("lever.defect-probe", "flag.max-num-seqs")),
        ["zz_defect.yaml", "duplicate", "flag.max-num-seqs", "flags.yaml"],
    ),
    "dangling related id": (
        _extra_file("entries:" + _GOOD_ENTRY + "    related: [lever.does-not-exist]\n"),
        ["lever.defect-probe", "lever.does-not-exist"],
    ),
    "dangling kb link": (
        _extra_file("entries:" + _GOOD_ENTRY.replace(
            "in a temporary copy.", "in a temporary copy; see kb://entries/flag.no-such-flag for details.")),
        ["lever.defect-probe", "flag.no-such-flag"],
    ),
    "bad version range": (
        lambda folder: _replace_once(folder / "defaults.yaml", 'applies_to: {vllm: {spec: ">=0.27"}}',
                                     'applies_to: {vllm: {spec: "newer than 0.27"}}'),
        ["defaults.yaml", "default.batching-tiers", "version range"],
    ),
    "missing sources": (
        _extra_file("entries:" + _GOOD_ENTRY.replace(
            '    sources: [{kind: doc, ref: "tests/unit/test_knowledge_base.py"}]\n', "    sources: []\n")),
        ["zz_defect.yaml", "lever.defect-probe", "sources"],
    ),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_a_single_defect_fails_with_a_message_naming_it(tmp_path: Path, defect: str) -> None:
    mutate, expected = DEFECTS[defect]
    folder = _copy_with(tmp_path, mutate)
    with pytest.raises(KnowledgeError) as info:
        load_from(folder)
    message = str(info.value)
    for part in expected:
        assert part in message, f"{defect}: {part!r} missing from {message!r}"


def test_the_probe_entry_itself_is_valid(tmp_path: Path) -> None:
    """Guards the defect tests: without a defect the probe loads, so each failure above is the defect's."""
    folder = _copy_with(tmp_path, _extra_file("entries:" + _GOOD_ENTRY))
    assert "lever.defect-probe" in load_from(folder)


# ---------------------------------------------------------------- CLI listing


def test_cli_kb_list_json_lists_every_entry(capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_tune.cli.main import main

    assert main(["kb", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["entries"]
    kb = load_knowledge()
    assert [item["id"] for item in listed] == kb.ids()
    for item in listed:
        assert {"id", "kind", "sources", "evidence", "applies_to"} <= set(item)
        assert item["sources"] and all("ref" in s and "kind" in s for s in item["sources"])
        assert item["evidence"] in {"verified-in-source", "vendor-doc", "attributed-claim"}
        assert "vllm" in item["applies_to"]


# ---------------------------------------------------------------- search finds the obvious entry


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("my dashboard panel for gpu_cache_usage_perc shows no data", "metric.gpu-cache-usage-perc"),
        ("export VLLM_ALL2ALL_BACKEND has no effect", "env.vllm-all2all-backend"),
        ("vllm serve rejects --swap-space", "flag.swap-space"),
        ("bench serve goodput with itl raises an error", "change.d2-goodput-itl"),
        ("Using default MoE config warning, where do tuned configs go", "env.vllm-tuned-config-folder"),
        ("inter-token latency spikes from cuda graph misses", "triage.itl-spikes-graph-miss"),
        ("what does the performance-mode flag do", "flag.performance-mode"),
        ("default max-num-batched-tokens and max-num-seqs per GPU memory tier", "default.batching-tiers"),
    ],
)
def test_search_ranks_the_obvious_entry_first(question: str, expected: str) -> None:
    hits = search(load_knowledge(), question, limit=5)
    assert hits, question
    assert hits[0].id == expected, f"{question!r}: got {[h.id for h in hits[:3]]}"


# ---------------------------------------------------------------- honesty about unverified numbers

UNVERIFIED_CLAIMS = [
    ("pitfall.moe-untuned-new-gpu", "20-40%"),
    ("pitfall.ep-low-activation-density", "2%"),
    ("pitfall.moe-gpu-memory-095", "0.85"),
    ("pitfall.nccl-cumem-disabled-gb200", "30-50%"),
    ("distributed.no-ib-detection", "30-50%"),
    ("pitfall.detailed-traces-always-on", "5-10%"),
    ("distributed.tp-dp-crossover-claim", "128"),
]


def _text(entry: Entry) -> str:
    return " ".join(x for x in (entry.title, entry.statement, entry.details or "") if x)


@pytest.mark.parametrize(("entry_id", "number"), UNVERIFIED_CLAIMS)
def test_unverified_numbers_are_attributed_claims(entry_id: str, number: str) -> None:
    entry = load_knowledge().get(entry_id)
    assert entry.evidence == "attributed-claim"
    assert number in _text(entry)


def test_no_verified_entry_repeats_an_unverified_range() -> None:
    for entry in load_knowledge():
        if entry.evidence == "attributed-claim":
            continue
        for number in ("20-40%", "30-50%", "5-10%"):
            assert number not in _text(entry), f"{entry.id} states {number} but is {entry.evidence}"


def test_verified_in_source_entries_cite_a_file_line_or_capture() -> None:
    for entry in load_knowledge():
        if entry.evidence != "verified-in-source":
            continue
        kinds = {s.kind for s in entry.sources}
        assert kinds & {"file", "capture", "pr", "doc"}, f"{entry.id} has no source that could have been read"


# ---------------------------------------------------------------- flag catalogue


def _flag_entries() -> dict[str, Entry]:
    return {e.flag.name: e for e in load_knowledge() if e.flag is not None}


def test_every_flag_action_names_a_catalogued_flag() -> None:
    catalogue = {_flag_key(name) for name in _flag_entries()}
    missing = sorted(
        f"{entry.id}: {action.target}"
        for entry in load_knowledge()
        for action in entry.actions
        if action.kind == "flag" and _flag_key(action.target) not in catalogue | ALLOWED_UNCATALOGUED_FLAGS
    )
    assert missing == [], "flag actions without a flag entry: " + ", ".join(missing)


def test_flag_actions_never_recommend_a_removed_flag() -> None:
    removed = {name for name, e in _flag_entries().items() if e.flag and e.flag.removed_in}
    bad = [f"{e.id}: {a.target}" for e in load_knowledge() for a in e.actions
           if a.kind == "flag" and _flag_key(a.target) in removed and a.direction not in {"unset", "disable", "check"}]
    assert bad == []


def test_removed_flags_are_marked_absent_from_the_test_vllm() -> None:
    for name, entry in _flag_entries().items():
        assert entry.flag is not None
        if entry.flag.removed_in is not None and Version(entry.flag.removed_in) <= TEST_VLLM:
            assert not entry.flag.exists_in_test_vllm, name


def test_flag_names_look_like_flags_and_defaults_use_valid_ranges() -> None:
    from packaging.specifiers import SpecifierSet

    for name, entry in _flag_entries().items():
        assert re.fullmatch(r"--?[a-zA-Z][a-z0-9-]*", name), name
        assert entry.flag is not None
        for spec in entry.flag.defaults:
            SpecifierSet(spec)  # raises on a bad range


def test_the_briefed_flags_are_catalogued() -> None:
    names = set(_flag_entries())
    wanted = {
        "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization", "--enable-prefix-caching",
        "--enable-chunked-prefill", "--long-prefill-token-threshold", "--async-scheduling", "--stream-interval",
        "--watermark", "--scheduler-reserve-full-isl", "--performance-mode", "--max-cudagraph-capture-size",
        "--cudagraph-capture-sizes", "--compilation-config", "-O", "--enforce-eager", "--kv-cache-dtype",
        "--max-model-len", "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
        "--enable-expert-parallel", "--enable-eplb", "--all2all-backend", "--api-server-count", "--block-size",
        "--kv-offloading-size", "--num-gpu-blocks-override", "--disable-log-stats", "--custom-histogram-buckets",
        "--quantization", "--enable-dbo", "--swap-space", "--preemption-mode", "--scheduler-delay-factor",
        "--num-scheduler-steps", "--max-num-partial-prefills", "--max-long-partial-prefills", "--cuda-graph-sizes",
    }
    assert wanted <= names, sorted(wanted - names)


# ---------------------------------------------------------------- env catalogue


def test_env_actions_name_catalogued_or_foreign_variables() -> None:
    catalogue = {e.env.name for e in load_knowledge() if e.env is not None}
    missing = sorted(f"{e.id}: {a.target}" for e in load_knowledge() for a in e.actions
                     if a.kind == "env" and a.target.startswith("VLLM_") and a.target not in catalogue)
    assert missing == []


def test_nonexistent_all2all_env_is_marked_and_points_at_the_flag() -> None:
    entry = load_knowledge().get("env.vllm-all2all-backend")
    assert entry.env is not None and entry.env.removed_in is not None
    assert "--all2all-backend" in entry.statement


# ---------------------------------------------------------------- metric catalogue


def _captured_families() -> dict[str, str]:
    families: dict[str, str] = {}
    for path in sorted(CAPTURES.glob("*.prom")):
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.match(r"# TYPE (vllm:\S+) (\w+)$", line)
            if match and not match.group(1).endswith("_created"):
                families[match.group(1)] = match.group(2)
    return families


def test_every_family_in_the_real_captures_has_a_metric_entry() -> None:
    families = _captured_families()
    assert len(families) > 30, "expected the vLLM 0.32.0 captures in tests/data/captures"
    metrics = {e.metric.name: e.metric for e in load_knowledge() if e.metric is not None}
    missing = sorted(set(families) - set(metrics))
    assert missing == []
    for name, prom_type in families.items():
        assert metrics[name].type == prom_type, name


def test_counter_wire_names_end_in_total() -> None:
    for entry in load_knowledge():
        if entry.metric is not None and entry.metric.type == "counter":
            assert entry.metric.name.endswith("_total"), entry.id


def test_old_metric_names_point_at_their_replacement() -> None:
    kb = load_knowledge()
    names = {e.metric.name for e in kb if e.metric is not None}
    for old in ("vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
                "vllm:time_per_output_token_seconds", "vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc"):
        entry = next(e for e in kb if e.metric is not None and e.metric.name == old)
        assert entry.metric is not None and entry.metric.replaced_by, old
        if entry.metric.replaced_by != "vllm:kv_offload_cpu_cache_usage_perc":
            assert entry.metric.replaced_by in names, old


# ---------------------------------------------------------------- stale claims and the stale-entry script


def test_each_stale_skill_claim_has_a_change_entry_with_supersedes() -> None:
    kb = load_knowledge()
    for number in range(1, 18):
        matches = [e for e in kb if e.id.startswith(f"change.d{number}-")]
        assert len(matches) == 1, f"D{number}"
        assert matches[0].kind == "change" and matches[0].supersedes, matches[0].id


def test_kb_stale_script_lists_entries_older_than_a_version() -> None:
    script = REPO / "scripts" / "kb_stale.py"
    newest = max(Version(e.last_verified.vllm) for e in load_knowledge())
    proc = subprocess.run([sys.executable, str(script), str(newest), "--json"], capture_output=True, text=True,
                          check=True, timeout=120)
    listed = json.loads(proc.stdout)
    expected = sorted(e.id for e in load_knowledge() if Version(e.last_verified.vllm) < newest)
    assert sorted(row["id"] for row in listed["entries"]) == expected
    assert listed["count"] == len(expected) > 0
    bad = subprocess.run([sys.executable, str(script), "not-a-version"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not a version" in bad.stderr and "Traceback" not in bad.stderr
