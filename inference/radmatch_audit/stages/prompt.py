"""A stage's prompt: its fixed turns and their version, made in one place; then the pair.

The fixed turns (system instructions, then each exemplar as a user/assistant turn) are
byte-identical across calls of one stage and modality, so a server's prefix cache
serves them; the pair-specific user message comes last. `load_prompt` reads the
instructions and the exemplars once and gives both the turns and the version that
hashes them, so a record names the exact prompt that produced it (docs/judge.md rule 6).
When the prompt and the answer budget do not fit the judge's context, exemplars are
dropped from the end (docs/judge.md rule 7); the number used is returned for the record.

>>> load_prompt("extract", "chest_xray").version.startswith("v1-")
True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Optional, get_args

from pydantic import BaseModel

from radmatch_audit.core.control_strings import control_tokens, neutralise_markers
from radmatch_audit.judges.base import JudgeError, Message
from radmatch_audit.core.schemas import ANSWER_MODELS, Finding, own_quote
from radmatch_audit.stages.exemplars import fewshot_dir, load_exemplars, load_instructions

if TYPE_CHECKING:
    from radmatch_audit.judges.base import Judge

PROMPT_FORMAT = "v1"
# How the exemplars are turned into messages here; part of every prompt version, so that
# a change of rendering alone (compact answers, 2026-12-02) gives new versions too.
RENDERING = "compact-json-defaults-omitted"


class ContextBudgetError(JudgeError):
    """The pair does not fit the judge's context even without exemplars."""


@dataclass(frozen=True)
class Prompt:
    """One stage's fixed turns for one modality, their version, and how the pair is written."""

    turns: tuple[tuple[str, str], ...]  # (role, content): the instructions, then exemplar turns
    version: str
    compact: bool = True  # the pair as compact JSON (the baselines' as json.dumps writes it)

    @property
    def exemplars(self) -> int:
        return (len(self.turns) - 1) // 2

    def messages(
        self, user_input: dict[str, Any], n_exemplars: Optional[int] = None, tokens: tuple[str, ...] = ()
    ) -> list[Message]:
        """The fixed turns (the first `n_exemplars` exemplars; all by default), then the pair,
        its control strings made plain text (and `tokens`, the judge's own special tokens)."""
        keep = 1 + 2 * (self.exemplars if n_exemplars is None else n_exemplars)
        messages = [{"role": role, "content": content} for role, content in self.turns[:keep]]
        text = dumps(user_input) if self.compact else json.dumps(user_input, ensure_ascii=False)
        # the pair's text may hold the served model's control strings: plain text from here on
        messages.append({"role": "user", "content": neutralise_markers(text, tokens)[0]})
        return messages

    def fit(self, judge: "Judge", user_input: dict[str, Any], max_tokens: int) -> tuple[list[Message], int]:
        """The messages with as many exemplars as fit the judge's context, and that number."""
        window, tokens = judge.context_window, control_tokens(judge)
        for n in range(self.exemplars, -1, -1):
            messages = self.messages(user_input, n, tokens)
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


def load_prompt(stage: str, modality: str) -> Prompt:
    """A RadMatch stage's prompt for one modality, read afresh: its turns and version.

    The version is "v1-" + 12 hex of a sha256 over the rendering, the instructions and
    the exemplars in canonical JSON (sorted keys, no whitespace), so any change to
    either gives a new version.
    """
    instructions = load_instructions(stage)
    exemplars = load_exemplars(modality, stage)
    payload = {"rendering": RENDERING, "instructions": instructions, "exemplars": exemplars}
    digest = hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
    turns = [("system", instructions)]
    for exemplar in exemplars:
        turns.append(("user", dumps(_compact_views(exemplar["input"]))))
        turns.append(("assistant", dumps(compact_answer(stage, exemplar["output"]))))
    return Prompt(turns=tuple(turns), version=f"{PROMPT_FORMAT}-{digest[:12]}")


def stage_prompt(stage: str, modality: str) -> Prompt:
    """`load_prompt`, read once per stage, modality and few-shot directory."""
    return _cached_prompt(stage, modality, str(fewshot_dir()))


@lru_cache(maxsize=64)
def _cached_prompt(stage: str, modality: str, directory: str) -> Prompt:
    return load_prompt(stage, modality)


def prompt_version(stage: str, modality: str) -> str:
    """The version of a stage's prompt for one modality, read afresh."""
    return load_prompt(stage, modality).version


def build_messages(
    stage: str, modality: str, user_input: dict[str, Any], n_exemplars: Optional[int] = None
) -> list[Message]:
    """A RadMatch stage's messages for one pair: `stage_prompt(...).messages(...)`."""
    return stage_prompt(stage, modality).messages(user_input, n_exemplars)


# --------------------------------------------------------------------------- rendering


def dumps(obj: Any) -> str:
    # No whitespace between JSON tokens: under constrained decoding every structural
    # token of an answer is a decode step, and the judge copies the exemplars' layout.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace: the form a version hashes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
