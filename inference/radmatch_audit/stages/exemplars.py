"""Stage instructions and few-shot exemplars: versioned data, loaded and checked here.

Instructions are Markdown files in the package's `prompts/` folder (`extract.md`,
`match.md`, `grade.md`, `adjudicate.md`; the baselines' in `prompts/baselines/`). Exemplars are JSON
files `<modality>/<stage>.json` under the few-shot directory (see `fewshot_dir`), each

    {"modality": ..., "stage": ..., "clinically_reviewed": false, "note": ...,
     "exemplars": [{"input": {...}, "output": {...}, "expected": ...}, ...]}

where `input` is what the pipeline puts in the user message and `output` validates
against the stage's answer model (a grading output grades each input pair once, in
order, by its ids; an adjudication output answers each input unit once, in order).
`expected` (match, grade and adjudicate exemplars) is what the scoring code must make
of the output (tests/stages/test_exemplar_verdicts.py checks it); the model never
sees it, so the loader drops it and it is no part of the prompt version
(`radmatch_audit.stages.prompt` renders and versions what is loaded here).

>>> load_instructions("match").startswith("# Stage: finding matching")
True
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from radmatch_audit.core.schemas import ANSWER_MODELS, CANONICAL
from radmatch_audit.core.vocabulary import MODALITIES, STAGES, check_choice

__all__ = [
    "ANSWER_MODELS",
    "FEWSHOT_ENV",
    "MODALITIES",
    "STAGES",
    "FewshotError",
    "fewshot_dir",
    "load_exemplars",
    "load_instructions",
    "read_prompt",
]

FEWSHOT_ENV = "RADMATCH_FEWSHOT_DIR"
_FINDING = CANONICAL.extract.model_fields["findings"].annotation.__args__[0]  # one finding
_EXEMPLAR_KEYS = frozenset({"input", "output", "expected"})

# Keys the pipeline puts in each stage's user message.
_INPUT_KEYS: dict[str, frozenset[str]] = {
    "extract": frozenset({"report", "indication"}),
    "match": frozenset({"indication", "gt_findings", "pred_findings"}),
    "grade": frozenset({"indication", "pairs"}),
    "adjudicate": frozenset({"indication", "reference", "candidate", "units"}),
}
_SHOWN_UNIT_KEYS = frozenset({"unit", "kind", "reference_findings", "candidate_findings", "differences"})
_SHOWN_KINDS = ("MIS", "SPU", "INC", "PAR")


class FewshotError(ValueError):
    """An exemplar file is missing, malformed, or an exemplar fails its answer model."""


def fewshot_dir() -> Path:
    """The directory holding `<modality>/<stage>.json`.

    In order: the directory named by the environment variable RADMATCH_FEWSHOT_DIR;
    `radmatch_audit/fewshots` inside an installed wheel; the repository's top-level
    `fewshots/` in a source or editable checkout.
    """
    override = os.environ.get(FEWSHOT_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_dir():
            raise FewshotError(
                f"{FEWSHOT_ENV} is set to {override!r}, which is not a directory; "
                "point it at a folder of <modality>/<stage>.json files or unset it."
            )
        return path
    here = Path(__file__).resolve()
    installed = here.parents[1] / "fewshots"  # site-packages/radmatch_audit/fewshots
    if installed.is_dir():
        return installed
    checkout = here.parents[3] / "fewshots"  # <repo>/inference/radmatch_audit/stages/exemplars.py
    if checkout.is_dir():
        return checkout
    raise FewshotError(
        f"No few-shot directory found (looked in {installed} and {checkout}); "
        f"reinstall RadMatch or set {FEWSHOT_ENV}."
    )


def read_prompt(name: str) -> str:
    """The Markdown file `name` of the package's `prompts/` folder ("grade.md", "baselines/count.md")."""
    return resources.files("radmatch_audit").joinpath("prompts", name).read_text(encoding="utf-8")


def load_instructions(stage: str) -> str:
    """The instruction text (Markdown) of one stage."""
    check_choice(stage, STAGES, "The 'stage' parameter of load_instructions")
    return read_prompt(f"{stage}.md")


def _check_findings(findings: Any, where: str) -> None:
    if not isinstance(findings, list):
        raise FewshotError(f"{where} must be a list of findings")
    for j, finding in enumerate(findings):
        if not isinstance(finding, dict) or not isinstance(finding.get("finding_id"), str):
            raise FewshotError(f"{where}[{j}] must be a finding object with a string finding_id")
        fields = {k: v for k, v in finding.items() if k != "finding_id"}
        try:
            _FINDING.model_validate(fields)
        except ValidationError as exc:
            raise FewshotError(f"{where}[{j}] is not a valid finding: {exc}") from exc


