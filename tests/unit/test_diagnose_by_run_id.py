"""Diagnosing a saved run_benchmark run by its id: what the run saves, how the id is found, and the errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from vllm_tune.cli.diagnose import _input
from vllm_tune.cli.main import build_parser
from vllm_tune.tools.bench.server_watch import Scrape, ServerWatch, save_window
from vllm_tune.tools.bench.store import ResultStore, RunStatus, new_run_id
from vllm_tune.tools.diagnose.api import DiagnoseInput, diagnose_metrics, diagnose_texts
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import FileRoots, confined

pytestmark = pytest.mark.anyio

SAMPLE = Path(__file__).resolve().parents[2] / "knowledge" / "samples" / "overload"
WINDOW_S = json.loads((SAMPLE / "capture.json").read_text())["window_s"]


def _watch(texts: list[str], stamps: list[float]) -> ServerWatch:
    watch = ServerWatch(client=None)  # type: ignore[arg-type]  # nothing is fetched: the scrapes are given
    for text, stamp in zip(texts, stamps, strict=True):
        if not watch.first_text:
            watch.first_text, watch.first_unix = text, stamp
        watch.last_text, watch.last_unix = text, stamp
        watch.scrapes.append(Scrape(t=stamp))
    return watch


def _saved_run(root: Path) -> str:
    rid = new_run_id()
    store = ResultStore(root)
    store.write_status(RunStatus(run_id=rid, state="completed"))
    before, after = (SAMPLE / "before.prom").read_text(), (SAMPLE / "after.prom").read_text()
    note = save_window(_watch([before, after], [1_000.0, 1_000.0 + WINDOW_S]), store.run_dir(rid),
                       "http://127.0.0.1:8000", max_bytes=16 * 1024 * 1024)
    assert note is None
    return rid


async def test_a_run_is_diagnosed_from_its_saved_window_as_the_same_capture_would_be(tmp_path: Path) -> None:
    rid = _saved_run(tmp_path)
    meta = json.loads((tmp_path / rid / "capture.json").read_text())
    assert meta["files"] == {"before": "before.prom", "after": "after.prom"}
    assert meta["window_s"] == pytest.approx(WINDOW_S)
    out = await diagnose_metrics(DiagnoseInput(run_id=rid, results_dir=str(tmp_path)))
    direct = diagnose_texts([("before", (SAMPLE / "before.prom").read_text()),
                             ("after", (SAMPLE / "after.prom").read_text())], window_s=WINDOW_S)
    assert out.window_s == pytest.approx(WINDOW_S)
    assert out.workload.finished_requests == direct.workload.finished_requests == 40
    assert out.verdict == direct.verdict and out.bottleneck == direct.bottleneck


def test_fewer_than_two_scrapes_or_an_oversized_one_saves_nothing(tmp_path: Path) -> None:
    text = (SAMPLE / "before.prom").read_text()
    assert "fewer than two" in (save_window(_watch([text], [1.0]), tmp_path, "u", max_bytes=10**8) or "")
    assert "larger than 100 bytes" in (save_window(_watch([text, text], [1.0, 2.0]), tmp_path, "u",
                                                   max_bytes=100) or "")
    assert list(tmp_path.iterdir()) == []


async def test_a_run_without_saved_scrapes_is_one_clear_error(tmp_path: Path) -> None:
    rid = new_run_id()
    ResultStore(tmp_path).write_status(RunStatus(run_id=rid, state="completed"))
    with pytest.raises(BadInputError, match=f"benchmark run {rid} has no saved /metrics scrapes"):
        await diagnose_metrics(DiagnoseInput(run_id=rid, results_dir=str(tmp_path)))
    other = new_run_id()
    with pytest.raises(BadInputError, match=f"no benchmark run {other} under"):
        await diagnose_metrics(DiagnoseInput(run_id=other, results_dir=str(tmp_path)))
    with pytest.raises(BadInputError, match="bad run id"):
        await diagnose_metrics(DiagnoseInput(run_id="../../etc", results_dir=str(tmp_path)))


@pytest.mark.parametrize("extra", [{"url": "http://127.0.0.1:8000"}, {"prometheus_url": "http://127.0.0.1:9090"},
                                   {"metrics": [{"text": "x"}]}, {"metrics_files": ["a.prom"]}])
def test_run_id_excludes_every_other_metrics_source(extra: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="run_id names the window to diagnose: give it without url, "
                                         "prometheus_url, metrics or metrics_files"):
        DiagnoseInput.model_validate({"run_id": new_run_id(), **extra})
    assert DiagnoseInput(run_id=new_run_id(), log_file="server.log").log_file == "server.log"


async def test_over_mcp_the_run_folder_is_held_to_the_file_roots(tmp_path: Path) -> None:
    rid = _saved_run(tmp_path / "results")
    (tmp_path / "elsewhere").mkdir()
    with confined(FileRoots(((tmp_path / "elsewhere").resolve(),), "test roots")), \
            pytest.raises(BadInputError, match="not under the allowed file roots"):
        await diagnose_metrics(DiagnoseInput(run_id=rid, results_dir=str(tmp_path / "results")))
    with confined(FileRoots(((tmp_path / "results").resolve(),), "test roots")):
        out = await diagnose_metrics(DiagnoseInput(run_id=rid, results_dir=str(tmp_path / "results")))
    assert out.workload.finished_requests == 40


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["diagnose", *argv])


def test_cli_flags_map_onto_the_input_and_refuse_mixtures(tmp_path: Path) -> None:
    rid = _saved_run(tmp_path)
    request = _input(_args("--run", rid, "--result-dir", str(tmp_path)))
    assert (request.run_id, request.results_dir) == (rid, str(tmp_path))
    with pytest.raises(BadInputError, match="--run names the window"):
        _input(_args("http://127.0.0.1:8000", "--run", rid))
    with pytest.raises(BadInputError, match="give --run RUN_ID too"):
        _input(_args("http://127.0.0.1:8000", "--result-dir", str(tmp_path)))


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_tune.cli.main import main

    rid = new_run_id()
    ResultStore(tmp_path).write_status(RunStatus(run_id=rid, state="completed"))
    assert main(["diagnose", "--run", rid, "--result-dir", str(tmp_path)]) == 2
    assert "has no saved /metrics scrapes" in capsys.readouterr().err
    saved = _saved_run(tmp_path)
    assert main(["diagnose", "--run", saved, "--result-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["window_s"] == pytest.approx(WINDOW_S)
