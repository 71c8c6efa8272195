"""Score stability: `--samples K` runs the stages K times per pair and stores every sample."""

import json

from radmatch_audit.read.corpus import CorpusSummary
from radmatch_audit.run.pipeline import Evaluator
from radmatch_audit.files.record_io import parse_record
from radmatch_audit.read.recompute import score_record
from radmatch_audit.core.records import PairInput
from radmatch_audit.testing.scripted import ScriptedJudge

REFERENCE = "Small right pleural effusion. No pneumothorax. Heart size is normal."
CANDIDATE = "Small right pleural effusion. Heart size is normal."


class WaveringJudge(ScriptedJudge):
    """The scripted judge, except that every second extraction of the candidate also
    finds a pneumothorax that the report does not mention (a sample-to-sample wobble)."""

    def __init__(self, fail_candidate_extraction_at=None):
        super().__init__()
        self.candidate_extractions = 0
        self.fail_at = fail_candidate_extraction_at

    async def generate(self, messages, schema, *, max_tokens):
        result = await super().generate(messages, schema, max_tokens=max_tokens)
        user = json.loads(messages[-1]["content"])
        if self.calls[-1][0] == "extract" and user["report"] == CANDIDATE:
            self.candidate_extractions += 1
            if self.candidate_extractions == self.fail_at:
                from radmatch_audit.judges.base import JudgeError

                raise JudgeError("scripted failure")
            if self.candidate_extractions % 2 == 0:
                answer = json.loads(result.text)
                answer["findings"].append({
                    "text": "Large left pneumothorax.", "clinical_status": "abnormal",
                    "clinical_significance": "critical", "comparison": None,
                    "measurements": [], "evidence": [],
                })
                result = type(result)(text=json.dumps(answer), usage=result.usage)
        return result


def evaluate(judge, samples, pairs=1):
    with Evaluator(judge, samples=samples, concurrency=1) as evaluator:
        return evaluator.evaluate(
            [PairInput(reference=REFERENCE, candidate=CANDIDATE, pair_id=str(i), study_id="s")
             for i in range(pairs)]
        )


def test_three_samples_are_stored_scored_and_their_stability_reported():
    (record,) = evaluate(WaveringJudge(), samples=3)
    assert record.error is None and len(record.samples) == 2
    assert [s.index for s in record.samples] == [1, 2]
    counts = [record.scores.actionable_errors] + [s.scores.actionable_errors for s in record.samples]
    assert counts == [0, 1, 0]  # sample 1 adds a spurious critical pneumothorax
    st = record.stability
    assert (st.samples, st.scored, st.actionable_errors, st.spread, st.identical) == (3, 3, counts, 1, False)
    votes = {(v.side, v.unit): v for v in st.units}
    spurious = votes[("candidate", "large left pneumothorax.")]
    assert spurious.outcomes == [None, "SPU", None] and spurious.majority is None
    missed = votes[("reference", "no pneumothorax.")]
    assert missed.majority == "MIS"


def test_recompute_reproduces_every_sample_and_a_single_sample_record_is_unchanged():
    (record,) = evaluate(WaveringJudge(), samples=3)
    again = score_record(parse_record(record.to_json(), ignore_scores=True))
    assert again.to_json() == record.to_json()
    (single,) = evaluate(WaveringJudge(), samples=1)
    assert "samples" not in json.loads(single.to_json()) and single.stability is None


def test_each_sample_asks_the_judge_itself_and_a_failed_sample_stays_in_its_sample():
    judge = WaveringJudge(fail_candidate_extraction_at=3)
    (record,) = evaluate(judge, samples=3)
    extractions = [u for stage, u in judge.calls if stage == "extract"]
    assert len(extractions) == 6  # reference and candidate, once per sample: nothing shared
    assert record.error is None
    failed = [s for s in record.samples if s.error]
    assert len(failed) == 1 and failed[0].scores is None and "extract" in failed[0].error
    assert record.stability.scored == 2 and record.stability.identical is False


def test_summary_reports_the_share_of_pairs_with_identical_counts():
    records = evaluate(WaveringJudge(), samples=2, pairs=1) + evaluate(ScriptedJudge(), samples=2, pairs=1)
    summary = CorpusSummary()
    for i, record in enumerate(records):
        summary.add(record.model_copy(update={"pair_id": f"p{i}"}))
    stability = summary.to_dict()["stability"]
    assert (stability["pairs"], stability["identical"], stability["share"]) == (2, 1, 0.5)
    low, high = stability["share_ci"]
    assert low < 0.5 < high
