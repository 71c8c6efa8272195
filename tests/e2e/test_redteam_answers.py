"""Hand-written correct answers for every red-team pair, played back through the real pipeline.

redteam/correct_answers.jsonl holds, for each pair of redteam/pairs.jsonl, what a correct
judge answers under docs/judge.md and docs/scoring.md (as revised on 2026-12-02): both
extractions, the matching and the keyed grading, and, for a pair whose units are not all
correct, the error adjudication (with the units it answers, so that it is re-numbered to
the units the pipeline shows). `AnswerKeyJudge` returns them stage by stage to an
`Evaluator` (repair, scoring and records are the real ones), and the red-team checker
must then pass every pair. So a pair whose expectations a correct judge cannot meet
fails here, not on the GPU server.

Three pairs failed a correct judge before the 2026-12-02 rules (clinical review RT1-RT3):

* rt01: the reference's "lung edge 3 cm from the apex" has no clinical quantity, so the
  candidate's omitting it is a minor measurement error (PAR); it used to be major (INC).
* rt02, rt06: an acuity-scoped global negative ("No acute cardiopulmonary process.")
  binds only the other report's rule-outs, never a present finding (JUDGE rule 14).
  Bound to the pneumonia and the effusion (or the pneumothorax, fractures and effusion)
  it folded several misses into one INC unit and the pair scored 1 (or 2) actionable
  errors, below the expectation. Scoring contract 4 counts such a unit once per distinct
  status-inverted finding, so that binding no longer hides the misses:
  `test_the_old_binding_no_longer_folds_misses_under_contract_4` keeps it as the case.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import re
import unicodedata
from pathlib import Path
from typing import Any, Optional

import pytest

from radmatch_audit import Evaluator, PairInput
from radmatch_audit.judges.base import JudgeError, JudgeResult, Usage, estimate_tokens
from radmatch_audit.read.redteam import check_record, load_pairs
from radmatch_audit.core.schemas import ANSWER_MODELS
from radmatch_audit.testing.scripted import stage_of

REPO = Path(__file__).resolve().parents[2]
PAIRS = REPO / "redteam" / "pairs.jsonl"
ANSWERS = REPO / "redteam" / "correct_answers.jsonl"
STAGES = ("extract_reference", "extract_candidate", "match", "grade")
ADJUDICATE = "adjudicate"  # only for a pair whose units are not all COR
# the units an adjudicate line answers, in its numbering: {"kind", "gt_ids", "pred_ids"} each
SHOWN = "adjudicate_units"


def load_answers(path: Path = ANSWERS) -> dict[str, dict[str, Any]]:
    """{pair_id: {stage: answer}} (and SHOWN beside an adjudication); a line that is
    malformed or repeats a stage is named."""
    answers: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        entry = json.loads(line)
        fields = {"pair_id", "stage", "answer"} | ({"shown"} if entry.get("stage") == ADJUDICATE else set())
        if set(entry) != fields or entry["stage"] not in (*STAGES, ADJUDICATE):
            raise ValueError(f"{path.name}: line {number}: want pair_id, stage (one of {STAGES + (ADJUDICATE,)}) "
                             "and answer, and shown with an adjudicate answer")
        stages = answers.setdefault(entry["pair_id"], {})
        if entry["stage"] in stages:
            raise ValueError(f"{path.name}: line {number}: {entry['pair_id']} repeats stage {entry['stage']}")
        stages[entry["stage"]] = entry["answer"]
        if entry["stage"] == ADJUDICATE:
            stages[SHOWN] = entry["shown"]
    return answers


class AnswerKeyJudge:
    """Answers one pair's calls from its answer key: extraction by which report is asked
    about, matching as written, grading re-ordered to the rows the pipeline sends (in the
    keyed form, or the older errors_per_match form while the schema still wants it), the
    adjudication re-numbered to the units it is shown. What does not fit the key is noted
    in `problems` rather than raised; an adjudication the key cannot answer also fails
    that call, so that no count is made up."""

    backend = "scripted"
    model = "answer-key"
    context_window = None

    def __init__(self, pair: dict[str, Any], key: dict[str, Any]) -> None:
        self.pair, self.key = pair, key
        self.problems: list[str] = []
        self.adjudicated = False

    def _side(self, report: str) -> str:
        # the pipeline may neutralise control strings before sending (JUDGE rule 17), so
        # an inexact report goes to the closer side
        for side in ("reference", "candidate"):
            if report == self.pair[side]:
                return side
        ratio = {s: difflib.SequenceMatcher(None, report, self.pair[s], autojunk=False).ratio()
                 for s in ("reference", "candidate")}
        return max(ratio, key=ratio.get)

    def _grading(self, user: dict[str, Any], schema: Any) -> dict[str, Any]:
        keyed = {(g["pred_id"], g["gt_id"]): g for g in self.key["grade"]["grades"]}
        sent = [(p["pred_finding"]["finding_id"], p["gt_finding"]["finding_id"]) for p in user["pairs"]]
        if set(sent) != set(keyed):
            self.problems.append(f"grading rows sent {sorted(sent)} but answered {sorted(keyed)}")
        rows = [keyed.get(row, {"pred_id": row[0], "gt_id": row[1], "errors": []}) for row in sent]
        if "grades" in schema.model_fields:
            return {"grades": rows}
        return {"errors_per_match": [row["errors"] for row in rows]}

    def _text(self, finding_id: str) -> str:
        side = "reference" if finding_id.startswith("gt_") else "candidate"
        return self.key[f"extract_{side}"]["findings"][int(finding_id.split("_")[1]) - 1]["text"]

    def _adjudication(self, user: dict[str, Any]) -> dict[str, Any]:
        """The key's adjudication, each entry numbered as the unit it answers is now shown
        (a unit is known by its kind and its findings' texts, the message has no ids)."""
        self.adjudicated = True
        sent = [(u["kind"], tuple(sorted(u["reference_findings"])), tuple(sorted(u["candidate_findings"])))
                for u in user["units"]]
        if ADJUDICATE not in self.key:
            self.problems.append(f"an adjudication of {len(sent)} unit(s) was asked for, "
                                 "but the key has no adjudicate line for this pair")
            raise JudgeError("the answer key has no adjudicate answer")
        keyed = [(u["kind"], tuple(sorted(map(self._text, u["gt_ids"]))), tuple(sorted(map(self._text, u["pred_ids"]))))
                 for u in self.key[SHOWN]]
        if sorted(sent) != sorted(keyed):
            self.problems.append(f"the adjudication was shown units {sent} but the key answers {keyed}")
            raise JudgeError("the answer key's adjudicate units are not the units shown")
        answer = self.key[ADJUDICATE]
        entries: dict[tuple, list[dict[str, Any]]] = {}
        for unit, entry in zip(keyed, answer["units"]):
            entries.setdefault(unit, []).append(entry)
        units = [{**entries[unit].pop(0), "unit": number} for number, unit in enumerate(sent, 1)]
        return {**answer, "units": units}

    async def generate(self, messages, schema, *, max_tokens):
        user = json.loads(messages[-1]["content"])
        stage = stage_of(schema)
        if stage == "extract":
            answer = self.key[f"extract_{self._side(user['report'])}"]
        elif stage == "match":
            answer = self.key["match"]
        elif stage == ADJUDICATE:
            answer = self._adjudication(user)
        else:
            answer = self._grading(user, schema)
        return JudgeResult(text=json.dumps(answer), usage=Usage(prompt_tokens=10, completion_tokens=5))

    def count_tokens(self, messages) -> int:
        return estimate_tokens(messages)

    async def check(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def play_back(pair: dict[str, Any], key: dict[str, Any], adjudication: bool = True):
    judge = AnswerKeyJudge(pair, key)
    with Evaluator(judge, cache_dir=None, modality=pair["modality"], retries=0, backoff_s=0,
                   adjudication=adjudication) as evaluator:
        (record,) = evaluator.evaluate([PairInput(
            reference=pair["reference"], candidate=pair["candidate"], pair_id=pair["pair_id"],
            modality=pair["modality"], indication=pair["indication"])])
    if adjudication and ADJUDICATE in key and not judge.adjudicated:
        judge.problems.append("the key has an adjudicate line, but every unit is COR and no adjudication was asked for")
    return record, judge.problems


SET = load_pairs(PAIRS)
KEY = load_answers()


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).casefold()


# --------------------------------------------------------------------------- the key itself


def test_every_pair_has_every_stage_and_no_other_pair_is_keyed():
    assert set(KEY) == {p["pair_id"] for p in SET}
    for pair_id, stages in KEY.items():  # whether an adjudication is due, playback checks
        assert set(stages) - {ADJUDICATE, SHOWN} == set(STAGES), pair_id


@pytest.mark.parametrize("pair", SET, ids=lambda p: p["pair_id"])
def test_the_key_is_consistent_with_its_pair(pair):
    key = KEY[pair["pair_id"]]
    ids = {"reference": set(), "candidate": set()}
    for side, prefix in (("reference", "gt"), ("candidate", "p")):
        findings = key[f"extract_{side}"]["findings"]
        ids[side] = {f"{prefix}_{i}" for i in range(1, len(findings) + 1)}
        for finding in findings:  # evidence is verbatim (attribution's comparison)
            assert finding["evidence"], (side, finding["text"])
            for quote in finding["evidence"]:
                assert _norm(quote) in _norm(pair[side]), (side, quote)
    match = key["match"]
    in_rows = {r["gt_id"] for r in match["matches"]} | {r["pred_id"] for r in match["matches"]}
    for side, prefix, unmatched in (("reference", "gt", match["unmatched_gt"]), ("candidate", "p", match["unmatched_pred"])):
        named = {i for i in in_rows if i.startswith(prefix + "_")}
        assert named <= ids[side] and set(unmatched) <= ids[side]
        assert named | set(unmatched) == ids[side] and not named & set(unmatched), side
        assert len(unmatched) == len(set(unmatched))
    for grade in key["grade"]["grades"]:  # keyed form, reasoning first (JUDGE rule 18)
        assert list(grade) == ["pred_id", "gt_id", "errors"]
        for error in grade["errors"]:
            assert list(error) == ["reasoning", "dimension", "severity"]
    if ADJUDICATE in key:  # a valid answer, one entry per unit in its numbering, reasoning first
        ANSWER_MODELS[ADJUDICATE].model_validate(key[ADJUDICATE])
        entries = key[ADJUDICATE]["units"]
        assert [e["unit"] for e in entries] == list(range(1, len(key[SHOWN]) + 1))
        assert all(list(e) == ["unit", "reasoning", "errors"] for e in entries)
        for unit in key[SHOWN]:
            assert unit["kind"] in ("MIS", "SPU", "INC", "PAR")
            assert set(unit["gt_ids"]) <= ids["reference"] and set(unit["pred_ids"]) <= ids["candidate"]


# --------------------------------------------------------------------------- playback


@pytest.mark.parametrize("pair", SET, ids=lambda p: p["pair_id"])
def test_a_correct_judge_passes_the_pair(pair):
    key = KEY[pair["pair_id"]]
    record, problems = play_back(pair, key)
    assert not problems, problems
    result = check_record(record, pair)
    assert result.status == "pass", result.why
    adjudication = key.get(ADJUDICATE, {"units": [], "unlisted": []})
    assert record.scores.adjudication == "current"
    assert record.scores.significant_errors == (
        sum(e["errors"] for e in adjudication["units"]) + len(adjudication.get("unlisted", [])))


def _pair(pair_id: str) -> dict[str, Any]:
    return next(p for p in SET if p["pair_id"] == pair_id)


def test_a_call_the_key_does_not_answer_fails_by_name():
    key = {stage: answer for stage, answer in KEY["rt19-copy-with-one-critical-error"].items()
           if stage not in (ADJUDICATE, SHOWN)}
    record, problems = play_back(_pair("rt19-copy-with-one-critical-error"), key)
    assert problems == ["an adjudication of 1 unit(s) was asked for, but the key has no adjudicate line for this pair"]
    assert record.scores.adjudication == "failed" and record.scores.significant_errors is None


def test_an_adjudication_no_call_needs_is_named():
    key = {**KEY["rt07-boilerplate-control"], ADJUDICATE: {"units": []}, SHOWN: []}
    _, problems = play_back(_pair("rt07-boilerplate-control"), key)
    assert problems == ["the key has an adjudicate line, but every unit is COR and no adjudication was asked for"]


def test_the_key_is_renumbered_to_the_units_shown_and_units_it_lacks_fail():
    # rt20: the missed right consolidation holds the error, the left one (the same wrong side) none
    key = copy.deepcopy(KEY["rt20-laterality-flip"])
    key[SHOWN].reverse()
    key[ADJUDICATE]["units"].reverse()
    for number, entry in enumerate(key[ADJUDICATE]["units"], 1):
        entry["unit"] = number
    record, problems = play_back(_pair("rt20-laterality-flip"), key)
    assert not problems
    assert {u.outcome: u.significant_errors for u in record.scores.units if u.outcome != "COR"} == {"MIS": 1, "SPU": 0}
    key[SHOWN][0]["kind"] = "INC"
    record, problems = play_back(_pair("rt20-laterality-flip"), key)
    assert len(problems) == 1 and problems[0].startswith("the adjudication was shown units")
    assert record.scores.significant_errors is None


def _with_match(pair_id: str, rows: list[dict[str, Any]], unmatched_pred: list[str], unmatched_gt: list[str],
                grades: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    key = copy.deepcopy(KEY[pair_id])
    key["match"] = {"matches": rows, "unmatched_pred": unmatched_pred, "unmatched_gt": unmatched_gt}
    key["grade"] = {"grades": grades if grades is not None else [
        {"pred_id": r["pred_id"], "gt_id": r["gt_id"], "errors": []} for r in rows]}
    return key


def _row(pred: str, gt: str, scope: str) -> dict[str, Any]:
    return {"pred_id": pred, "gt_id": gt, "reasoning": "Old binding.", "match_scope": scope}


@pytest.mark.parametrize("pair_id, key", [
    # the global acute negative (p_4) bound to the present pneumonia and effusion as well
    ("rt02-instruction-in-reference", lambda: _with_match("rt02-instruction-in-reference", [
        _row("p_1", "gt_1", "aggregate"), _row("p_2", "gt_2", "aggregate"), _row("p_3", "gt_3", "aggregate"),
        _row("p_4", "gt_1", "aggregate"), _row("p_4", "gt_2", "aggregate"), _row("p_4", "gt_3", "aggregate")], [], [])),
    # "No acute cardiopulmonary process." to the pneumothorax and effusion, "No acute osseous
    # abnormality." to the fractures
    ("rt06-boilerplate-vs-real", lambda: _with_match("rt06-boilerplate-vs-real", [
        _row("p_1", "gt_1", "aggregate"), _row("p_1", "gt_3", "aggregate"), _row("p_4", "gt_2", "direct")],
        ["p_2", "p_3"], [])),
])
def test_the_old_binding_no_longer_folds_misses_under_contract_4(pair_id, key):
    pair = _pair(pair_id)
    record, problems = play_back(pair, key(), adjudication=False)  # the key adjudicates other units
    assert not problems
    correct, _ = play_back(pair, KEY[pair_id], adjudication=False)
    unadjudicated = {**pair, "expect": [e for e in pair["expect"] if e.get("path") != "significant_errors"]}
    assert check_record(record, unadjudicated).status == "pass"
    assert record.scores.actionable_errors >= correct.scores.actionable_errors


def test_the_answer_token_benchmark_reads_every_stage_of_the_key():
    spec = importlib.util.spec_from_file_location("bench_pipeline", REPO / "benchmarks" / "bench_pipeline.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    counts = {stage: len(answers) for stage, answers in bench._authored_answers(str(ANSWERS)).items()}
    assert counts == {"extract": 2 * len(SET), "match": len(SET), "grade": len(SET),
                      "adjudicate": sum(ADJUDICATE in key for key in KEY.values())}
