"""Watch mode driven by a fake clock over real vLLM 0.32 captures (overload: before and after its load)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from vllm_tune.cli.main import main
from vllm_tune.tools.diagnose.api import DiagnoseInput, diagnose_texts
from vllm_tune.tools.diagnose.models import DiagnoseOutput, ServerInfo
from vllm_tune.tools.diagnose.snapshot import Snapshot, parse_snapshot
from vllm_tune.tools.diagnose.watch import (
    StopWatch,
    WatchSettings,
    WatchSummary,
    WatchTick,
    render_change,
    render_summary,
    render_tick,
    watch,
)
from vllm_tune.tools.errors import TargetError

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"
BEFORE = (CAPTURES / "overload.before.prom").read_text()
AFTER = (CAPTURES / "overload.after.prom").read_text()
EPOCH = 1_800_000_000.0


class FakeTime:
    """A clock that only moves when the watch sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.slept.append(seconds)
        self.now += seconds


class Recorded:
    """Scrapes of one real server: the pre-load scrape until `switch_s`, the post-load one after."""

    def __init__(self, t: FakeTime, switch_s: float, fail_at: tuple[float, ...] = (),
                 raise_at: tuple[float, BaseException] | None = None) -> None:
        self.t, self.switch_s, self.fail_at, self.raise_at = t, switch_s, fail_at, raise_at
        self.calls: list[float] = []

    def __call__(self) -> Snapshot:
        now = self.t.now
        self.calls.append(now)
        if self.raise_at is not None and now >= self.raise_at[0]:
            raise self.raise_at[1]
        if now in self.fail_at:
            raise TargetError("connection refused")
        text = BEFORE if now < self.switch_s else AFTER
        return parse_snapshot(text, "recorded", timestamp=EPOCH + now)


def run(settings: WatchSettings, scrape: Recorded, t: FakeTime
        ) -> tuple[list[tuple[WatchTick, DiagnoseOutput]], WatchSummary]:
    seen: list[tuple[WatchTick, DiagnoseOutput]] = []
    summary = watch(DiagnoseInput(url="http://127.0.0.1:8000"), settings, scrape=scrape,
                    server=ServerInfo(url="http://127.0.0.1:8000", version="0.32.0"),
                    on_tick=lambda tick, out: seen.append((tick, out)), clock=t.clock, sleep=t.sleep,
                    wall=lambda: EPOCH + t.now)
    return seen, summary


def test_the_window_slides_over_the_last_scrapes() -> None:
    t = FakeTime()
    scrape = Recorded(t, switch_s=15)
    settings = WatchSettings(interval_s=10, duration_s=60, window_s=30, sample_interval_s=5)
    seen, summary = run(settings, scrape, t)
    ticks = [tick for tick, _ in seen]
    assert [tick.elapsed_s for tick in ticks] == [10, 20, 30, 40, 50, 60]
    assert scrape.calls == [5.0 * k for k in range(13)]  # every 5 s, ends included; nothing else is read
    assert [tick.window_s for tick in ticks] == [10, 20, 30, 30, 30, 30]
    # the 40 requests finished between the scrapes at 10 and 15 s: in every window that spans them, then gone
    assert [tick.finished_requests for tick in ticks] == [0, 40, 40, 40, 0, 0]
    assert [out.sources_used[0].split(" scraped ")[1].split(" time")[0] for _, out in seen] == [
        "3", "5", "7", "7", "7", "7"]
    assert summary.whole is not None and summary.whole.window_s == 60
    assert summary.finished_requests == 40


