"""The paper's single-call baselines as judge stages (docs/agreement.md).

- `count`: the judge answers `{"errors": N}`, a bare integer of clinically significant
  errors;
- `enumerate`: the judge answers `{"errors": [{"description": ...}, ...]}`, one entry
  per error, and the count is the length of the list.

Both answers are schema-constrained like RadMatch's stages and go through the same
call path (`radmatch_audit.run.calls.JudgeCalls.ask`). Their instructions are data:
`prompts/baselines/<method>.md`. `count` also has example turns, one shared file
`baselines/count.json` in the few-shot directory (`{"method", "clinically_reviewed",
"note", "exemplars": [{"input": {"reference", "candidate", "indication"?}, "output":
{"errors": N}}]}`), versioned into its prompt; `enumerate` has none. One prompt serves
every modality.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from radmatch_audit.core.records import PairInput
from radmatch_audit.stages.exemplars import FewshotError, fewshot_dir, read_exemplar_file, read_prompt
from radmatch_audit.stages.prompt import Prompt
from radmatch_audit.stages.stage import JudgeStage, Rows
from radmatch_audit.core.vocabulary import check_choice

METHODS = ("count", "enumerate")
MAX_COUNT = 99  # the count grammar admits 0..MAX_COUNT
# (list cap, description cap, answer tokens) for a served judge and for a small model
SERVER_CAPS = (60, 400, 8192)
SMALL_CAPS = (4, 80, 300)  # ~35 tokens an entry: a small model on a CPU fills the list
COUNT_MAX_TOKENS = 32
EXEMPLAR_METHODS = ("count",)  # the baselines with example turns
_INPUT_KEYS = frozenset({"reference", "candidate", "indication"})

CountValue = Literal[tuple(range(MAX_COUNT + 1))]  # an enum: every grammar backend bounds it


class CountAnswer(BaseModel):
    """`count`: the number of clinically significant errors."""

    model_config = ConfigDict(extra="forbid")
    errors: CountValue  # type: ignore[valid-type]


def enumerate_model(max_items: Optional[int], max_chars: Optional[int]) -> type[BaseModel]:
    """`enumerate`'s answer model with the given caps (None: uncapped)."""

    class Listed(BaseModel):
        model_config = ConfigDict(extra="forbid")
        description: str = Field(max_length=max_chars) if max_chars else Field()

    class EnumerateAnswer(BaseModel):
        model_config = ConfigDict(extra="forbid")
        errors: list[Listed] = Field(max_length=max_items) if max_items else Field()

    return EnumerateAnswer


def load_prompt(method: str) -> str:
    """The instructions of a baseline (prompts/baselines/<method>.md)."""
    check_choice(method, METHODS, "The baseline method")
    return read_prompt(f"baselines/{method}.md")


def load_exemplars(method: str) -> list[dict[str, Any]]:
    """The example turns of a baseline (`baselines/<method>.json` in the few-shot directory),
    each `{"input", "output"}`, every output validated by the method's answer model; [] for
    a method without examples. A malformed file raises FewshotError naming it."""
    check_choice(method, METHODS, "The baseline method")
    if method not in EXEMPLAR_METHODS:
        return []
    path = fewshot_dir() / "baselines" / f"{method}.json"
    doc = read_exemplar_file(path)
    if not isinstance(doc, dict) or doc.get("method") != method or not isinstance(doc.get("exemplars"), list):
        raise FewshotError(f"{path}: expected an object with method {method!r} and an 'exemplars' list")
    exemplars = []
    for i, exemplar in enumerate(doc["exemplars"]):
        where = f"{path}: exemplar {i}"
        if not isinstance(exemplar, dict) or set(exemplar) != {"input", "output"}:
            raise FewshotError(f"{where} must have exactly the keys 'input' and 'output'")
        data = exemplar["input"]
        if not isinstance(data, dict) or not {"reference", "candidate"} <= set(data) <= _INPUT_KEYS \
                or not all(isinstance(v, str) for v in data.values()):
            raise FewshotError(f"{where}: 'input' must hold the strings reference, candidate "
                               "and optionally indication")
        try:
            CountAnswer.model_validate(exemplar["output"])
        except ValidationError as exc:
            raise FewshotError(f"{where}: output fails CountAnswer: {exc}") from exc
        exemplars.append({"input": data, "output": exemplar["output"]})
    return exemplars


@dataclass(frozen=True)
class BaselineStage(JudgeStage):
    """A baseline's one call: the pair's two reports in, one answer model, no exemplars."""

    method: str = "count"
    schema: type[BaseModel] = CountAnswer

    def prompt(self, modality: Optional[str] = None) -> Prompt:
        return _prompt(self.method, self.schema, str(fewshot_dir()))

    def grammar(self, rows: Rows = None) -> type[BaseModel]:
        return self.schema

    def validator(self, rows: Rows = None) -> type[BaseModel]:
        return self.schema

    def user_input(self, pair: PairInput) -> dict[str, Any]:
        user: dict[str, Any] = {"reference": pair.reference, "candidate": pair.candidate}
        if pair.indication and pair.indication.strip():
            user["indication"] = pair.indication.strip()
        return user

    def errors(self, answer: BaseModel) -> int:
        """The answer's count of clinically significant errors."""
        return answer.errors if self.method == "count" else len(answer.errors)


@lru_cache(maxsize=8)
def baseline_stage(method: str, small_model: bool = False) -> BaselineStage:
    """The stage of `method`; `small_model` sets the caps a small model needs (a short list,
    short descriptions, a small token budget); a capable served judge runs uncapped."""
    load_prompt(method)  # an unknown method fails here
    items, chars, tokens = SMALL_CAPS if small_model else SERVER_CAPS
    if method == "count":
        schema, max_tokens = CountAnswer, COUNT_MAX_TOKENS
    else:
        schema, max_tokens = enumerate_model(items, chars if small_model else None), tokens
    return BaselineStage(name=f"baseline_{method}", max_tokens=max_tokens, method=method, schema=schema)


@lru_cache(maxsize=8)
def _prompt(method: str, schema: type[BaseModel], directory: str) -> Prompt:
    """The system turn, the example turns (written as the pair's message is), and the
    version, which hashes the instructions, the answer schema and the examples."""
    instructions = load_prompt(method)
    exemplars = load_exemplars(method)
    content: dict[str, Any] = {"instructions": instructions, "schema": schema.model_json_schema()}
    if exemplars:  # a method without examples keeps the version it had
        content["exemplars"] = exemplars
    payload = json.dumps(content, sort_keys=True, separators=(",", ":"))
    version = "baseline-v1-" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]
    turns = [("system", instructions)]
    for exemplar in exemplars:
        turns.append(("user", json.dumps(exemplar["input"], ensure_ascii=False)))
        turns.append(("assistant", json.dumps(exemplar["output"])))
    return Prompt(turns=tuple(turns), version=version, compact=False)
