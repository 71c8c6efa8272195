"""Each judge stage as one object: its prompt, its answer models under its caps, its budget.

A stage holds everything one judge call of it needs: the prompt (instructions and
exemplars for a modality, with their version: `radmatch_audit.stages.prompt`), the
answer model the judge is constrained to and the one an answer is validated by on
arrival (both from `radmatch_audit.core.schemas` under the stage's caps), the answer's token
budget, and its place on the pair's chain of calls. The call path
(`radmatch_audit.run.calls.JudgeCalls.ask`) takes a stage and a modality and asks nothing
elsewhere. RadMatch's stages (extract, match, grade, and the error adjudication after
scoring) are made by `pair_stages`; the baselines' single
calls are stages too (`radmatch_audit.stages.baselines`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from pydantic import BaseModel

from radmatch_audit.core.schemas import SERVER_LIMITS, SERVER_MAX_TOKENS, Limits, answer_models, validation_models
from radmatch_audit.stages.prompt import Prompt, stage_prompt
from radmatch_audit.core.vocabulary import ADJUDICATION, STAGES

# calls on a pair's longest path from each stage's call to its record, that call included
CHAIN = {stage: len(STAGES) - i for i, stage in enumerate(STAGES)}

# the (pred, gt) rows a grading call is sent, or the number of units an adjudication is shown
Rows = Union[None, int, Sequence[tuple[str, str]]]


@dataclass(frozen=True)
class JudgeStage(ABC):
    """One judge call's definition: what is sent, what is accepted, how many tokens."""

    name: str  # as records name it ("extract", "baseline_count")
    max_tokens: int  # the answer's budget
    chain: int = 1  # calls from this one to the record, itself included (gate.CallGate)

    @abstractmethod
    def prompt(self, modality: str) -> Prompt:
        """The fixed turns for `modality` and their version."""

    @abstractmethod
    def grammar(self, rows: Rows = None) -> type[BaseModel]:
        """The answer model the judge is constrained to (its JSON schema is sent)."""

    @abstractmethod
    def validator(self, rows: Rows = None) -> type[BaseModel]:
        """The model an answer is validated by when it arrives (and when read back)."""


@dataclass(frozen=True)
class PairStage(JudgeStage):
    """A RadMatch stage (extract, match, grade, adjudicate): exemplars per modality, caps as `limits`."""

    limits: Limits = SERVER_LIMITS

    def prompt(self, modality: str) -> Prompt:
        return stage_prompt(self.name, modality)

    def grammar(self, rows: Rows = None) -> type[BaseModel]:
        return answer_models(self.limits).for_stage(self.name, rows)

    def validator(self, rows: Rows = None) -> type[BaseModel]:
        return validation_models(self.limits).for_stage(self.name, rows)


def pair_stages(
    limits: Limits = SERVER_LIMITS, max_tokens: Optional[dict[str, int]] = None, adjudication: bool = True
) -> dict[str, PairStage]:
    """RadMatch's stages under `limits`, in the order a pair runs them; `max_tokens`
    overrides the served judge's budgets per stage; `adjudication=False` leaves the
    error adjudication out."""
    budget = {**SERVER_MAX_TOKENS, **(max_tokens or {})}
    return {
        name: PairStage(name=name, max_tokens=budget[name], chain=CHAIN[name], limits=limits)
        for name in STAGES
        if adjudication or name != ADJUDICATION
    }