def test_a_verdict_change_is_reported_and_summarised() -> None:
    t = FakeTime()
    # two scrapes per window, as a one-shot diagnosis of the same pair reads them
    settings = WatchSettings(interval_s=10, duration_s=30, window_s=10, sample_interval_s=10)
    seen, summary = run(settings, Recorded(t, switch_s=15), t)
    ticks = [tick for tick, _ in seen]
    assert [tick.verdict_key for tick in ticks] == ["idle", "triage.ttft-high-queue-growing", "idle"]
    assert [tick.changed for tick in ticks] == [False, True, True]
    one_shot = diagnose_texts([("b", BEFORE), ("a", AFTER)], window_s=10)
    loaded, out = seen[1]
    assert out.bottleneck == one_shot.bottleneck == loaded.bottleneck
    assert out.verdict == one_shot.verdict
    assert one_shot.latency.ttft is not None and one_shot.latency.ttft.p90 is not None
    assert loaded.ttft_p90 == one_shot.latency.ttft.p90.text  # printed as diagnose states it
    assert loaded.severity == "critical" and loaded.finished_requests == 40
    line = render_tick(loaded)
    for part in ("critical triage.ttft-high-queue-growing", f"TTFT p90 {loaded.ttft_p90}",
                 f"ITL p90 {loaded.itl_p90}", "KV ", "preempt ", "40 done"):
        assert part in line, line
    assert render_change(loaded, "idle") == "== verdict changed at +20.0 s: idle -> triage.ttft-high-queue-growing =="
    s = summary
    assert s.stopped_by == "duration" and s.intervals == 3 and s.verdict_changes == 2
    assert [(x.verdict_key, x.intervals) for x in s.timeline] == [
        ("idle", 1), ("triage.ttft-high-queue-growing", 1), ("idle", 1)]
    text = render_summary(s)
    assert "3 interval(s) over 30.0 s, duration reached, 2 verdict change(s)" in text
    assert "+10.0-20.0 s  triage.ttft-high-queue-growing (1 interval(s))" in text


def test_ctrl_c_and_sigterm_end_with_a_summary_of_what_was_seen() -> None:
    for exc, reason in ((KeyboardInterrupt(), "interrupt"), (StopWatch("SIGTERM"), "signal")):
        t = FakeTime()
        scrape = Recorded(t, switch_s=15, raise_at=(27.0, exc))
        seen, summary = run(WatchSettings(interval_s=10, duration_s=600, window_s=10, sample_interval_s=10),
                            scrape, t)
        assert summary.stopped_by == reason
        assert [tick.elapsed_s for tick, _ in seen] == [10, 20]
        assert summary.intervals == 2 and summary.verdict_changes == 1
        # the interrupted scrape at 30 s is not waited for; the whole watch is what was read before it
        assert scrape.calls[-1] == 30.0 and summary.elapsed_s == 30.0
        assert summary.whole.workload.finished_requests == 40
        assert summary.whole.window_s == 20


def test_failed_scrapes_are_counted_and_skipped() -> None:
    t = FakeTime()
    scrape = Recorded(t, switch_s=15, fail_at=(10.0, 15.0))
    seen, summary = run(WatchSettings(interval_s=10, duration_s=30, window_s=20, sample_interval_s=5), scrape, t)
    ticks = [tick for tick, _ in seen]
    assert [tick.scrape_failures for tick in ticks] == [1, 1, 0]
    assert summary.scrape_failures == 2
    assert "1 scrape(s) failed" in render_tick(ticks[0])


def test_the_first_scrape_must_work() -> None:
    t = FakeTime()
    with pytest.raises(TargetError):
        run(WatchSettings(interval_s=10, duration_s=30), Recorded(t, 0, fail_at=(0.0,)), t)


@pytest.mark.parametrize("kwargs", [
    {"interval_s": 0.5}, {"interval_s": 10, "duration_s": 5}, {"interval_s": 10, "window_s": 5},
    {"interval_s": 10, "duration_s": 100_000}, {"interval_s": 2, "sample_interval_s": 5},
])
def test_settings_are_bounded(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        WatchSettings.model_validate(kwargs)
    assert WatchSettings(interval_s=10).effective_window_s == 30 and WatchSettings(interval_s=10).duration_s == 600


def test_cli_refuses_what_watch_cannot_do(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_TUNE_ALLOWED_TARGETS", raising=False)
    # a non-loopback target must be allowlisted: typing it is not enough for a long-running poll
    assert main(["diagnose", "http://192.0.2.10:8000", "--watch", "5", "--duration", "10"]) == 2
    assert "not allowed" in capsys.readouterr().err
    saved = tmp_path / "m.prom"
    saved.write_text(BEFORE)
    assert main(["diagnose", "--metrics-file", str(saved), "--watch", "5"]) == 2
    assert "live server" in capsys.readouterr().err
    assert main(["diagnose", "http://127.0.0.1:9", "--duration", "10"]) == 2
    assert "--watch" in capsys.readouterr().err
    assert main(["diagnose", "http://127.0.0.1:9", "--watch", "5", "--duration", "1"]) == 2
    assert main(["diagnose", "http://127.0.0.1:9", "--watch", "5", "--duration", "10"]) == 3  # nothing listens
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 1 and "vllm-tune: error:" in err
