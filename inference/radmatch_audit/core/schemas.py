"""The stage answers, defined once with their caps as parameters, and the stored stages.

**Answers** (`answer_models(limits)`): strict pydantic models (`extra="forbid"`,
enums, bounded lists and strings) built from one definition. The same definition
gives both the JSON schema a judge is constrained to (its grammar caps) and the
model an answer is validated by, once, when it arrives (`validation_models`: the
tighter of the grammar caps and the canonical caps of `CANONICAL_LIMITS`).

Why caps differ by judge (docs/judge.md rule 8): a grammar backend that
compiles a schema to an automaton (Outlines, in process and in vLLM) pays for every
bounded repetition; on 2 cores the extraction schema with 60 findings and bounded
strings took 103 s to compile, with only inner lists bounded 3.6 s, and vLLM gives up
after 5 s. So a served judge gets `SERVER_LIMITS` (inner lists and strings bounded,
outer lists free; its server compiles with xgrammar) and the canonical caps are checked
on arrival; the embedded small judge gets `SMALL_MODEL_LIMITS` (everything bounded, so
that a model that never closes a list still yields valid JSON within its token budget).

Grading answers are keyed (docs/judge.md rule 18): `{"grades": [{"pred_id", "gt_id",
"errors": [{"reasoning", "dimension", "severity"}]}]}`, one entry per row sent, the
reasoning before the verdict. The small judge's grammar fixes each entry's ids to the
rows sent; a served grammar leaves them patterns, and validation on arrival checks them.

**Stored stages** (`Finding`, `MatchingAnswer`, `GradingStage`): what a record keeps.
Findings carry the pipeline's ids; stored grading accepts any string as dimension or
severity, so an old or hand-made record still scores.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, model_validator

from radmatch_audit.core.vocabulary import (
    ClinicalStatus,
    Comparison,
    MAX_UNIT_ERRORS,
    ErrorSeverity,
    GradedDimension,
    MatchScope,
    MeasurementCategory,
    Quantity,
    Significance,
)

# NaN and infinity are refused (1e999 parses as infinity): JSON cannot carry them back
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
_LENIENT = ConfigDict(extra="ignore", allow_inf_nan=False)
PRED_ID = r"^p_[0-9]{1,2}$"
# an adjudication entry's count: an enum, so that every grammar backend bounds it
UnitErrorCount = Literal[tuple(range(MAX_UNIT_ERRORS + 1))]  # type: ignore[valid-type]
GT_ID = r"^gt_[0-9]{1,2}$"


# --------------------------------------------------------------------------- caps


@dataclass(frozen=True)
class Limits:
    """Caps of the answer models; None leaves a list or string unbounded."""

    findings: Optional[int]
    text: Optional[int]
    evidence: Optional[int]
    quote: Optional[int]
    measurements: Optional[int]
    unit: Optional[int]
    rows: Optional[int]
    reasoning: Optional[int]
    errors_per_match: Optional[int]
    indication: Optional[int]
    exact_grade_length: bool  # the grammar admits exactly one grading (adjudication) entry per row (unit) sent
    unlisted: Optional[int] = None  # adjudication: significant errors that no unit holds
    description: Optional[int] = None  # adjudication: the length of each of those

    def tightest(self, other: "Limits") -> "Limits":
        """Each cap the smaller of the two (None is no cap)."""
        tighter = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, bool):
                tighter[f.name] = mine or theirs
            else:
                tighter[f.name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return replace(self, **tighter)


# What any answer must fit, whatever the judge.
CANONICAL_LIMITS = Limits(
    findings=60, text=400, evidence=4, quote=400, measurements=12, unit=24, rows=200,
    reasoning=300, errors_per_match=5, indication=2000, exact_grade_length=True,
    unlisted=10, description=300,
)
# Strings at their canonical caps, so that a repetition loop inside one ends there, not
# at the token budget: xgrammar (serve/start_vllm.sh's backend) compiles these schemas
# once per server, 14-18 s each on 2 idle cores for Gemma's 262k vocabulary (up to 200 s
# on busy ones) against under a second unbounded; outlines took 7.6 minutes for the
# extraction schema (BENCHMARKS.md, "Grammar compile times"). Outer lists stay free.
SERVER_LIMITS = Limits(
    findings=None, text=400, evidence=4, quote=400, measurements=8, unit=24, rows=None,
    reasoning=300, errors_per_match=5, indication=2000, exact_grade_length=False,
    unlisted=10, description=300,
)
# Sized so that the longest JSON these caps allow fits SMALL_MODEL_MAX_TOKENS (below):
# with SmolLM2's tokenizer a full extraction answer is about 1,100 tokens of 1,700. The
# caps admit everything the exemplars teach (tests/stages/test_exemplars.py checks it): two quotes
# for a finding merged from FINDINGS and IMPRESSION (rule 4), two measurements (a value
# and its prior). Six findings rather than eight pay for the second quote: on a busy
# 2-core machine the extraction grammar then compiles faster than with 8 findings and
# one quote (195 s against 237 s), while four measurements would take about 330 s.
SMALL_MODEL_LIMITS = Limits(
    findings=6, text=120, evidence=2, quote=100, measurements=2, unit=16, rows=16,
    reasoning=100, errors_per_match=2, indication=300, exact_grade_length=True,
    unlisted=2, description=80,
)
# Answer tokens per stage, beside the caps they go with: for a capable served judge, and
# for a small model. Each stage object holds its own (radmatch_audit.stages.pair_stages);
# JudgeConfig.max_tokens overrides them per stage.
SERVER_MAX_TOKENS = {"extract": 8192, "match": 6144, "grade": 6144, "adjudicate": 4096}
# adjudicate: 16 units of about 40 tokens (a 100-character reasoning) and two short
# unlisted errors fit in 900
SMALL_MODEL_MAX_TOKENS = {"extract": 1700, "match": 1400, "grade": 2048, "adjudicate": 900}


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class AnswerModels:
    """One model per stage, all built from the same caps."""

    extract: type[BaseModel]
    match: type[BaseModel]
    grade: type[BaseModel]
    adjudicate: type[BaseModel]
    exact_grade_length: bool
    checks_grade_rows: bool = False  # validators: every row sent graded exactly once, by id

    def for_stage(
        self, stage: str, rows: Union[None, int, Sequence[tuple[str, str]]] = None
    ) -> type[BaseModel]:
        """The stage's model. For grading with the rows sent: under an exact grammar one
        whose i-th entry carries the i-th row's ids (given only their number, one fixing
        the number of entries); a validator checks that the entries grade each row sent
        once, by id, in any order. For the adjudication, `rows` is the number of units
        shown: an exact grammar numbers the entries 1..n in order; a validator checks
        that every unit is answered once, in any order."""
        if stage == "adjudicate" and isinstance(rows, int):
            if self.checks_grade_rows:
                return UnitsChecked(_adjudication_units_checked(self.adjudicate), rows)
            return _adjudicate_fixed(self.adjudicate, rows) if self.exact_grade_length else self.adjudicate
        if stage != "grade" or rows is None:
            return getattr(self, stage)
        if isinstance(rows, int):
            if self.checks_grade_rows:
                raise TypeError("a grading validator needs the rows sent, not their number")
            return _grade_exactly(self.grade, rows) if self.exact_grade_length else self.grade
        rows = tuple((str(p), str(g)) for p, g in rows)
        if self.checks_grade_rows:
            return RowsChecked(_grade_rows_checked(self.grade), rows)
        if self.exact_grade_length:
            return _grade_fixed(self.grade, rows)
        return self.grade


def _grade_entry(grade: type[BaseModel]) -> type[BaseModel]:
    return get_args(grade.model_fields["grades"].annotation)[0]


@lru_cache(maxsize=256)
def _grade_exactly(grade: type[BaseModel], count: int) -> type[BaseModel]:
    return create_model(
        "GradingAnswer",
        __config__=_STRICT,
        grades=(list[_grade_entry(grade)], Field(min_length=count, max_length=count)),
    )


@lru_cache(maxsize=256)
def _grade_fixed(grade: type[BaseModel], rows: tuple[tuple[str, str], ...]) -> type[BaseModel]:
    """Exactly the rows sent, in order, each entry's ids fixed (JSON schema prefixItems with a
    const per id; Outlines compiles it). The small judge needs it: with id patterns SmolLM2
    numbers its entries p_1-gt_1, p_2-gt_2, ... whatever the rows. A schema per distinct set
    of rows costs the in-process judge nothing to speak of: its grammar backend (llguidance)
    compiles none ahead (outlines-core's index took 5 s for 3 rows, 50 s for 8, busy)."""
    errors = _grade_entry(grade).model_fields["errors"]
    entries = tuple(
        create_model(
            f"GradeEntry{i}",
            __config__=_STRICT,
            pred_id=(Literal[pred_id], ...),
            gt_id=(Literal[gt_id], ...),
            errors=(errors.annotation, errors),
        )
        for i, (pred_id, gt_id) in enumerate(rows, 1)
    )
    return create_model("GradingAnswer", __config__=_STRICT, grades=(tuple[entries], ...))


def grading_rows_problem(given: Sequence[tuple[str, str]], sent: Sequence[tuple[str, str]]) -> Optional[str]:
    """Why a keyed grading answer does not grade every row sent exactly once, or None."""
    expected, seen = set(sent), set()
    for pred_id, gt_id in given:
        if (pred_id, gt_id) not in expected:
            return f"the grade answer has an entry for {pred_id}-{gt_id}, a row that was not sent"
        if (pred_id, gt_id) in seen:
            return f"the grade answer grades {pred_id}-{gt_id} more than once"
        seen.add((pred_id, gt_id))
    missing = [f"{p}-{g}" for p, g in sent if (p, g) not in seen]
    if missing:
        return f"the grade answer has no entry for row(s) {', '.join(missing)}"
    return None


def _checked(model: type[BaseModel], context_key: str, keys: Any, problem: Any) -> type[BaseModel]:
    """`model`, checking that an answer's entries, `keys(answer)`, answer what was sent
    (given as validation context under `context_key`) exactly once: `problem` says why not."""

    def every_entry_once(answer: BaseModel, info: ValidationInfo) -> BaseModel:
        sent = (info.context or {}).get(context_key)
        found = sent is not None and problem(keys(answer), sent)
        if found:
            raise ValueError(found)
        return answer

    return create_model(
        model.__name__,
        __base__=model,
        __validators__={"every_entry_once": model_validator(mode="after")(every_entry_once)},
    )


@lru_cache(maxsize=8)
def _grade_rows_checked(grade: type[BaseModel]) -> type[BaseModel]:
    """`grade`, checking that its entries grade the rows sent."""
    return _checked(grade, "rows", lambda a: [(e.pred_id, e.gt_id) for e in a.grades], grading_rows_problem)


class RowsChecked:
    """The grading validator for one set of rows sent: one model for all, the rows passed
    as validation context. A model per set of rows (kept in a cache of 1,024) made a long
    run's memory grow by some 40 kB a new set, mostly pydantic-core's compiled validator:
    166 MB at 500 pairs, 211 MB at 5,000 against the fake server."""

    __slots__ = ("model", "rows")

    def __init__(self, model: type[BaseModel], rows: tuple[tuple[str, str], ...]) -> None:
        self.model = model
        self.rows = rows

    @property
    def __name__(self) -> str:
        return self.model.__name__

    def model_validate(self, obj: Any) -> BaseModel:
        return self.model.model_validate(obj, context={"rows": self.rows})

    def model_validate_json(self, text: Union[str, bytes]) -> BaseModel:
        return self.model.model_validate_json(text, context={"rows": self.rows})


def _adjudication_entry(adjudicate: type[BaseModel]) -> type[BaseModel]:
    return get_args(adjudicate.model_fields["units"].annotation)[0]


@lru_cache(maxsize=64)
def _adjudicate_fixed(adjudicate: type[BaseModel], units: int) -> type[BaseModel]:
    """Exactly `units` entries numbered 1..units in order (prefixItems, a const per number),
    as `_grade_fixed` fixes the grading rows for a small judge."""
    entry = _adjudication_entry(adjudicate)
    entries = tuple(
        create_model(
            f"AdjudicatedUnit{i}",
            __config__=_STRICT,
            unit=(Literal[i], ...),
            reasoning=(entry.model_fields["reasoning"].annotation, entry.model_fields["reasoning"]),
            errors=(entry.model_fields["errors"].annotation, ...),
        )
        for i in range(1, units + 1)
    )
    unlisted = adjudicate.model_fields["unlisted"]
    return create_model(
        "AdjudicationAnswer", __config__=_STRICT,
        units=(tuple[entries], ...),
        unlisted=(unlisted.annotation, unlisted),
    )


def adjudication_units_problem(given: Sequence[int], shown: int) -> Optional[str]:
    """Why an adjudication answer does not answer units 1..shown exactly once, or None."""
    seen: set[int] = set()
    for number in given:
        if not 1 <= number <= shown:
            return f"the adjudicate answer has an entry for unit {number}, which was not shown"
        if number in seen:
            return f"the adjudicate answer answers unit {number} more than once"
        seen.add(number)
    missing = [str(n) for n in range(1, shown + 1) if n not in seen]
    if missing:
        return f"the adjudicate answer has no entry for unit(s) {', '.join(missing)}"
    return None


@lru_cache(maxsize=8)
def _adjudication_units_checked(adjudicate: type[BaseModel]) -> type[BaseModel]:
    """`adjudicate`, checking that it answers every unit shown."""
    return _checked(adjudicate, "units", lambda a: [e.unit for e in a.units], adjudication_units_problem)


class UnitsChecked(RowsChecked):
    """The adjudication validator for a number of units shown (as `RowsChecked` for rows)."""

    __slots__ = ()

    def model_validate(self, obj: Any) -> BaseModel:
        return self.model.model_validate(obj, context={"units": self.rows})

    def model_validate_json(self, text: Union[str, bytes]) -> BaseModel:
        return self.model.model_validate_json(text, context={"units": self.rows})


class _QuotesItsText(BaseModel):
    """An extracted finding whose answer leaves `evidence` out quotes its own text.

    The quote is the text without its final period (a clause quoted from inside a
    sentence has none). Most findings are written as the report words them; the judge
    then writes the words once, not twice (BENCHMARKS.md, "Decode tokens per pair").
    An explicit `[]` stays empty.
    """

    model_config = _STRICT

    @model_validator(mode="after")
    def _evidence_defaults_to_text(self) -> "_QuotesItsText":
        if "evidence" not in self.model_fields_set:
            self.evidence = [own_quote(self.text)]
        return self


def own_quote(text: str) -> str:
    """The quote an answer without `evidence` gives: its text less one final period."""
    return text[:-1] if text.endswith(".") and len(text) > 1 else text


@lru_cache(maxsize=8)
def answer_models(limits: Limits) -> AnswerModels:
    """The strict answer model of every stage under `limits` (the one definition)."""
    quote = Annotated[str, Field(min_length=1, max_length=limits.quote)]
    pred_id = Annotated[str, Field(pattern=PRED_ID)]
    gt_id = Annotated[str, Field(pattern=GT_ID)]
    measurement = create_model(
        "Measurement",
        __config__=_STRICT,
        value=(float, ...),
        unit=(Optional[str], Field(default=None, max_length=limits.unit)),
        category=(MeasurementCategory, ...),
        prior=(bool, False),
        quantity=(Optional[Quantity], None),
    )
    finding = create_model(
        "Finding",
        __base__=_QuotesItsText,
        text=(str, Field(min_length=1, max_length=limits.text)),
        clinical_status=(ClinicalStatus, ...),
        clinical_significance=(Significance, ...),
        comparison=(Optional[Comparison], None),
        measurements=(list[measurement], Field(default_factory=list, max_length=limits.measurements)),
        evidence=(list[quote], Field(default_factory=list, max_length=limits.evidence)),
    )
    row = create_model(
        "MatchRow",  # field order is generation order: reasoning before scope
        __config__=_STRICT,
        pred_id=(pred_id, ...),
        gt_id=(gt_id, ...),
        reasoning=(str, Field(max_length=limits.reasoning)),
        match_scope=(MatchScope, ...),
    )
    error = create_model(
        "GradingError",  # reasoning before the verdict, as in match rows
        __config__=_STRICT,
        reasoning=(str, Field(min_length=1, max_length=limits.reasoning)),
        dimension=(GradedDimension, ...),
        severity=(ErrorSeverity, ...),
    )
    grade_entry = create_model(
        "GradeEntry",  # one matched row, named by its ids (docs/judge.md rule 18)
        __config__=_STRICT,
        pred_id=(pred_id, ...),
        gt_id=(gt_id, ...),
        errors=(list[error], Field(default_factory=list, max_length=limits.errors_per_match)),
    )
    adjudicated_unit = create_model(
        "AdjudicatedUnit",  # reasoning before the verdict
        __config__=_STRICT,
        unit=(int, Field(ge=1)),
        reasoning=(str, Field(min_length=1, max_length=limits.reasoning)),
        errors=(UnitErrorCount, ...),
    )
    unlisted_error = create_model(
        "UnlistedError",
        __config__=_STRICT,
        description=(str, Field(min_length=1, max_length=limits.description)),
    )
    return AnswerModels(
        adjudicate=create_model(
            "AdjudicationAnswer",
            __config__=_STRICT,
            units=(list[adjudicated_unit], Field(max_length=limits.rows)),
            unlisted=(list[unlisted_error], Field(default_factory=list, max_length=limits.unlisted)),
        ),
        extract=create_model(
            "ExtractionAnswer",
            __config__=_STRICT,
            findings=(list[finding], Field(max_length=limits.findings)),
        ),
        match=create_model(
            "MatchingAnswer",
            __config__=_STRICT,
            matches=(list[row], Field(max_length=limits.rows)),
            unmatched_pred=(list[pred_id], Field(max_length=limits.findings)),
            unmatched_gt=(list[gt_id], Field(max_length=limits.findings)),
        ),
        grade=create_model(
            "GradingAnswer",
            __config__=_STRICT,
            grades=(list[grade_entry], Field(max_length=limits.rows)),
        ),
        exact_grade_length=limits.exact_grade_length,
    )


@lru_cache(maxsize=8)
def validation_models(grammar: Limits) -> AnswerModels:
    """The models an answer decoded under `grammar` is validated by: grammar and canonical caps.

    A grading answer must grade every row sent exactly once, named by its ids, whatever
    the grammar did; an answer that does not is invalid (retried once, then the pair fails).
    """
    return replace(answer_models(grammar.tightest(CANONICAL_LIMITS)), checks_grade_rows=True)


CANONICAL = answer_models(CANONICAL_LIMITS)
ANSWER_MODELS: dict[str, type[BaseModel]] = {
    "extract": CANONICAL.extract,
    "match": CANONICAL.match,
    "grade": CANONICAL.grade,
    "adjudicate": CANONICAL.adjudicate,
}


# --------------------------------------------------------------------------- stored stages


class Measurement(BaseModel):
    """One numeric value of a stored finding."""

    model_config = _LENIENT

    value: float
    unit: Optional[str] = None
    category: MeasurementCategory
    prior: bool = False
    quantity: Optional[Quantity] = None


class Finding(BaseModel):
    """A finding as stored in a record: the judge's answer plus the pipeline's id."""

    model_config = _LENIENT

    text: str = Field(min_length=1)
    clinical_status: ClinicalStatus
    clinical_significance: Significance
    comparison: Optional[Comparison] = None
    measurements: list[Measurement] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    id: str = Field(min_length=1)  # last, as records have always written it


def number_findings(findings: list[BaseModel], prefix: str) -> list[Finding]:
    """Give extracted findings the pipeline's ids (`gt_1`, ... or `p_1`, ...) in judge order."""
    return [
        Finding(id=f"{prefix}_{i}", **finding.model_dump()) for i, finding in enumerate(findings, 1)
    ]


class MatchRow(BaseModel):
    """One stored (pred, gt) binding."""

    model_config = _STRICT

    pred_id: str
    gt_id: str
    reasoning: str = ""
    match_scope: MatchScope


class MatchingAnswer(BaseModel):
    """The matching stage as stored: the judge's answer as given, before repair."""

    model_config = _STRICT

    matches: list[MatchRow]
    unmatched_pred: list[str]
    unmatched_gt: list[str]


class StoredGradingError(BaseModel):
    """A grading error as stored: any string is accepted, scoring filters it."""

    model_config = _LENIENT

    reasoning: str = ""
    dimension: str
    severity: str


class StoredGradeEntry(BaseModel):
    """One keyed grading entry as the judge gave it: a row's ids and its errors."""

    model_config = _LENIENT

    pred_id: str
    gt_id: str
    errors: list[StoredGradingError] = Field(default_factory=list)


class GradingStage(BaseModel):
    """The grading stage as stored: the rows sent, in order, and the keyed answer as given.

    Entries are looked up by (pred_id, gt_id), never by position. A fresh answer grades
    every row sent exactly once (checked on arrival); a hand-made record need not, and
    scoring says in `repairs` what it ignored or found missing.
    """

    model_config = _LENIENT

    pairs: list[tuple[str, str]] = Field(default_factory=list)
    grades: list[StoredGradeEntry] = Field(default_factory=list)

    def entries(self) -> Iterator[tuple[str, str, list[StoredGradingError]]]:
        """(pred_id, gt_id, errors) of every entry, in answer order."""
        for entry in self.grades:
            yield entry.pred_id, entry.gt_id, entry.errors

    def errors_for(self, pred_id: str, gt_id: str) -> Optional[list[StoredGradingError]]:
        """The errors of row (pred_id, gt_id), all entries naming it together; None if ungraded."""
        found: Optional[list[StoredGradingError]] = None
        for entry in self.grades:
            if entry.pred_id == pred_id and entry.gt_id == gt_id:
                found = (found or []) + entry.errors
        return found


class ShownUnit(BaseModel):
    """A unit as the error adjudication was shown it: its outcome and findings' ids.

    Its number in the adjudication is its position in `AdjudicationStage.units`, from 1.
    """

    model_config = _LENIENT

    kind: str  # MIS, SPU, INC or PAR
    gt_ids: list[str] = Field(default_factory=list)
    pred_ids: list[str] = Field(default_factory=list)

    def key(self) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        return unit_key(self.kind, self.gt_ids, self.pred_ids)


def unit_key(kind: str, gt_ids: Sequence[str], pred_ids: Sequence[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """What identifies a unit the adjudication was shown: its kind and findings, in any order."""
    return kind, tuple(sorted(gt_ids)), tuple(sorted(pred_ids))


class StoredAdjudicatedUnit(BaseModel):
    """One adjudication entry as the judge gave it."""

    model_config = _LENIENT

    unit: int
    reasoning: str = ""
    errors: int


class StoredUnlistedError(BaseModel):
    model_config = _LENIENT

    description: str = ""


class AdjudicationAnswer(BaseModel):
    """The adjudication's answer as stored (validated strictly when it arrived)."""

    model_config = _LENIENT

    units: list[StoredAdjudicatedUnit] = Field(default_factory=list)
    unlisted: list[StoredUnlistedError] = Field(default_factory=list)


class AdjudicationStage(BaseModel):
    """The error adjudication as stored: the units it was shown, in order, and its answer.

    With no unit to show no call is made and the answer is empty. A call that failed
    keeps the units and `error` (the stage's failure message) and no answer: the pair's
    other scores stand and `significant_errors` is null.
    """

    model_config = _LENIENT

    units: list[ShownUnit] = Field(default_factory=list)
    answer: Optional[AdjudicationAnswer] = None
    error: Optional[str] = None
