"""scripts/contract_changes.py: records written before a contract change (commit bdb6a1e)
recompute to scores that differ only where a rule of contract 3 (2026-12-02) or contract 4
(2026-12-05: an actionable INC unit counts each inverted finding) applies, and the script
explains each changed unit or exits 1 naming the pair. docs/scoring.md logs the changes.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from builders import f, matching, record, row
from radmatch_audit.read.recompute import score_record


REPO = Path(__file__).resolve().parents[2]


OLD_RECORDS = REPO / "tests" / "data" / "records_bdb6a1e.jsonl.gz"


def load_script():
    spec = importlib.util.spec_from_file_location(
        "contract_changes", REPO / "scripts" / "contract_changes.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recomputed(tmp_path_factory):
    """The records written at bdb6a1e, and the same after `radmatch-audit recompute` (the CLI)."""
    from radmatch_audit.cli import main
    from radmatch_audit.files.record_io import parse_record

    script = load_script()
    folder = tmp_path_factory.mktemp("old")
    src, out = folder / "old.jsonl", folder / "new.jsonl"
    src.write_bytes(gzip.decompress(OLD_RECORDS.read_bytes()))
    assert main(["recompute", str(src), "-o", str(out), "--json"]) == 0
    old = [parse_record(line) for line in script.jsonl_lines(src.read_text("utf-8"))]
    new = [parse_record(line) for line in script.jsonl_lines(out.read_text("utf-8"))]
    return script, old, new


def test_old_records_change_only_where_a_rule_applies(recomputed):
    script, old, new = recomputed
    assert len(old) == len(new) > 250 and [r.pair_id for r in old] == [r.pair_id for r in new]
    tallies, problems = script.tally(old, new)
    assert problems == []
    # the file holds cases of rules 1, 3 and 4 (records before the change hold no position)
    assert tallies[1].units > 0 and tallies[3].units > 0 and tallies[4].units > 0
    assert tallies[2].units == 0
    assert tallies[1].moved == tallies[1].units  # rule 1 always moves the actionable flag
    # contract 4: some stored INC units hold two inverted findings, and count them now
    assert tallies[5].units == tallies[5].moved == len(tallies[5].pairs) > 0
    assert tallies[5].delta >= tallies[5].units


def test_a_count_no_rule_explains_fails_the_check(recomputed):
    """A unit whose actionable_errors moved with no inverted finding to explain it fails,
    even in a pair whose other units a rule explains."""
    script, old, new = recomputed
    tampered = 0
    for a, b in zip(old, new):
        changed = script.explain_record(a, b) if b.scores else {}
        still = [u for u in b.scores.units if script._key(u) not in changed and u.actionable] if b.scores else []
        if not changed or not still:
            continue
        still[0].actionable_errors += 1
        b.scores.actionable_errors += 1
        with pytest.raises(script.Unexplained, match="actionable_errors"):
            script.explain_record(a, b)
        tampered += 1
        if tampered == 3:
            break
    assert tampered == 3


def test_the_check_fails_on_a_change_no_rule_explains(recomputed):
    script, old, new = recomputed
    tampered = 0
    for a, b in zip(old, new):
        if b.scores is None:
            continue
        for unit in b.scores.units:
            if unit.kind == "matched" and unit.outcome == "COR":
                unit.outcome, unit.actionable = "INC", True
                with pytest.raises(script.Unexplained, match=re.escape(repr(b.pair_id))):
                    script.explain_record(a, b)
                tampered += 1
                break
        if tampered == 3:
            break
    assert tampered == 3


def test_boundary_probes_move_as_each_rule_says(recomputed):
    _, old, new = recomputed
    by_id = {b.pair_id: (a, b) for a, b in zip(old, new)}

    def actionable(pair_id):
        a, b = by_id[f"probe-{pair_id}"]
        return a.scores.actionable_errors, b.scores.actionable_errors

    assert actionable("spu-normal-urgent") == (1, 0)
    assert actionable("spu-abnormal-urgent") == (1, 1)
    assert actionable("spu-mixed-notable") == (2, 1)
    assert actionable("spu-normal-routine") == (0, 0)
    assert actionable("omitted-no-quantity") == (1, 0)
    assert actionable("omitted-quantity") == (1, 1)
    # 6 mm against 5.5 mm: below 6 before (> 6), at 6 is in the 6-8 group now (>= 6)
    assert actionable("threshold-solid_nodule_diameter-6-mm-5.5") == (0, 1)
    assert actionable("threshold-solid_nodule_diameter-6-mm-6.5") == (1, 0)
    assert actionable("threshold-cardiothoracic_ratio-0.5-%-49") == (0, 0)  # > 0.50 as before


def version_3_line(rec, pair_id: str) -> str:
    """`rec` as a version-3 records line: scored before contract 4, one error per actionable unit."""
    data = json.loads(rec.to_json())
    data["schema_version"], data["pair_id"] = 3, pair_id
    scores = data["scores"]
    for unit in scores["units"]:
        del unit["actionable_errors"], unit["significant_errors"]
    for key in ("significant_errors", "adjudication", "unlisted_errors"):
        del scores[key]
    scores["actionable_errors"] = sum(u["actionable"] for u in scores["units"])
    return json.dumps(data) + "\n"


def umbrella(second_status: str = "abnormal"):
    """"Lungs are clear." (normal) matched to two candidate consolidations."""
    gt = [f("gt_1", status="normal", sig="urgent")]
    pred = [f("p_1", sig="urgent"), f("p_2", status=second_status, sig="urgent")]
    return record("umbrella", gt, pred, matching([row("p_1", "gt_1"), row("p_2", "gt_1")]))


def test_rule_5_explains_a_version_3_record_that_contract_4_moves(tmp_path, capsys):
    script = load_script()
    path = tmp_path / "v3.jsonl"
    path.write_text(version_3_line(score_record(umbrella()), "two-inverted")
                    + version_3_line(score_record(umbrella("normal")), "one-inverted"), "utf-8")
    old, new = script.recompute_file(path)
    tallies, problems = script.tally(old, new)
    assert problems == []
    assert (tallies[5].units, tallies[5].moved, tallies[5].pairs, tallies[5].delta) == (1, 1, {"two-inverted"}, 1)
    assert all(tallies[rule].units == 0 for rule in (1, 2, 3, 4))
    assert script.main([str(path)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"5 INC counts each inverted finding +2026-12-05 +1 +1 +1 +1\.000 -> 1\.500", table)


def test_the_script_exits_1_naming_a_pair_whose_change_no_rule_explains(tmp_path, capsys):
    script = load_script()
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(version_3_line(score_record(umbrella()), "two-inverted"), "utf-8")
    data = json.loads(version_3_line(score_record(umbrella("normal")), "counted-twice"))
    data["scores"]["units"][0]["actionable_errors"] = 2  # one inverted finding, counted twice
    data["scores"]["actionable_errors"] = 2
    bad.write_text(json.dumps(data) + "\n", "utf-8")
    assert script.main([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "good.jsonl:" in out and "bad.jsonl:" in out
    (line,) = [x for x in out.splitlines() if x.startswith("UNEXPLAINED:")]
    assert "'counted-twice'" in line and "actionable_errors 2 -> 1" in line


def test_docs_log_the_contract_changes():
    text = (REPO / "docs" / "scoring.md").read_text("utf-8")
    log = text[text.index("## Contract changes"):].lower()
    assert "2026-12-02" in log
    for words in ("unaddressed negative", "`position`", "quantity", "`>=`", "side"):
        assert words in log, words
    readme = (REPO / "README.md").read_text("utf-8")
    assert "docs/scoring.md#contract-changes" in readme


def test_the_records_shown_in_the_docs_recompute_with_every_change_explained():
    from radmatch_audit.files.record_io import parse_record

    script = load_script()
    shown = 0
    for doc in sorted((REPO / "docs").glob("*.md")):
        for block in re.findall(r"```json\n(.*?)```", doc.read_text("utf-8"), re.DOTALL):
            if '"schema_version"' not in block:
                continue
            stored = parse_record(block)
            script.explain_record(stored, score_record(stored))  # raises on an unexplained change
            shown += 1
    assert shown >= 1
