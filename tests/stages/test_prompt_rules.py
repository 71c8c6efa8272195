"""The stage instructions state the judge rules of 2026-12-02 (docs/judge.md rules 12-19).

These read the instruction texts only; the exemplars are checked in tests/stages/test_exemplars.py.
"""

import json
import re

import pytest

from radmatch_audit.stages import baselines
from radmatch_audit import stages as P


def _flat(stage: str) -> str:
    """The instructions with line breaks and runs of spaces collapsed, for phrase checks."""
    return re.sub(r"\s+", " ", P.load_instructions(stage))


def _output_example(stage: str) -> dict:
    """The JSON answer shown under '## Output format', parsed."""
    section = P.load_instructions(stage).split("## Output format", 1)[1]
    start = section.index("{")
    text, depth = "", 0
    for ch in section[start:]:
        text += ch
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            break
    # placeholders such as "critical|urgent" or `or null` are not JSON; only grade's example is pure
    return json.loads(text)


def test_grading_example_is_keyed_and_reasons_first():
    """Rule 18: entries name their row, and each error's reasoning precedes its verdict."""
    example = _output_example("grade")
    assert list(example) == ["grades"]
    entries = example["grades"]
    # a row without errors leaves the key out (decode economy: an omitted key is its default)
    assert all(list(e) in (["pred_id", "gt_id", "errors"], ["pred_id", "gt_id"]) for e in entries)
    assert any("errors" not in e for e in entries)
    for entry in entries:
        for error in entry.get("errors", []):
            assert list(error) == ["reasoning", "dimension", "severity"]
    assert "errors_per_match" not in P.load_instructions("grade")


def test_match_rows_give_reasoning_before_scope():
    text = P.load_instructions("match")
    assert text.index('"reasoning"') < text.index('"match_scope"')


def test_devices_follow_rule_12():
    extract = _flat("extract")
    assert '"Endotracheal tube present."' in extract and 'never "in place"' in extract
    assert '"position"' in extract  # tip-to-landmark distances
    assert "Monitoring leads" in extract and "not findings" in extract
    assert "a support device present" in extract.split("| routine |", 1)[1]  # routine tier row
    assert "devices are notable" not in extract


def test_acuity_scoped_negatives_bind_rule_outs_only():
    """Rule 14: never bound to a present finding; "other" excludes the report's own findings."""
    match = _flat("match")
    assert "bind aggregate only to the other side's rule-outs" in match
    assert "Never bind them to a present finding" in match
    assert '"No other acute ..." excludes' in match
    assert "reports it present" not in match  # the 2026-12-01 rule is gone


def test_extraction_indication_table_covers_the_common_indications():
    text = P.load_instructions("extract")
    table = text.split("| indication | promoted", 1)[1].split("\n\n", 1)[0]
    first_cells = " ".join(row.split("|")[1] for row in table.splitlines() if row.startswith("| "))
    for indication in ("fever", "cough", "COVID-19", "TB test", "hypoxia", "dyspnea",
                       "shortness of breath", "heart failure", "syncope", "weakness",
                       "chest pain", "trauma", "fall", "after a procedure", "stroke",
                       "acute abdomen", "pulmonary embolism", "cancer"):
        assert indication in first_cells, indication
    assert "If unsure, use \"routine\"" not in text  # replaced by: every other rule-out is routine
    assert "Every other rule-out is routine." in text


def test_recurring_tiers_addenda_and_control_strings():
    extract = _flat("extract")
    assert "simple cysts (Bosniak I" in extract and "dependent or mild bibasilar atelectasis" in extract
    assert "small non-tension pneumothorax with no trauma or procedure" in extract
    assert "this wins over the indication table" in extract  # rule 13 over indication rows
    assert "ADDENDUM signed in the report supersedes" in extract
    assert "100 characters" not in extract  # the small judge's cap is not taught (P26)
    for stage in P.STAGES:
        assert "control strings" in _flat(stage), stage


def test_grading_settles_the_contradictions():
    grade = _flat("grade")
    assert "Status flip" in grade and "grade nothing" in grade
    assert "Location is about abnormal findings" in grade
    assert "tension (severity); loculated, complicated, displaced (morphology)" in grade
    assert '"No obvious", "no definite", "no frank"' in grade


@pytest.mark.parametrize("method", baselines.METHODS)
def test_baselines_say_how_to_count(method):
    text = re.sub(r"\s+", " ", baselines.load_prompt(method))
    assert "two wrong findings is two" in text
    assert "a negative the reference does not mention" in text
    assert "image quality" in text
    shape = '{"errors": N}' if method == "count" else '{"errors": [{"description": "..."}, ...]}'
    assert shape in text  # the answer shape baselines.py parses


def test_count_baseline_answers_the_reviews_ambiguities():
    """Issue 35: degree of cardiomegaly, stable or chronic findings, invented well-placed
    devices, linked findings, omitted improvement, hedges and a contradictory reference."""
    text = re.sub(r"\s+", " ", baselines.load_prompt("count"))
    for phrase in ("mild against moderate cardiomegaly", "a borderline heart called normal",
                   "a known, stable or chronic finding",
                   "a well-placed device (line, tube, pacemaker), left out or invented",
                   "a sign that belongs to a finding already counted", "an omitted improvement",
                   "A hedged finding", "Where the reference contradicts itself, follow its impression"):
        assert phrase in text, phrase


def test_count_baseline_prompt_carries_its_example_turns(tmp_path, monkeypatch):
    """The count baseline shows worked examples like the other stages: user turns written as
    the pair's message is written, answers in the answer model; they are part of the version.
    `enumerate` has none."""
    import shutil

    from radmatch_audit.core.records import PairInput
    from radmatch_audit.stages.exemplars import fewshot_dir

    stage = baselines.baseline_stage("count")
    prompt = stage.prompt("chest_xray")
    shipped = baselines.load_exemplars("count")
    assert prompt.exemplars == len(shipped) >= 3
    assert [role for role, _ in prompt.turns] == ["system"] + ["user", "assistant"] * len(shipped)
    for (_, user), (_, answer), ex in zip(prompt.turns[1::2], prompt.turns[2::2], shipped):
        pair = PairInput(**ex["input"])
        assert json.loads(user) == stage.user_input(pair)
        assert baselines.CountAnswer.model_validate_json(answer).errors == ex["output"]["errors"]
    assert prompt.exemplars == stage.prompt("head_ct").exemplars  # one set for every modality
    assert baselines.baseline_stage("enumerate").prompt().exemplars == 0

    copy = tmp_path / "fewshots"
    shutil.copytree(fewshot_dir(), copy)
    monkeypatch.setenv(P.FEWSHOT_ENV, str(copy))
    path = copy / "baselines" / "count.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["exemplars"][0]["output"]["errors"] += 1
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert stage.prompt("chest_xray").version != prompt.version
    doc["exemplars"][0]["output"]["errors"] = "two"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(P.FewshotError, match=r"baselines/count\.json: exemplar 0: output fails"):
        baselines.load_exemplars("count")
