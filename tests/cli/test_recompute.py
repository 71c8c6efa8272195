"""`radmatch-audit recompute` and `radmatch-audit summary` as a user runs them."""

import json
import subprocess
import sys

import pytest

from builders import adjudicated, f, fig3_record, matching, record, version3_line
from radmatch_audit.read.corpus import summarize, wilson_interval
from radmatch_audit.files.record_io import parse_record, read_records
from radmatch_audit.core.records import SCHEMA_VERSION
from radmatch_audit.core.vocabulary import STAGES


def run_cli(*args, check=False):
    proc = subprocess.run(
        [sys.executable, "-m", "radmatch_audit.cli", *args], capture_output=True, text=True, timeout=120
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def write_jsonl(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def unscored(rec):
    """A record as the judge stage left it: stages stored, scores stripped."""
    data = json.loads(rec.to_json())
    data["scores"] = None
    return json.dumps(data)


def test_worked_example_end_to_end_through_recompute(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(src, [unscored(fig3_record())])
    proc = run_cli("recompute", str(src), "-o", str(out), "--json", check=True)
    summary = json.loads(proc.stdout)
    assert summary["n_pairs"] == 1 and summary["mean_actionable_errors"] == 2
    assert summary["safety"]["triage"]["recall_num"] == 1
    assert summary["safety"]["triage"]["precision_den"] == 3
    (rec,) = read_records(out)
    assert rec.scores.actionable_errors == 2
    assert [u.outcome for u in rec.scores.units] == ["INC", "INC", "PAR", "PAR"]


def test_recompute_ignores_stored_scores_and_repairs(tmp_path):
    data = json.loads(fig3_record().to_json())
    data["repairs"] = ["stale"]
    data["scores"] = {"actionable_errors": 99}  # wrong and incomplete: recompute ignores it
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(src, [json.dumps(data)])
    run_cli("recompute", str(src), "-o", str(out), check=True)
    (again,) = read_records(out)
    assert again.repairs == [] and again.scores.actionable_errors == 2


def test_malformed_lines_are_reported_and_the_rest_processed(tmp_path):
    good = fig3_record("good").to_json()
    bad_status = json.loads(good)
    bad_status["pair_id"] = "bad"
    bad_status["stages"]["reference_findings"][0]["clinical_status"] = "weird"
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(src, [good, "{not json", json.dumps(bad_status), fig3_record("good2").to_json()])
    proc = run_cli("recompute", str(src), "-o", str(out), "--json")
    assert proc.returncode == 1
    assert f"{src}:2: invalid JSON" in proc.stderr
    assert f"{src}:3: field 'stages.reference_findings.0.clinical_status'" in proc.stderr
    assert json.loads(proc.stdout)["n_pairs"] == 2
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and lines[1] == "{not json"  # nothing is lost


def test_unknown_schema_version_gets_a_clear_error(tmp_path):
    data = json.loads(fig3_record().to_json())
    data["schema_version"] = SCHEMA_VERSION + 1
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [json.dumps(data)])
    proc = run_cli("summary", str(src))
    assert proc.returncode == 1
    assert f"schema_version {SCHEMA_VERSION + 1} is not supported" in proc.stderr


def test_failed_pairs_are_counted_apart_and_never_scored(tmp_path):
    ok = fig3_record("ok")
    failed = record("failed", [f("gt_1", sig="critical")], [], matching(), error="judge timed out")
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(src, [ok.to_json(), failed.to_json()])
    summary = json.loads(run_cli("recompute", str(src), "-o", str(out), "--json", check=True).stdout)
    assert (summary["n_pairs"], summary["n_scored"], summary["n_failed"]) == (2, 1, 1)
    assert summary["mean_actionable_errors"] == 2.0
    assert summary["failed_pairs"] == {"failed": "judge timed out"}
    recs = {r.pair_id: r for r in read_records(out)}
    assert recs["failed"].scores is None and recs["failed"].error == "judge timed out"


def test_summary_pools_counts_and_wilson_intervals(tmp_path):
    from radmatch_audit.read.recompute import score_record

    recs = [score_record(fig3_record(f"p{i}")) for i in range(3)]
    summary = summarize(recs).to_dict()
    triage = summary["safety"]["triage"]
    assert (triage["recall_num"], triage["recall_den"]) == (3, 6)
    assert triage["recall_ci"] == pytest.approx(wilson_interval(3, 6))
    lo, hi = wilson_interval(3, 6)
    assert lo == pytest.approx(0.1876, abs=1e-4) and hi == pytest.approx(0.8124, abs=1e-4)
    assert summary["outcomes"]["inc"] == 6 and summary["actionable_errors"] == 6
    assert summary["attributes"]["severity"]["major"] == 3


def test_duplicate_pair_ids_keep_the_last_record_with_a_warning():
    from radmatch_audit.read.recompute import score_record

    first = score_record(fig3_record("same"))
    last = score_record(record("same", [f("gt_1", sig="urgent")], [], matching([], [], ["gt_1"])))
    summary = summarize([first, last]).to_dict()
    assert summary["n_pairs"] == 1 and summary["actionable_errors"] == 1
    assert any("repeat an earlier pair_id" in w for w in summary["warnings"])


def test_a_repeated_pair_id_replaces_its_failure_or_its_scores():
    from radmatch_audit.read.recompute import score_record

    scored = score_record(fig3_record("same"))
    failed = fig3_record("same").model_copy(update={"error": "judge timed out"})
    retried = summarize([failed, scored]).to_dict()
    assert (retried["n_failed"], retried["n_scored"], retried["failed_pairs"]) == (0, 1, {})
    assert retried["actionable_errors"] == scored.scores.actionable_errors
    broke = summarize([scored, failed]).to_dict()
    assert (broke["n_failed"], broke["n_scored"], broke["actionable_errors"]) == (1, 0, 0)
    assert broke["failed_pairs"] == {"same": "judge timed out"}


def test_null_ratios_stay_null_in_the_corpus():
    from radmatch_audit.read.recompute import score_record

    rec = score_record(record("r", [f("gt_1")], [], matching([], [], ["gt_1"])))
    triage = summarize([rec]).to_dict()["safety"]["triage"]
    assert triage["recall"] is None and triage["recall_ci"] is None


def test_text_summary_is_readable(tmp_path):
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [fig3_record().to_json()])
    out = run_cli("summary", str(src), check=True).stdout
    assert "mean actionable errors per pair: 2.000" in out
    assert "triage" in out and "1/3" in out


def test_record_round_trip_keeps_the_contract_keys():
    data = json.loads(fig3_record().to_json())
    assert {"schema_version", "pair_id", "stages", "repairs", "judge", "error", "scores"} <= set(data)
    assert set(data["stages"]) >= {"reference_findings", "candidate_findings", "matching", "grading"}
    assert parse_record(json.dumps(data)).to_json() == fig3_record().to_json()


def test_old_schema_versions_go_through_the_migration_list(monkeypatch):
    import radmatch_audit.core.records as records

    def v3_to_v4(data):
        data = dict(data)
        data["flags"] = data.get("flags", []) + ["migrated from v3"]
        return data

    monkeypatch.setitem(records.MIGRATIONS, 3, v3_to_v4)
    data = json.loads(fig3_record().to_json())
    data["schema_version"] = 1
    data["judge"]["prompt_version"] = "v1-0123456789ab"  # version 1 documented one string
    rec = parse_record(json.dumps(data))
    assert rec.schema_version == 4 and rec.flags == ["migrated from v3"]
    # version 1 knew three stages; the adjudication came with version 4
    assert rec.judge.prompt_version == {stage: "v1-0123456789ab" for stage in ("extract", "match", "grade")}
    data["schema_version"] = 0
    with pytest.raises(records.UnknownSchemaVersion, match="reads versions 1 to 4"):
        parse_record(json.dumps(data))


@pytest.mark.parametrize("stored", [None, {"actionable_errors": 99}, [1, 2], "garbage", 7])
def test_recompute_reads_no_stored_scores_and_keeps_extra_keys(tmp_path, stored):
    """Stored scores of any shape are skipped unread; keys beyond the contract survive."""
    from radmatch_audit.read.recompute import score_record

    data = json.loads(fig3_record().to_json())
    data["scores"] = stored
    data["site"] = {"name": "north", "scores": [3]}  # an extra key, with a nested 'scores'
    parsed = parse_record(json.dumps(data), ignore_scores=True)
    assert parsed.scores is None and parsed.site == {"name": "north", "scores": [3]}
    assert type(parsed) is type(fig3_record())
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(src, [json.dumps(data)])
    run_cli("recompute", str(src), "-o", str(out), check=True)
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["site"] == {"name": "north", "scores": [3]}
    assert written["scores"] == json.loads(score_record(fig3_record()).to_json())["scores"]


def test_ignoring_scores_still_reports_errors_elsewhere_by_field():
    from pydantic import ValidationError

    from radmatch_audit.files.record_io import describe_error

    data = json.loads(fig3_record().to_json())
    data["stages"]["reference_findings"][0]["clinical_status"] = "maybe"
    with pytest.raises(ValidationError) as caught:
        parse_record(json.dumps(data), ignore_scores=True)
    assert "field 'stages.reference_findings.0.clinical_status'" in describe_error(caught.value)


def _with_errors(pair_id: str, study_id, errors: int):
    """A scored record with `errors` actionable errors (missed urgent findings)."""
    from radmatch_audit.read.recompute import score_record

    gt = [f(f"gt_{i}", sig="urgent") for i in range(1, errors + 1)] or [f("gt_1", sig="routine")]
    rec = record(pair_id, gt, [], matching([], [], [g.id for g in gt]))
    rec.study_id = study_id
    rec = score_record(rec)
    assert rec.scores.actionable_errors == errors
    return rec


def test_summary_mean_has_a_seeded_bootstrap_interval_over_studies(tmp_path):
    from radmatch_audit.read.resampling import mean_interval

    # two studies of two pairs each, and two pairs without a study id (their own studies)
    recs = [_with_errors("a1", "A", 0), _with_errors("a2", "A", 1), _with_errors("b1", "B", 3),
            _with_errors("b2", "B", 2), _with_errors("c", None, 1), _with_errors("d", None, 0)]
    summary = summarize(recs).to_dict()
    low, high = summary["mean_actionable_errors_ci"]
    assert low <= summary["mean_actionable_errors"] <= high and low < high
    assert summary["n_studies"] == 4
    studies = ["A", "A", "B", "B", ("pair", "c"), ("pair", "d")]
    assert [low, high] == pytest.approx(list(mean_interval([0, 1, 3, 2, 1, 0], studies)))
    assert summarize(recs).to_dict()["mean_actionable_errors_ci"] == [low, high]  # seeded
    # a failed pair is not in the interval
    failed = fig3_record("f").model_copy(update={"error": "judge timed out"})
    assert summarize([*recs, failed]).to_dict()["mean_actionable_errors_ci"] == [low, high]
    assert summarize([failed]).to_dict()["mean_actionable_errors_ci"] is None

    src = tmp_path / "in.jsonl"
    write_jsonl(src, [r.to_json() for r in recs])
    data = json.loads(run_cli("summary", str(src), "--json", check=True).stdout)
    assert data["mean_actionable_errors_ci"] == pytest.approx([low, high])
    text = run_cli("summary", str(src), check=True).stdout
    assert f"95% CI [{low:.3f}, {high:.3f}], bootstrap over 4 studies" in text


def test_summary_mean_significant_errors_counts_only_pairs_whose_adjudication_stands(tmp_path):
    from radmatch_audit.read.resampling import mean_interval

    # A: two adjudicated pairs; B: one adjudicated, one stale; c: failed adjudication;
    # d: an old (version 3) record, never adjudicated
    a1 = adjudicated(_with_errors("a1", "A", 2), errors=[0, 1], unlisted=("an invented line",))
    a2 = adjudicated(_with_errors("a2", "A", 1), errors=[0])
    b1 = adjudicated(_with_errors("b1", "B", 3), errors=[1, 1, 1])
    b2 = adjudicated(_with_errors("b2", "B", 2), state="stale")
    c = adjudicated(_with_errors("c", None, 1), state="failed")
    d = _with_errors("d", None, 1)
    summary = summarize([a1, a2, b1, b2, c, d]).to_dict()
    assert summary["n_adjudicated"] == 3 and summary["significant_errors"] == 2 + 0 + 3
    assert summary["mean_significant_errors"] == pytest.approx(5 / 3)
    assert summary["adjudication"] == {"current": 3, "stale": 1, "failed": 1, "invalid": 0, "off": 1}
    assert summary["mean_actionable_errors"] == pytest.approx(10 / 6)  # every scored pair
    low, high = summary["mean_significant_errors_ci"]
    assert summary["n_adjudicated_studies"] == 2 and low < high
    assert [low, high] == pytest.approx(list(mean_interval([2, 0, 3], ["A", "A", "B"])))

    src = tmp_path / "in.jsonl"
    write_jsonl(src, [r.to_json() for r in (a1, a2, b1, b2, c)] + [version3_line(d)])
    data = json.loads(run_cli("summary", str(src), "--json", check=True).stdout)
    assert data["mean_significant_errors"] == pytest.approx(5 / 3) and data["n_adjudicated"] == 3
    lines = run_cli("summary", str(src), check=True).stdout.splitlines()
    assert lines[1].startswith("mean significant errors per pair: 1.667   95% CI")  # the headline
    assert lines[1].endswith("n 3 adjudicated (not counted: 1 stale, 1 failed, 1 off)")
    assert lines[2].startswith("mean actionable errors per pair: 1.667")
    assert lines[2].endswith("(the paper's RadMatch count)")


def test_summary_of_records_without_adjudication_says_significant_is_not_available(tmp_path):
    src = tmp_path / "old.jsonl"
    write_jsonl(src, [version3_line(_with_errors("a", "A", 2)), version3_line(_with_errors("b", "B", 1))])
    data = json.loads(run_cli("summary", str(src), "--json", check=True).stdout)
    assert data["mean_significant_errors"] is None and data["mean_significant_errors_ci"] is None
    assert data["n_adjudicated"] == 0 and data["adjudication"]["off"] == 2
    lines = run_cli("summary", str(src), check=True).stdout.splitlines()
    assert lines[1].startswith("mean actionable errors per pair: 1.500")
    assert lines[2] == "mean significant errors per pair: n/a (no adjudication stands: 2 off)"
