"""Chat messages for each stage: a static prefix, then the pair.

The prefix (system instructions, then each exemplar as a user/assistant turn) is
byte-identical across calls of one stage and modality, so a server's prefix cache
serves it; the pair-specific user message comes last. When the prompt and the answer
budget do not fit the judge's context, exemplars are dropped from the end (docs/judge.md
rule 7); the number used is returned for the record.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Optional, get_args

from pydantic import BaseModel

from radmatch_audit.control_strings import neutralise_markers
from radmatch_audit.judges.base import Judge, JudgeError, Message
from radmatch_audit.prompts import load_exemplars, load_instructions
from radmatch_audit.schemas import ANSWER_MODELS, Finding, own_quote

class ContextBudgetError(JudgeError):
    """The pair does not fit the judge's context even without exemplars."""


def _dumps(obj: Any) -> str:
    # No whitespace between JSON tokens: under constrained decoding every structural
    # token of an answer is a decode step, and the judge copies the exemplars' layout.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _item_model(annotation: Any) -> Optional[type[BaseModel]]:
    """The pydantic model inside a field's annotation (list[M], Optional[M], ...), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _item_model(arg)
        if found is not None:
            return found
    return None


def drop_defaults(value: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`value` without the optional fields of `model` that hold their default.

    A field left out means its default (`comparison` null, `measurements` empty, `prior`
    false, ...), so nothing is lost, and the answers the exemplars teach are shorter:
    BENCHMARKS.md, "Decode tokens per pair".
    """
    kept = {}
    for key, item in value.items():
        field = model.model_fields.get(key)
        if field is not None and not field.is_required():
            default = field.get_default(call_default_factory=True)
            if type(item) is type(default) and item == default:
                continue
        inner = _item_model(field.annotation) if field is not None else None
        if inner is not None and isinstance(item, list):
            item = [drop_defaults(x, inner) if isinstance(x, dict) else x for x in item]
        elif inner is not None and isinstance(item, dict):
            item = drop_defaults(item, inner)
        kept[key] = item
    return kept


def compact_answer(stage: str, answer: dict[str, Any]) -> dict[str, Any]:
    """An exemplar's answer as the judge is taught to write it: defaults left out, and a
    finding's `evidence` when it only quotes the finding's own text (schemas: an answer
    without `evidence` quotes its text)."""
    compact = drop_defaults(answer, ANSWER_MODELS[stage])
    if stage == "extract":
        for finding in compact.get("findings", []):
            text = finding.get("text", "")
            if finding.get("evidence") in ([text], [own_quote(text)]):
                del finding["evidence"]
    return compact


def _compact_views(obj: Any) -> Any:
    """Exemplar inputs with every finding view compacted like `finding_view`'s."""
    if isinstance(obj, list):
        return [_compact_views(x) for x in obj]
    if isinstance(obj, dict):
        if "finding_id" in obj:
            return drop_defaults(obj, Finding)
        return {k: _compact_views(v) for k, v in obj.items()}
    return obj


@lru_cache(maxsize=64)
def static_prefix(stage: str, modality: str) -> tuple[tuple[str, str], ...]:
    """(role, content) turns of the instructions and every exemplar, in order."""
    turns = [("system", load_instructions(stage))]
    for exemplar in load_exemplars(modality, stage):
        turns.append(("user", _dumps(_compact_views(exemplar["input"]))))
        turns.append(("assistant", _dumps(compact_answer(stage, exemplar["output"]))))
    return tuple(turns)


def build_messages(
    stage: str, modality: str, user_input: dict[str, Any], n_exemplars: Optional[int] = None
) -> list[Message]:
    prefix = static_prefix(stage, modality)
    keep = 1 + 2 * (len(prefix) // 2 if n_exemplars is None else n_exemplars)
    messages = [{"role": role, "content": content} for role, content in prefix[:keep]]
    # the pair's text may hold the served model's control strings: plain text from here on
    messages.append({"role": "user", "content": neutralise_markers(_dumps(user_input))[0]})
    return messages


def fit_messages(
    judge: Judge, stage: str, modality: str, user_input: dict[str, Any], max_tokens: int
) -> tuple[list[Message], int]:
    """The messages with as many exemplars as fit the judge's context, and that number."""
    available = (len(static_prefix(stage, modality)) - 1) // 2
    window = judge.context_window
    for n in range(available, -1, -1):
        messages = build_messages(stage, modality, user_input, n)
        if window is None:
            return messages, n
        needed = judge.count_tokens(messages) + max_tokens
        if needed <= window:
            return messages, n
    raise ContextBudgetError(
        f"the pair needs {needed} tokens ({needed - max_tokens} prompt without "
        f"exemplars + {max_tokens} for the answer), more than the judge's context of "
        f"{window}; use a judge with a longer context"
    )


def finding_view(finding: Finding) -> dict[str, Any]:
    """A finding as the match and grade stages see it: no evidence, and no field that
    holds its default (both save tokens)."""
    view = {
        "finding_id": finding.id,
        "text": finding.text,
        "clinical_status": finding.clinical_status,
        "clinical_significance": finding.clinical_significance,
        "comparison": finding.comparison,
        "measurements": [m.model_dump() for m in finding.measurements],
    }
    return drop_defaults(view, Finding)
