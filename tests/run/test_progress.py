"""Progress inside a pair: each judge call's stage is told as it starts and ends."""

from __future__ import annotations

from radmatch_audit.run.pipeline import Evaluator
from radmatch_audit.run.progress import stage_reporter
from radmatch_audit.core.records import PairInput
from radmatch_audit.testing.scripted import ScriptedJudge


class Bar:
    def __init__(self) -> None:
        self.descriptions: list[str] = []

    def set_description_str(self, desc: str) -> None:
        self.descriptions.append(desc)


def test_the_bar_shows_each_stage_of_a_pair_as_it_runs():
    bar = Bar()
    pair = PairInput(reference="Small left pleural effusion.", candidate="Small left pleural effusion.")
    with Evaluator(ScriptedJudge(), concurrency=1) as evaluator:
        evaluator.calls.on_call = stage_reporter(bar)
        (record,) = evaluator.evaluate([pair])
    assert record.error is None
    stages = [d.split()[0] for d in bar.descriptions]
    events = [d.split(" ", 1)[1] for d in bar.descriptions]
    # one extraction (both reports read the same), the match, the grade; each running, then done
    assert stages == ["extract"] * 2 + ["match"] * 2 + ["grade"] * 2
    assert events[0::2] == ["running"] * 3
    assert all(e.startswith("done in ") and e.endswith(" s") for e in events[1::2])


def test_a_cached_answer_tells_nothing(tmp_path):
    bar = Bar()
    pair = PairInput(reference="No pneumothorax.", candidate="No pneumothorax.")
    for _ in range(2):
        with Evaluator(ScriptedJudge(), cache_dir=tmp_path) as evaluator:
            evaluator.calls.on_call = stage_reporter(bar)
            evaluator.evaluate([pair])
        told, bar.descriptions = bar.descriptions, []
    assert told == []  # the second run's answers all came from the cache
