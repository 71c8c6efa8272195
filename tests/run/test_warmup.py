"""run/warmup.py: setup prefills the embedded judge's fixed turns of every stage, for the
modality asked (chest_xray by default); no real model is loaded here."""

from __future__ import annotations

from typing import ClassVar

import pytest

from radmatch_audit.run.warmup import warm_prefixes
from radmatch_audit.stages.prompt import stage_prompt


class _RecordingLocalJudge:
    made: ClassVar[list[_RecordingLocalJudge]] = []

    def __init__(self) -> None:
        self.prefilled: list[list[dict]] = []
        _RecordingLocalJudge.made.append(self)

    def prefill(self, messages) -> None:
        self.prefilled.append(messages)


@pytest.fixture
def recorder(monkeypatch):
    _RecordingLocalJudge.made = []
    monkeypatch.setattr("radmatch_audit.judges.local.LocalTransformersJudge", _RecordingLocalJudge)
    return _RecordingLocalJudge


@pytest.mark.parametrize("modality, expected", [(None, "chest_xray"), ("head_ct", "head_ct")])
def test_each_stage_s_fixed_turns_are_prefilled_by_one_judge(recorder, modality, expected):
    assert warm_prefixes(modality) == 4
    (judge,) = recorder.made
    stages = ["extract", "match", "grade", "adjudicate"]
    assert len(judge.prefilled) == len(stages)
    for stage, messages in zip(stages, judge.prefilled):
        turns = [(m["role"], m["content"]) for m in messages[:-1]]
        assert turns == list(stage_prompt(stage, expected).turns)
