"""The measured-results table (knowledge/measured): every row cited, internally consistent, resolvable, and covering
the hardware, model families and sweeps the planner's accuracy is judged on."""

from __future__ import annotations

import math
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from vllm_tune.tools.errors import BadInputError, KnowledgeError
from vllm_tune.tools.models.catalog import catalog_model, get_gpu
from vllm_tune.tools.parallel.measured import MEASURED_DIR, MeasuredRow, load_measured, throughput_rows

ROWS = load_measured()


def _gpu_known(name: str) -> bool:
    try:
        get_gpu(name)
    except BadInputError:
        return False
    return True


def test_the_table_holds_at_least_forty_rows_with_a_throughput_or_latency_figure() -> None:
    assert len(ROWS) >= 40
    assert len(throughput_rows()) >= 40


def test_every_row_names_its_source_and_the_place_in_it() -> None:
    for row in ROWS:
        src = row.source
        assert len(src.location) >= 10, row.id
        assert src.url or (src.repo and src.path), row.id
        if src.repo:
            # A repository file must be pinned, or the cited table can change under us.
            assert src.commit and len(src.commit) == 40, row.id
        assert row.source.cite().endswith(f"({src.location})")


def test_ids_are_unique_and_a_duplicate_across_files_is_refused(tmp_path: Path) -> None:
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids))
    first = sorted(MEASURED_DIR.glob("*.yaml"))[0]
    shutil.copy(first, tmp_path / "a.yaml")
    shutil.copy(first, tmp_path / "b.yaml")
    with pytest.raises(KnowledgeError, match=r"appears in a\.yaml and b\.yaml"):
        load_measured(tmp_path)


def test_layout_multiplies_out_to_the_gpu_count_or_says_why_not() -> None:
    for row in ROWS:
        assert row.tp * row.pp * row.dp == row.gpu_count or row.layout_note, row.id
        assert row.ep <= row.gpu_count, row.id
        if not row.moe:
            assert row.ep == 1, f"{row.id}: expert parallelism on a dense model"


def test_deployment_throughput_follows_from_the_printed_figure() -> None:
    for row in ROWS:
        if row.raw is None:
            assert row.output_tok_s is None
            continue
        if row.raw.scope != "output":
            assert row.output_tok_s is None, f"{row.id}: normalised a {row.raw.scope} figure"
            continue
        assert row.output_tok_s is not None and row.output_tok_s_per_gpu is not None
        factor = {"tok/s": 1.0, "tok/s/gpu": float(row.gpu_count)}.get(row.raw.unit)
        if factor is None:  # per-user figures scale by the stated concurrency
            assert row.load.kind == "concurrency" and row.load.value
            factor = row.load.value
        assert math.isclose(row.output_tok_s, row.raw.value * factor, rel_tol=1e-9), row.id
        assert math.isclose(row.output_tok_s_per_gpu * row.gpu_count, row.output_tok_s, rel_tol=1e-9), row.id


def _write_one_row(tmp_path: Path, **change: object) -> Path:
    data = yaml.safe_load((MEASURED_DIR / "trtllm-perf-overview-1x.yaml").read_text(encoding="utf-8"))
    row = dict(data["rows"][0])
    row.update(change)
    data["rows"] = [row]
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return tmp_path


def test_a_stated_total_that_disagrees_with_the_printed_figure_is_refused(tmp_path: Path) -> None:
    assert len(load_measured(_write_one_row(tmp_path))) == 1
    with pytest.raises(KnowledgeError, match="does not follow from raw"):
        load_measured(_write_one_row(tmp_path, output_tok_s=6430.0))  # the per-GPU figure passed off as the total


def test_a_row_without_a_location_or_with_an_unexplained_layout_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load((MEASURED_DIR / "trtllm-perf-overview-1x.yaml").read_text(encoding="utf-8"))
    row = {k: v for k, v in data["rows"][0].items() if k != "location"}
    data["rows"] = [row]
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(KnowledgeError, match="location"):
        load_measured(tmp_path)
    with pytest.raises(KnowledgeError, match="without a layout_note"):
        load_measured(_write_one_row(tmp_path, dp=2))


def test_models_and_gpus_resolve_in_the_catalogs_or_are_flagged() -> None:
    for row in ROWS:
        facts = catalog_model(row.model)
        assert (facts is not None) == row.model_in_catalog, row.id
        if facts is not None:
            assert facts.is_moe == row.moe, f"{row.id}: moe flag disagrees with the catalog"
        assert _gpu_known(row.gpu) == row.gpu_in_catalog, row.id


def test_every_gpu_family_the_issue_names_has_throughput_rows() -> None:
    gpus = {r.gpu for r in throughput_rows()}
    assert {"H100", "H200", "B200", "A100", "L40S"} <= gpus
    # MI300X must at least carry measured rows (throughput or latency).
    assert "MI300X" in {r.gpu for r in ROWS}


def test_dense_and_each_named_moe_family_are_covered() -> None:
    models = {r.model for r in throughput_rows()}
    assert any(not r.moe for r in throughput_rows())
    for family in ("Mixtral", "DeepSeek-V3", "DeepSeek-R1", "Qwen3-30B-A3B", "Qwen3-235B", "gpt-oss"):
        hits = [m for m in models if family.lower() in m.lower()]
        if family == "DeepSeek-V3":
            hits = [m for m in models if "deepseek-v3" in m.lower() or "deepseek-r1" in m.lower()]
        assert hits, family


def test_every_engine_is_represented() -> None:
    assert {r.engine for r in ROWS} == {"vllm", "tensorrt-llm", "sglang"}


def _groups(rows: list[MeasuredRow]) -> dict[tuple[object, ...], list[MeasuredRow]]:
    out: dict[tuple[object, ...], list[MeasuredRow]] = defaultdict(list)
    for r in rows:
        out[(r.model, r.gpu, r.weights_dtype, r.engine, r.engine_version, r.isl, r.osl, r.source.path)].append(r)
    return out


def test_a_full_tp_sweep_of_one_model_on_one_gpu_is_present() -> None:
    sweeps = [g for g in _groups(throughput_rows()).values() if {1, 2, 4, 8} <= {r.tp for r in g}]
    assert sweeps
    assert any(not g[0].moe for g in sweeps) and any(g[0].moe for g in sweeps)


def test_a_load_sweep_of_one_deployment_is_present() -> None:
    by_deployment: dict[tuple[object, ...], set[float]] = defaultdict(set)
    for r in ROWS:
        if r.load.value is not None:
            by_deployment[(r.model, r.gpu, r.tp, r.dp, r.isl, r.osl, r.engine, r.source.path)].add(r.load.value)
    assert max(len(v) for v in by_deployment.values()) >= 5


def test_long_prompt_and_long_output_loads_are_present() -> None:
    assert any(r.isl >= 8192 for r in throughput_rows())
    assert any(r.osl >= 8192 for r in throughput_rows())


def test_batch_one_latency_points_at_tp8_are_present() -> None:
    singles = [r for r in ROWS if r.load.value == 1 and r.tp == 8 and (r.tpot_ms or r.itl_ms or r.e2e_ms)]
    assert {"meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-405B-Instruct-FP8"} <= {r.model for r in singles}
