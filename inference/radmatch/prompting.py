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
from typing import Any, Optional

from radmatch.judges.base import Judge, JudgeError, Message
from radmatch.prompts import load_exemplars, load_instructions
from radmatch.schemas import Finding

class ContextBudgetError(JudgeError):
    """The pair does not fit the judge's context even without exemplars."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


@lru_cache(maxsize=64)
def static_prefix(stage: str, modality: str) -> tuple[tuple[str, str], ...]:
    """(role, content) turns of the instructions and every exemplar, in order."""
    turns = [("system", load_instructions(stage))]
    for exemplar in load_exemplars(modality, stage):
        turns.append(("user", _dumps(exemplar["input"])))
        turns.append(("assistant", _dumps(exemplar["output"])))
    return tuple(turns)


def build_messages(
    stage: str, modality: str, user_input: dict[str, Any], n_exemplars: Optional[int] = None
) -> list[Message]:
    prefix = static_prefix(stage, modality)
    keep = 1 + 2 * (len(prefix) // 2 if n_exemplars is None else n_exemplars)
    messages = [{"role": role, "content": content} for role, content in prefix[:keep]]
    messages.append({"role": "user", "content": _dumps(user_input)})
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
    """A finding as the match and grade stages see it (no evidence: it saves tokens)."""
    return {
        "finding_id": finding.id,
        "text": finding.text,
        "clinical_status": finding.clinical_status,
        "clinical_significance": finding.clinical_significance,
        "comparison": finding.comparison,
        "measurements": [m.model_dump() for m in finding.measurements],
    }