def _check_input(stage: str, data: Any, where: str) -> None:
    if not isinstance(data, dict):
        raise FewshotError(f"{where}: 'input' must be an object")
    missing = _INPUT_KEYS[stage] - data.keys()
    extra = data.keys() - _INPUT_KEYS[stage]
    if missing or extra:
        raise FewshotError(
            f"{where}: 'input' must have exactly the keys {sorted(_INPUT_KEYS[stage])}; "
            f"missing {sorted(missing)}, unexpected {sorted(extra)}"
        )
    if stage == "extract" and not isinstance(data["report"], str):
        raise FewshotError(f"{where}: input 'report' must be a string")
    if stage == "match":
        _check_findings(data["gt_findings"], f"{where}: input gt_findings")
        _check_findings(data["pred_findings"], f"{where}: input pred_findings")
    if stage == "grade":
        if not isinstance(data["pairs"], list):
            raise FewshotError(f"{where}: input 'pairs' must be a list")
        for j, pair in enumerate(data["pairs"]):
            if not isinstance(pair, dict) or set(pair) != {"pred_finding", "gt_finding"}:
                raise FewshotError(
                    f"{where}: input pairs[{j}] must have exactly pred_finding and gt_finding"
                )
            _check_findings([pair["pred_finding"], pair["gt_finding"]], f"{where}: pairs[{j}]")
    if stage == "adjudicate":
        _check_shown_units(data, where)


def _check_shown_units(data: dict[str, Any], where: str) -> None:
    """An adjudication input: both reports as strings, units numbered 1..n as the
    pipeline numbers them (radmatch_audit.stages.adjudication.shown_units)."""
    for key in ("reference", "candidate"):
        if not isinstance(data[key], str):
            raise FewshotError(f"{where}: input {key!r} must be a string")
    if not isinstance(data["units"], list):
        raise FewshotError(f"{where}: input 'units' must be a list")
    for j, unit in enumerate(data["units"]):
        if not isinstance(unit, dict) or set(unit) != _SHOWN_UNIT_KEYS:
            raise FewshotError(f"{where}: input units[{j}] must have exactly the keys {sorted(_SHOWN_UNIT_KEYS)}")
        if unit["unit"] != j + 1:
            raise FewshotError(f"{where}: input units[{j}] must be unit {j + 1}")
        if unit["kind"] not in _SHOWN_KINDS:
            raise FewshotError(f"{where}: input units[{j}] kind must be one of {list(_SHOWN_KINDS)}")
        for key in ("reference_findings", "candidate_findings", "differences"):
            if not isinstance(unit[key], list) or not all(isinstance(t, str) for t in unit[key]):
                raise FewshotError(f"{where}: input units[{j}] {key} must be a list of strings")


def _check_adjudication_keys(data: dict[str, Any], output: dict[str, Any], where: str) -> None:
    shown = [unit["unit"] for unit in data["units"]]
    given = [entry["unit"] for entry in output["units"]]
    if given != shown:
        raise FewshotError(
            f"{where}: output units answer {given}; they must answer the input units in order, {shown}"
        )


def _check_grade_keys(data: dict[str, Any], output: dict[str, Any], where: str) -> None:
    sent = [(p["pred_finding"]["finding_id"], p["gt_finding"]["finding_id"]) for p in data["pairs"]]
    given = [(g["pred_id"], g["gt_id"]) for g in output["grades"]]
    if given != sent:
        raise FewshotError(
            f"{where}: output grades name the rows {given}; they must name the input pairs "
            f"in order, {sent}"
        )


def read_exemplar_file(path: Path) -> Any:
    """The JSON of an exemplar file; FewshotError naming it when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FewshotError(f"{path}: exemplar file not found") from exc
    except json.JSONDecodeError as exc:
        raise FewshotError(f"{path}: not valid JSON ({exc})") from exc


def load_exemplars(modality: str, stage: str) -> list[dict[str, Any]]:
    """The exemplars of one modality and stage, each `{"input": ..., "output": ...}`.

    Every output is re-validated by the stage's answer model; a failure raises
    FewshotError naming the file and the exemplar index. An exemplar's `expected`
    is not returned (it is for the tests, not for the model).
    """
    check_choice(modality, MODALITIES, "The 'modality' parameter of load_exemplars")
    check_choice(stage, STAGES, "The 'stage' parameter of load_exemplars")
    path = fewshot_dir() / modality / f"{stage}.json"
    doc = read_exemplar_file(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("exemplars"), list):
        raise FewshotError(f"{path}: expected an object with an 'exemplars' list")
    if doc.get("modality") != modality or doc.get("stage") != stage:
        raise FewshotError(
            f"{path}: header says modality={doc.get('modality')!r}, stage={doc.get('stage')!r}; "
            f"expected {modality!r}, {stage!r}"
        )
    model = ANSWER_MODELS[stage]
    exemplars = []
    for i, exemplar in enumerate(doc["exemplars"]):
        where = f"{path}: exemplar {i}"
        if not isinstance(exemplar, dict) or not {"input", "output"} <= set(exemplar) <= _EXEMPLAR_KEYS:
            raise FewshotError(
                f"{where} must have the keys 'input' and 'output' (and optionally 'expected')"
            )
        _check_input(stage, exemplar["input"], where)
        try:
            model.model_validate(exemplar["output"])
        except ValidationError as exc:
            raise FewshotError(f"{where}: output fails {model.__name__}: {exc}") from exc
        if stage == "grade":
            _check_grade_keys(exemplar["input"], exemplar["output"], where)
        if stage == "adjudicate":
            _check_adjudication_keys(exemplar["input"], exemplar["output"], where)
        exemplars.append({"input": exemplar["input"], "output": exemplar["output"]})
    return exemplars
