"""Every closed vocabulary of RadMatch, defined once; other modules import from here.

The scoring core keeps its own result vocabularies (outcomes, tiers, dimensions,
subsets) in `radmatch_audit.scoring.results`, and the records carry them to the dashboard.

Every "must be one of" message is `check_choice`'s:

>>> check_modality("chest_ct", "the 'modality' parameter")
'chest_ct'
>>> check_modality("knee_mri", "pair 7: modality")
Traceback (most recent call last):
...
ValueError: pair 7: modality must be one of ['chest_xray', 'chest_ct', 'abdomen_pelvis_ct', 'head_ct', 'brain_mri']; got 'knee_mri'
"""

from __future__ import annotations

from typing import Any, Collection, Literal, get_args

from radmatch_audit.core.thresholds import QUANTITIES

Modality = Literal["chest_xray", "chest_ct", "abdomen_pelvis_ct", "head_ct", "brain_mri"]
MODALITIES: tuple[str, ...] = get_args(Modality)
DEFAULT_MODALITY = "chest_xray"

# The judge's stages, in the order one pair runs them. The indication is read by code
# (radmatch_audit.stages.indication), not asked of the judge; the error adjudication runs after
# scoring, on the units scoring made (docs/judge.md rule 28), and can be switched off.
Stage = Literal["extract", "match", "grade", "adjudicate"]
STAGES: tuple[str, ...] = get_args(Stage)
ADJUDICATION = "adjudicate"
# The three stages scoring needs; every record since version 1 has them.
SCORING_STAGES: tuple[str, ...] = ("extract", "match", "grade")

ClinicalStatus = Literal["normal", "abnormal"]
Significance = Literal["critical", "urgent", "notable", "routine"]
Comparison = Literal["stable", "improving", "worsening", "new", "resolved"]
MeasurementCategory = Literal["size", "count", "attenuation", "ratio", "position", "other"]
# What a measurement measured, when it is one of the clinical threshold table's quantities.
Quantity = Literal[QUANTITIES]  # type: ignore[valid-type]
MatchScope = Literal["direct", "aggregate", "generic"]
GradedDimension = Literal["location", "severity", "morphology", "certainty", "measurement"]
ErrorSeverity = Literal["major", "minor"]
# The units the error adjudication is shown: every unit whose outcome is not COR.
AdjudicatedOutcome = Literal["MIS", "SPU", "INC", "PAR"]
MAX_UNIT_ERRORS = 5  # clinically significant errors the adjudication may give one unit


def check_choice(value: Any, allowed: Collection[Any], what: str, error: type[Exception] = ValueError) -> Any:
    """Return `value` when it is one of `allowed`; otherwise raise `error`:
    "WHAT must be one of [...]; got VALUE"."""
    if value not in allowed:
        raise error(f"{what} must be one of {list(allowed)}; got {value!r}")
    return value


def check_modality(value: object, what: str) -> str:
    """Return `value` when it names a few-shot set; otherwise raise ValueError."""
    return check_choice(value, MODALITIES, what)
