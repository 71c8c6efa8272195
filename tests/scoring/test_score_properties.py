"""Property tests of the scoring core over random findings and judge answers."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import record
from legacy_measurements import scored_by_legacy, without_quantities
from radmatch_audit.read.recompute import score_record
from radmatch_audit.files.record_io import parse_record
from radmatch_audit.core.schemas import Finding, GradingStage, MatchingAnswer, MatchRow, Measurement
from radmatch_audit.core.thresholds import QUANTITIES

STATUS = st.sampled_from(["normal", "abnormal"])
TIER = st.sampled_from(["critical", "urgent", "notable", "routine"])
COMPARISON = st.sampled_from([None, "stable", "improving", "worsening", "new", "resolved"])
# values on both sides of the clinical thresholds (docs/scoring.md 4.6) among them
# (and exactly at them: 0.5, 3 cm, 6, 8, 10, 29, 40, 55, 80)
VALUES = [0, 0.49, 0.5, 0.52, 2, 2.4, 3, 4.4, 5.5, 6, 6.5, 8, 10, 12, 15, 26, 29, 31, 40, 50,
          54, 55, 56, 80, 81]
QUANTITY = st.sampled_from([None, None, *QUANTITIES])
MEASUREMENT = st.builds(
    Measurement,
    value=st.sampled_from(VALUES),
    unit=st.sampled_from([None, "mm", "cm", "hu", "pct", "%", "SUV", "in"]),
    category=st.sampled_from(["size", "count", "attenuation", "ratio", "position", "other"]),
    prior=st.booleans(),
    quantity=QUANTITY,
)


def findings(prefix, n):
    return st.tuples(
        *[
            st.builds(
                Finding,
                id=st.just(f"{prefix}_{i}"),
                text=st.just(f"finding {i}."),
                clinical_status=STATUS,
                clinical_significance=TIER,
                comparison=COMPARISON,
                measurements=st.lists(MEASUREMENT, max_size=3),
                evidence=st.lists(st.sampled_from(["finding", "absent quote", ""]), max_size=2),
            )
            for i in range(1, n + 1)
        ]
    ).map(list)


@st.composite
def pairs(draw):
    n_gt = draw(st.integers(0, 6))
    n_pred = draw(st.integers(0, 6))
    gt = draw(findings("gt", n_gt))
    pred = draw(findings("p", n_pred))
    # ids occasionally out of range, to exercise the repairs
    pred_ids = [f"p_{i}" for i in range(1, n_pred + 2)]
    gt_ids = [f"gt_{i}" for i in range(1, n_gt + 2)]
    rows = draw(
        st.lists(
            st.builds(
                MatchRow,
                pred_id=st.sampled_from(pred_ids),
                gt_id=st.sampled_from(gt_ids),
                reasoning=st.just("r"),
                match_scope=st.sampled_from(["direct", "aggregate", "generic"]),
            ),
            max_size=8,
        )
    )
    match = MatchingAnswer(
        matches=rows,
        unmatched_pred=draw(st.lists(st.sampled_from(pred_ids), max_size=3)),
        unmatched_gt=draw(st.lists(st.sampled_from(gt_ids), max_size=3)),
    )
    graded = [(r.pred_id, r.gt_id) for r in rows]  # duplicates included
    errors = [
        draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "dimension": st.sampled_from(["location", "severity", "certainty", "bogus"]),
                        "severity": st.sampled_from(["major", "minor"]),
                        "reasoning": st.just("r"),
                    }
                ),
                max_size=2,
            )
        )
        for _ in graded
    ]
    grade = GradingStage(pairs=graded, grades=[
        {"pred_id": p, "gt_id": g, "errors": e} for (p, g), e in zip(graded, errors)
    ])
    return record("prop", gt, pred, match, grade, "finding 1. finding 2.", "finding 1.")


COMMON = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@COMMON
@given(pairs())
def test_recompute_is_idempotent(rec):
    once = score_record(rec)
    twice = score_record(parse_record(once.to_json()))
    assert twice.to_json() == once.to_json()


@COMMON
@given(pairs())
def test_every_finding_lands_in_exactly_one_unit(rec):
    scores = score_record(rec).scores
    seen = [i for u in scores.units for i in u.gt_ids + u.pred_ids]
    all_ids = [f.id for f in rec.stages.reference_findings + rec.stages.candidate_findings]
    assert sorted(seen) == sorted(all_ids)
    generic = [u for u in scores.units if u.kind == "generic"]
    assert all(len(u.gt_ids) + len(u.pred_ids) == 1 and u.outcome is None for u in generic)


@COMMON
@given(pairs())
def test_matched_outcomes_count_the_matched_units(rec):
    scores = score_record(rec).scores
    matched = sum(u.kind == "matched" for u in scores.units)
    o = scores.outcomes
    assert o["cor"] + o["par"] + o["inc"] == matched
    assert o["mis"] + o["spu"] + o["generic"] == len(scores.units) - matched
    pred = {f.id: f for f in rec.stages.candidate_findings}

    def unaddressed_negative(unit):  # section 5 (2026-12-02): an SPU of normal findings
        return unit.outcome == "SPU" and all(
            pred[i].clinical_status == "normal" for i in unit.pred_ids
        )

    counted = [
        u.outcome in ("INC", "MIS", "SPU") and u.tier != "routine" and not unaddressed_negative(u)
        for u in scores.units
    ]
    assert [u.actionable for u in scores.units] == counted

    def weight(unit):  # section 5 (2026-12-05): one per distinct status-inverted finding
        inverted = [e for e in unit.errors if e.dimension == "status"]
        return max(len({e.pred_id for e in inverted}), len({e.gt_id for e in inverted}), 1)

    assert [u.actionable_errors for u in scores.units] == [
        weight(u) if c else 0 for u, c in zip(scores.units, counted)]
    assert scores.actionable_errors == sum(u.actionable_errors for u in scores.units)
    assert sum(s["actionable_errors"] for name, s in scores.subsets.items()
               if name in ("normal", "abnormal")) == scores.actionable_errors


@COMMON
@given(pairs(), st.randoms(use_true_random=False))
def test_order_of_findings_and_rows_changes_no_score(rec, rnd: random.Random):
    base = score_record(rec)
    shuffled = rec.model_copy(deep=True)
    st_ = shuffled.stages
    rnd.shuffle(st_.reference_findings)
    rnd.shuffle(st_.candidate_findings)
    rnd.shuffle(st_.matching.matches)
    rnd.shuffle(st_.matching.unmatched_pred)
    rnd.shuffle(st_.matching.unmatched_gt)
    for finding in st_.reference_findings + st_.candidate_findings:
        rnd.shuffle(finding.measurements)
    order = list(range(len(st_.grading.pairs)))
    rnd.shuffle(order)
    st_.grading = GradingStage(
        pairs=[st_.grading.pairs[i] for i in order],
        grades=[st_.grading.grades[i] for i in order],
    )
    again = score_record(shuffled)
    assert again.scores == base.scores
    assert sorted(again.repairs) == sorted(base.repairs)


# --------------------------------------------------------------------------- clinical thresholds

SEVERITY_RANK = {"COR": 0, "PAR": 1, "INC": 2}


@COMMON
@given(pairs())
def test_removing_every_quantity_gives_the_scores_of_the_rule_without_thresholds(rec):
    # the reference: the comparator as it was before thresholds, frozen in legacy_measurements
    old = scored_by_legacy(rec)
    stripped = score_record(without_quantities(rec))
    assert stripped.scores == old.scores
    assert stripped.repairs == old.repairs


def split_errors(unit):
    """(the unit's pooled measurement errors, all its other errors)."""
    pooled = [e.source == "deterministic" and e.dimension == "measurement" for e in unit.errors]
    return (
        [e for e, p in zip(unit.errors, pooled) if p],
        [e for e, p in zip(unit.errors, pooled) if not p],
    )


def majors(errors):
    return sum(e.severity == "major" for e in errors)


def is_quantity_rule(error):
    """A measurement error only a quantity makes: a crossed threshold, or an omitted value
    that carries a quantity (rule 5, 2026-12-02: 'size 56 mm omitted: <quantity>')."""
    return " crosses " in error.reasoning or (
        " omitted: " in error.reasoning and error.severity == "major"
    )


@COMMON
@given(pairs())
def test_thresholds_only_turn_minor_into_major(rec):
    # (and so do omitted values that carry a quantity: quantities only ever add majors)
    with_thresholds = score_record(rec).scores
    without = score_record(without_quantities(rec)).scores
    assert with_thresholds.actionable_errors >= without.actionable_errors
    assert len(with_thresholds.units) == len(without.units)
    for new, old in zip(with_thresholds.units, without.units):
        assert (new.kind, new.gt_ids, new.pred_ids) == (old.kind, old.gt_ids, old.pred_ids)
        if new.kind != "matched":
            assert new.outcome == old.outcome
            continue
        assert SEVERITY_RANK[new.outcome] >= SEVERITY_RANK[old.outcome]
        (new_pooled, new_other), (old_pooled, old_other) = split_errors(new), split_errors(old)
        assert new_other == old_other
        assert len(new_pooled) == len(old_pooled) and majors(new_pooled) >= majors(old_pooled)
        if not any(is_quantity_rule(e) for e in new_pooled):  # no quantity rule, no change
            assert new.outcome == old.outcome


@COMMON
@given(pairs())
def test_a_position_difference_never_makes_a_unit_incorrect(rec):
    scored = score_record(rec).scores
    no_positions = rec.model_copy(deep=True)
    for finding in no_positions.stages.reference_findings + no_positions.stages.candidate_findings:
        finding.measurements = [m for m in finding.measurements if m.category != "position"]
    without = score_record(no_positions).scores
    for unit, other in zip(scored.units, without.units):
        position = [e for e in unit.errors if e.reasoning.startswith("position ")]
        assert all(e.severity == "minor" for e in position)
        if unit.outcome == "INC":  # it was INC without its position values too
            assert other.outcome == "INC"
        assert unit.actionable == other.actionable


SIZE_QUANTITIES = [q for q in QUANTITIES if q != "cardiothoracic_ratio"]


def without_quantities_of(measurements):
    return [m.model_copy(update={"quantity": None}) for m in measurements]


@COMMON
@given(
    st.sampled_from(VALUES),
    st.sampled_from(VALUES),
    st.sampled_from(["mm", "cm"]),
    st.sampled_from(SIZE_QUANTITIES),
)
def test_a_threshold_decides_a_pair_only_by_crossing(a, b, unit, quantity):
    from radmatch_audit.scoring.comparators import measurement_errors
    from radmatch_audit.core.thresholds import CLINICAL_THRESHOLDS

    ref = [Measurement(value=a, unit=unit, category="size", quantity=quantity)]
    cand = [Measurement(value=b, unit=unit, category="size", quantity=quantity)]
    plain = measurement_errors(*(without_quantities_of(ms) for ms in (ref, cand)))
    judged = measurement_errors(ref, cand)
    scale = 10 if unit == "cm" else 1
    spec = CLINICAL_THRESHOLDS[quantity]

    def above(value, t, side):  # the side of the table: where a value equal to t lies
        return value >= t if side == ">=" else value > t

    crosses = any(
        above(round(a * scale, 6), t, side) != above(round(b * scale, 6), t, side)
        for t, side in zip(spec.thresholds, spec.sides)
    )
    if not plain:
        assert judged == []
        return
    ((new,), (old,)) = judged, plain
    assert new.severity == ("major" if crosses else old.severity)
    assert (" crosses " in new.reasoning) is crosses
    assert new.reasoning.startswith(old.reasoning)


@COMMON
@given(pairs())
def test_corpus_tally_puts_each_count_in_the_slot_its_field_names(rec):
    from radmatch_audit.read.corpus import FIELDS, tally
    from radmatch_audit.scoring.results import as_dict

    scored = score_record(rec)
    data = {"scored": 1, "failed": 0, **as_dict(scored.scores)}

    def walk(path):
        value = data
        for key in path:
            value = value[key]
        return value

    assert tally(scored) == tuple(walk(path) for path in FIELDS)


# --------------------------------------------------------------------------- fast paths
# Each shortcut of the scoring core must give what the general rule gives.


POOLED_VALUES = st.lists(
    st.tuples(
        st.sampled_from([0, 0.5, 2, 2.4, 4.4, 5, 5.5, 6.5, 10, 12, 20, 26, -15, 54, 56]),
        st.sampled_from(["ascending_aorta_diameter", "solid_nodule_diameter", None]),
    ),
    min_size=1,
    max_size=3,
)


@COMMON
@given(
    POOLED_VALUES,
    POOLED_VALUES,
    st.sampled_from([("size", "mm"), ("ratio", None), ("count", None), ("attenuation", "hu")]),
)
def test_fast_pairings_are_the_general_solvers(ref, cand, family):
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    from radmatch_audit.scoring.comparators import _assign, _pair_cost, _value_key

    category, unit = family
    # pooled as the comparator pools them, sorted as it sorts them
    ref, cand = ([(v, unit, q) for v, q in side] for side in (ref, cand))
    ref.sort(key=_value_key)
    cand.sort(key=_value_key)
    cost = np.array([[_pair_cost(a, b, family) for b in cand] for a in ref])
    rows, cols = linear_sum_assignment(cost)
    chosen = _assign(ref, cand, family)
    if len(ref) == 1 or len(cand) == 1:  # one row or column: a cheapest cell
        assert [cost[i, j] for i, j in chosen] == [cost.min()]
    else:
        assert chosen == list(zip(rows.tolist(), cols.tolist()))


@COMMON
@given(st.lists(MEASUREMENT, max_size=5), st.randoms(use_true_random=False))
def test_the_same_values_in_any_order_are_no_measurement_error(values, rnd: random.Random):
    from radmatch_audit.scoring.comparators import measurement_errors

    shuffled = list(values)
    rnd.shuffle(shuffled)  # a different order takes the general path, the same one a shortcut
    assert measurement_errors(values, shuffled) == []
    assert measurement_errors(values, values) == []


TEXT = st.text(alphabet=list("abAB .,\t\n\u00a0\u00e9e\u0301\u1e9e\u00df"), max_size=14)


@settings(max_examples=400, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=4), st.lists(TEXT, max_size=3))
def test_evidence_search_follows_the_normalised_rule(pieces, evidence):
    from radmatch_audit.scoring.score import QuoteFinder, normalise_text

    report = "".join(pieces)
    evidence = evidence + pieces[:1]  # a quote cut from the report, verbatim
    haystack = normalise_text(report)
    quotes = [normalise_text(q) for q in evidence if normalise_text(q)]
    expected = bool(quotes) and all(q in haystack for q in quotes)  # docs/scoring.md 5, literally
    assert QuoteFinder(report).attributes(evidence) is expected


@settings(max_examples=400, deadline=None)
@given(st.lists(TEXT, max_size=4))
def test_positions_map_the_normalised_text_back_to_the_report(pieces):
    import unicodedata

    from radmatch_audit.scoring.score import normalise_text, normalise_with_positions

    report = "".join(pieces)
    norm, index = normalise_with_positions(report)
    assert norm.strip(" ") == normalise_text(report)  # one rule, ends of whitespace aside
    source = unicodedata.normalize("NFC", report)
    assert len(index) == len(norm) and list(index) == sorted(index)
    for char, i in zip(norm, index):
        assert source[i].isspace() if char == " " else char in source[i].casefold()
