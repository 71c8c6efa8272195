"""The dashboard's view model alone: records -> the page's data, with no page rendered."""

from __future__ import annotations

import json

from dashboard_fixtures import failed, fig3b, write_records

from radmatch_audit.dashboard.view import BIDI_FLAG, page_data, pair_view, unquoted_sentences


def test_a_scored_pair_becomes_its_counts_spans_and_units_in_reading_order():
    record = fig3b()
    view = pair_view(record)
    assert view["id"] == record.pair_id and view["scored"] is True
    assert view["ae"] == record.scores.actionable_errors == 2  # docs/scoring.md section 5
    detail = view["detail"]
    for start, end, finding_id in detail["spans"]["reference"]:
        quotes = next(f["evidence"] for f in detail["findings"] if f["id"] == finding_id)
        assert detail["reference"][start:end].lower() in [q.lower() for q in quotes]
    assert [u["index"] for u in detail["units"]] == list(range(1, len(detail["units"]) + 1))
    assert len(view["sig"]) == len(detail["units"])
    json.dumps(view, allow_nan=False)  # plain JSON values only: the page embeds them as they are


def test_a_failed_pair_has_no_scores_and_says_why():
    view = pair_view(failed())
    assert (view["scored"], view["ae"], view["sig"]) == (False, None, [])
    assert view["error"] == "judge timed out after 3 retries"
    assert view["detail"]["unquoted"] == {"reference": [], "candidate": []}  # nothing extracted


def test_bidirectional_controls_flag_the_pair():
    record = fig3b().model_copy(update={"candidate": "Effusion on the \u202etfel\u202c side."})
    assert BIDI_FLAG in pair_view(record)["detail"]["flags"]
    assert BIDI_FLAG not in pair_view(fig3b())["detail"]["flags"]


def test_sentences_no_quote_covers_are_found_and_headers_skipped():
    text = "FINDINGS:\nHeart normal. Small effusion 4.5 cm wide.\nNo pneumothorax."
    covered = [[text.index("Heart"), text.index("Heart") + 13]]
    found = [text[s:e] for s, e in unquoted_sentences(text, covered)]
    assert found == ["Small effusion 4.5 cm wide.", "No pneumothorax."]


def test_page_data_lists_unreadable_lines_and_compares_two_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    main = write_records(tmp_path / "a" / "records.jsonl", [fig3b(), failed()])
    with main.open("a") as handle:
        handle.write("{not json\n")
    other = write_records(tmp_path / "b" / "records.jsonl", [fig3b()])
    data = page_data(main, other)
    assert [p["id"] for p in data["pairs"]] == [fig3b().pair_id, failed().pair_id]
    assert data["bad_lines"] and data["bad_lines"][0].startswith("line 3 skipped: ")
    compare = data["compare"]
    assert (compare["label_a"], compare["label_b"]) == ("a/records.jsonl", "b/records.jsonl")
    assert (compare["n_common"], compare["n_only_a"], compare["n_compared"], compare["same"]) == (1, 1, 1, 1)
    assert data["pairs"][0]["delta"] == 0 and data["pairs"][1]["in_b"] is False
    assert page_data(main)["compare"] is None
