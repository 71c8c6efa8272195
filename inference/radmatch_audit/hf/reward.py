"""A reward function for RL on report generation, in the shape TRL's trainers call.

TRL's `GRPOTrainer` calls each reward function as
``reward_fn(prompts=..., completions=..., completion_ids=..., **columns)``, where
``columns`` are the dataset's other columns (one value per completion) plus
``trainer_state``, ``log_extra`` and ``log_metric``, and expects one float, or None
("no reward for this sample": TRL leaves it out of the group's baseline and gives it
no advantage), per completion. Completions are strings, or, for conversational
datasets, lists of ``{"role", "content"}`` messages.

    >>> from radmatch_audit.hf.reward import radmatch_reward
    >>> reward_fn = radmatch_reward(reference_column="reference")     # doctest: +SKIP
    >>> trainer = GRPOTrainer(model=..., reward_funcs=reward_fn, train_dataset=...)  # doctest: +SKIP

Reward: ``score_transform(errors)``, by default ``1 / (1 + errors)``, in (0, 1]; 1.0 for a
report with no error. ``errors`` is the count ``score`` names: ``"significant"`` (the
default while the error adjudication runs: the clinically significant errors judged in
context, which agreed better with radiologists) or ``"actionable"`` (the paper's
RadMatch count; the default with ``adjudication=False``). ``method="count"`` scores each
completion with the one-call count instead: one judge call, no finding-level record. A completion whose pair failed (the
judge errored, the completion does not fit the judge's context, or its adjudication
failed while ``score="significant"``) gets ``failed_reward``,
0.0 by default: below every scored completion, so a policy cannot gain by making the
judge fail, and never an exception in the trainer. ``failed_reward=None`` returns None
for it instead: TRL then skips the sample. When every completion of a group fails (say
the judge server is down), the group has no spread and GRPO learns nothing from it.
The judge that scores is ``reward_fn.judge`` (backend, model, servers by host:port); with
the embedded small judge the first call of the process warns (``NotClinicalWarning``)
that the rewards are not clinical: they give no learning signal (docs/metric.md, "What a
reward call costs"). Building the reward loads nothing; the judge is built on the first
call. Failures are logged as counts only, and reported
through TRL's ``log_metric`` when the trainer passes it (``radmatch/failed``, ``radmatch/failed_fraction``,
``radmatch/mean_significant_errors`` and ``radmatch/mean_actionable_errors``, each over
the completions that have it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Optional

from radmatch_audit.hf.metric import SCORES, AnyRecord, MetricScorer, make_pairs, pair_errors

log = logging.getLogger(__name__)

FAILED_REWARD = 0.0
METRIC_PREFIX = "radmatch/"


def inverse_errors(errors: int) -> float:
    """The default reward: 1 / (1 + errors)."""
    return 1.0 / (1.0 + errors)


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, or the assistant content of chat messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):  # a single message
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        chosen = [m for m in messages if m.get("role", "assistant") == "assistant"] or messages
        return "\n".join(_content_text(m.get("content")) for m in chosen).strip()
    raise TypeError(
        "a completion must be a string or a list of {'role', 'content'} messages; "
        f"got {type(completion).__name__} instead"
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return str(content)


def reward_from_record(
    record: AnyRecord,
    failed_reward: Optional[float] = FAILED_REWARD,
    score_transform: Callable[[int], float] = inverse_errors,
    score: str = "actionable",
) -> Optional[float]:
    """`score_transform(errors)` of the count `score` names; `failed_reward` (a float, or
    None) for a pair without that count (failed, or its adjudication did not stand)."""
    errors = pair_errors(record, score)
    if errors is None:
        return None if failed_reward is None else float(failed_reward)
    value = score_transform(errors)
    try:
        reward = float(value)
    except (TypeError, ValueError):
        reward = math.nan
    if not math.isfinite(reward):
        raise ValueError(
            f"score_transform must map an error count to a finite float; it gave {value!r} "
            f"for {errors} error(s)"
        )
    return reward


class RadMatchReward:
    """Callable reward: fewer errors, higher reward. Build once, reuse every step."""

    def __init__(
        self,
        *,
        reference_column: str = "reference",
        indication_column: str | None = "indication",
        modality_column: str | None = "modality",
        failed_reward: Optional[float] = FAILED_REWARD,
        score_transform: Callable[[int], float] = inverse_errors,
        scorer: MetricScorer | None = None,
        **options: Any,
    ) -> None:
        if failed_reward is not None and (
            isinstance(failed_reward, bool)
            or not isinstance(failed_reward, (int, float))
            or not math.isfinite(failed_reward)
        ):
            raise ValueError(
                f"The 'failed_reward' parameter of radmatch_reward must be a finite float, or "
                f"None to have TRL skip a failed sample; got {failed_reward!r} instead"
            )
        if not callable(score_transform):
            raise TypeError(
                "The 'score_transform' parameter of radmatch_reward must be a callable from "
                f"an error count (int) to a reward (float); got {type(score_transform).__name__}"
            )
        self.reference_column = reference_column
        self.indication_column = indication_column
        self.modality_column = modality_column
        self.failed_reward = None if failed_reward is None else float(failed_reward)
        self.score_transform = score_transform
        # off by default: a bar per training step would flood the trainer's log
        self.progress = bool(options.pop("progress", False))
        self.scorer = scorer or MetricScorer(**options)
        self.__name__ = "radmatch_reward"  # TRL logs each reward function by its __name__
        self.last_records: list[AnyRecord] = []

    @property
    def judge(self) -> dict[str, Any]:
        """Which judge gives the rewards: backend, model, servers (host:port), and
        embedded_small_judge (then the rewards are not clinical; the first call warns)."""
        return self.scorer.judge_info

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        *,
        log_metric: Callable[[str, float], None] | None = None,
        **columns: Any,
    ) -> list[Optional[float]]:
        completions = list(completions)
        n = len(completions)
        if self.reference_column not in columns:
            raise KeyError(
                f"the reward needs the reference report in the dataset column "
                f"{self.reference_column!r}; the columns passed are {sorted(columns)}; set "
                "radmatch_reward(reference_column=...)"
            )
        references = list(columns[self.reference_column])
        if len(references) != n:
            raise ValueError(
                f"column {self.reference_column!r} has {len(references)} values for {n} completions"
            )
        pairs = make_pairs(
            [completion_text(c) for c in completions],
            references,
            indications=self._optional_column(self.indication_column, columns, n),
            modalities=self._optional_column(self.modality_column, columns, n),
        )
        records, _ = self.scorer.evaluate(pairs, progress=self.progress)
        self.last_records = records
        score = self.scorer.score
        rewards = [reward_from_record(r, self.failed_reward, self.score_transform, score) for r in records]
        if log_metric is not None and records:
            self._log(records, log_metric, score)
        return rewards

    @staticmethod
    def _log(records: list[AnyRecord], log_metric: Callable[[str, float], None], score: str) -> None:
        """Counts only (TRL averages each over the logging step): never report text."""
        counts = {name: [e for e in (pair_errors(r, name) for r in records) if e is not None]
                  for name in SCORES}
        failed = len(records) - len(counts[score])
        log_metric(METRIC_PREFIX + "failed", float(failed))
        log_metric(METRIC_PREFIX + "failed_fraction", failed / len(records))
        for name, scored in counts.items():  # each mean over the pairs that have it
            if scored:
                log_metric(METRIC_PREFIX + f"mean_{name}_errors", sum(scored) / len(scored))

    @staticmethod
    def _optional_column(name: str | None, columns: dict[str, Any], n: int) -> list[str | None]:
        if not name or name not in columns or columns[name] is None:
            return [None] * n
        values = list(columns[name])
        if len(values) != n:
            raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
        return [v if isinstance(v, str) and v.strip() else None for v in values]


def radmatch_reward(**kwargs: Any) -> RadMatchReward:
    """A TRL-style reward function; keyword arguments as `RadMatchReward` (judge options too)."""
    return RadMatchReward(**kwargs)
