"""What `radmatch_metric.py` (the `evaluate` metric) delegates to.

The metric file holds metadata only; this module turns `compute()` inputs into
`PairInput`s, runs them through one `Evaluator` per metric instance, and shapes the
output. The evaluator (and so the loaded judge and its in-memory answer memo) is built
on the first `compute()` and kept: every later epoch over the same references pays judge
calls only for the new candidates.

The evaluator owns one event loop in its own thread, so that a server judge's HTTP
client lives on one loop across `compute()` calls, and `compute()` works inside a
running loop (notebooks) too.

Options (keyword arguments of `evaluate.load(...)`): every `JudgeConfig` field, each
declared once in `radmatch_audit.judges.config` with its RADMATCH_* variable and help, and the
metric's own (`METRIC_OPTIONS`: records_path, progress, judge). `options_help()` lists
them all with their variables and help; the metric's description shows that list.

A bare `evaluate.load("radmatch")` needs `radmatch-audit install-metric` once: without it
evaluate fails with "Couldn't find a module script at .../radmatch/radmatch.py. Module
'radmatch' doesn't exist on the Hugging Face Hub either." (`script_path()` loads the
installed script with no install step.)

`cache_dir` and `timeout` belong to `evaluate` itself (where it buffers predictions, and
its distributed timeout), hence `judge_cache_dir` and `timeout_s` here.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from radmatch_audit.judges.config import JudgeConfig
from radmatch_audit.read.corpus import summarize
from radmatch_audit.hf.extras import require_local_judge
from radmatch_audit.judges.judge_notice import configured_identity, judge_identity, warn_not_clinical
from radmatch_audit.hf.metric_install import script_path  # noqa: F401  (documented: radmatch_audit.hf.metric.script_path())
from radmatch_audit.run.pipeline import Evaluator
from radmatch_audit.files.record_io import RecordWriter
from radmatch_audit.core.records import BaselineRecord, PairInput, Record

AnyRecord = Record | BaselineRecord
from radmatch_audit.read.resampling import mean_interval
from radmatch_audit.core.vocabulary import MODALITIES, check_choice

log = logging.getLogger(__name__)

RECORDS_PATH_ENV = "RADMATCH_RECORDS_PATH"
PROGRESS_ENV = "RADMATCH_PROGRESS"
# Metric option -> JudgeConfig field, where the names differ (the field's Option says so).
_RENAMED = {o.metric_name: name for name, o in JudgeConfig.options().items() if o.metric_name}
JUDGE_OPTIONS = tuple(sorted(
    {o.metric_name or name for name, o in JudgeConfig.options().items()}
))
# The metric's own options: name -> (environment variable or None, help).
METRIC_OPTIONS: dict[str, tuple[str | None, str]] = {
    "records_path": (RECORDS_PATH_ENV, "append every record to this JSONL file"),
    "progress": (PROGRESS_ENV, "the CLI's progress bar on stderr during compute(); on by default, "
                 "progress=False or RADMATCH_PROGRESS=0 turns it off; compute(progress=...) "
                 "overrides it for one call"),
    "judge": (None, "a ready radmatch_audit judge object; for tests and custom backends"),
    "method": (None, "radmatch (default: extract, match, grade, adjudicate; four or five judge "
               "calls a pair and a finding-level record) or count (the one-call count of "
               "clinically significant errors: one judge call a pair, no finding-level record)"),
    "score": (None, "the count that `errors` and `mean_errors` report: significant (the error "
              "adjudication's, the default while it runs) or actionable (the paper's RadMatch "
              "count); the count method has only its own"),
}
METHODS = ("radmatch", "count")
SCORES = ("significant", "actionable")
OPTIONS = (*JUDGE_OPTIONS, *METRIC_OPTIONS)
PER_PAIR_EXTRAS = ("indications", "study_ids", "pair_ids", "modalities")
# add_batch stores the extras beside predictions and references (evaluate's Arrow
# buffer, so they travel with them across processes); an absent value is stored as
# this, which the buffer accepts where it refuses None, and read back as None.
ABSENT = ""
SAFETY_KEYS = tuple(
    (f"{tier}_{name}", tier, name) for tier in ("triage", "actionable") for name in ("precision", "recall")
)


# ---------------------------------------------------------------------------- options


def split_init_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split `evaluate.load(**kwargs)` into evaluate's own keywords and RadMatch options.

    Anything that is neither raises, naming the options: a typo must not silently
    select the default judge.
    """
    import evaluate

    own = set(inspect.signature(evaluate.EvaluationModule.__init__).parameters) - {"self", "kwargs"}
    module_kwargs = {k: v for k, v in kwargs.items() if k in own}
    options = {k: v for k, v in kwargs.items() if k not in own}
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(
            f"unknown RadMatch option(s) {unknown}; the options are {list(OPTIONS)} "
            "(each also read from its RADMATCH_* environment variable)"
        )
    return module_kwargs, options


def options_help() -> str:
    """One line per option with its environment variable and help, for MetricInfo and --help."""
    judge = {o.metric_name or name: (o.env, o.help) for name, o in JudgeConfig.options().items()}
    return "\n".join(
        f"- {name}" + (f" ({var})" if var else "") + f": {text}"
        for name, (var, text) in {**dict(sorted(judge.items())), **METRIC_OPTIONS}.items()
    )


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"{name} must be true or false; got {value!r} instead")


# ---------------------------------------------------------------------------- scorer


class MetricScorer:
    """One judge configuration and, once needed, one Evaluator reused across calls."""

    def __init__(
        self,
        *,
        records_path: str | None = None,
        progress: bool | None = None,
        judge: Any = None,
        env: dict[str, str] | None = None,
        method: str = "radmatch",
        score: str | None = None,
        **options: Any,
    ) -> None:
        env = os.environ if env is None else env
        self.method = check_choice(method, METHODS, "The 'method' option of RadMatch")
        renamed = {_RENAMED.get(k, k): v for k, v in options.items()}
        self.config = JudgeConfig.from_env(env, **renamed)  # fails at load, not mid-epoch
        self.score = default_score(self.method, self.config.adjudication) if score is None else check_choice(
            score, SCORES, "The 'score' option of RadMatch")
        if self.method == "radmatch" and self.score == "significant" and not self.config.adjudication:
            raise ValueError(
                "score='significant' needs the error adjudication, which adjudication=False turns "
                "off; pass score='actionable' or leave the adjudication on"
            )
        if judge is None and self.config.is_small_local_model:
            require_local_judge()  # `[metric]` alone has no torch: one line, at load
        self.records_path = records_path or env.get(RECORDS_PATH_ENV) or None
        if progress is None:
            progress = _flag(env.get(PROGRESS_ENV, "1"), PROGRESS_ENV)
        self.progress = _flag(progress, "progress")
        self._judge = judge
        self._evaluator: Evaluator | None = None
        self._build_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # picklable: the judge is rebuilt on demand
        state = self.__dict__.copy()
        state.update(_evaluator=None, _judge=None, _build_lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._build_lock = threading.Lock()

    def close(self) -> None:
        """Release the judge (its HTTP client or model) and the evaluator's event loop."""
        with self._build_lock:
            evaluator, self._evaluator = self._evaluator, None
        if evaluator is not None:
            evaluator.close()

    @property
    def evaluator(self) -> Evaluator:
        with self._build_lock:
            if self._evaluator is None:
                self._evaluator = Evaluator.from_config(self.config, judge=self._judge, method=self.method)
            return self._evaluator

    @property
    def judge_info(self) -> dict[str, Any]:
        """Which judge scores: backend, model, servers (host:port), embedded_small_judge.
        Until the first evaluation builds the judge, read from the configuration: asking
        loads no model."""
        with self._build_lock:
            evaluator = self._evaluator
        if evaluator is not None:
            return judge_identity(evaluator.judge)
        if self._judge is not None:
            return judge_identity(self._judge)
        return configured_identity(self.config)

    def evaluate(self, pairs: list[PairInput], *, progress: bool = False) -> tuple[list[AnyRecord], int]:
        """Records in input order and the number of judge calls this run made.

        `progress=True` shows the CLI's progress bar (tqdm, on stderr) while pairs run.
        """
        from radmatch_audit.run.progress import progress_bar  # the bar `radmatch-audit evaluate` shows

        evaluator = self.evaluator
        before = evaluator.stats.judge_calls
        writer = RecordWriter(self.records_path, append=True) if self.records_path else None
        bar = progress_bar(len(pairs), quiet=not progress)
        stats = evaluator.stats

        def on_record(record: AnyRecord) -> None:
            if writer is not None:
                writer.write(record)
            bar.update(1)
            bar.set_postfix(pairs_per_s=f"{stats.pairs_per_s:.3g}", failed=stats.failed)

        try:
            records = evaluator.evaluate(pairs, on_record=on_record)
        finally:
            bar.close()
            if writer is not None:
                writer.close()
        warn_not_clinical(self.judge_info, stacklevel=3)  # once per process
        failed = sum(r.error is not None for r in records)
        if failed:  # counts only: report text and judge answers never reach the log
            log.warning("%d of %d pair(s) failed; their error counts are None", failed, len(records))
        return records, evaluator.stats.judge_calls - before

    def compute(
        self,
        predictions: Sequence[str],
        references: Sequence[str],
        *,
        progress: bool | None = None,
        **extras: Any,
    ) -> dict[str, Any]:
        """The metric's `_compute`: per-pair counts, the corpus summary, the records."""
        pairs = make_pairs(predictions, references, **extras)
        show = self.progress if progress is None else _flag(progress, "progress")
        records, judge_calls = self.evaluate(pairs, progress=show)
        return metric_output(records, judge_calls=judge_calls, judge=self.judge_info, score=self.score)


def batch_extras(n: int, extras: dict[str, Any]) -> dict[str, list[str]]:
    """The per-pair extras of one `add_batch` (or `compute`) of n pairs, as the columns
    the metric stores beside predictions and references: every extra present, each a
    list of n strings, an absent value stored as ABSENT. Validated here, batch by
    batch, so that a wrong length names the batch's own size."""
    unknown = sorted(set(extras) - set(PER_PAIR_EXTRAS))
    if unknown:
        raise TypeError(
            f"unknown keyword(s) {unknown} for RadMatch.add_batch; the per-pair extras are "
            f"{list(PER_PAIR_EXTRAS)}"
        )
    columns = {}
    for name in PER_PAIR_EXTRAS:
        value = extras.get(name)
        if isinstance(value, (list, tuple)):  # what the buffer hands back, or a user's ""
            value = [None if v == ABSENT else v for v in value]
        values = _check_list(name, value, n, allow_scalar=name == "modalities")
        if name == "modalities":
            _check_modalities(values)
        columns[name] = [ABSENT if v is None else v for v in values]
    return columns


def stored_extras(columns: dict[str, Sequence[str]], final: dict[str, Any]) -> dict[str, Any]:
    """Extras for `make_pairs` from the stored columns (ABSENT read back as None); an
    extra given to the final `compute()` (after add_batch calls, covering every pair)
    replaces its stored column."""
    out: dict[str, Any] = {}
    for name in PER_PAIR_EXTRAS:
        if final.get(name) is not None:
            out[name] = final[name]
        elif name in columns and any(v != ABSENT for v in columns[name]):
            out[name] = [None if v == ABSENT else v for v in columns[name]]
    return out


def _check_modalities(values: list[Any]) -> None:
    for modality in values:
        if modality is not None and modality not in MODALITIES:
            raise ValueError(
                f"The 'modalities' parameter of RadMatch.compute must hold values from "
                f"{list(MODALITIES)}; got {modality!r} instead"
            )


def _check_list(name: str, value: Any, n: int, *, allow_scalar: bool = False) -> list[Any]:
    if value is None:
        return [None] * n
    if allow_scalar and isinstance(value, str):
        return [value] * n
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != n:
        got = f"{type(value).__name__} of length {len(value)}" if hasattr(value, "__len__") else type(value).__name__
        raise ValueError(
            f"The '{name}' parameter of RadMatch.compute must be None or a list with one "
            f"entry per pair ({n}); got {got} instead"
        )
    values = list(value)
    for item in values:
        if item is not None and not isinstance(item, str):
            raise ValueError(
                f"The '{name}' parameter of RadMatch.compute must hold strings or None; "
                f"got {type(item).__name__} instead"
            )
    return values


def make_pairs(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    indications: Sequence[str | None] | None = None,
    study_ids: Sequence[str | None] | None = None,
    pair_ids: Sequence[str | None] | None = None,
    modalities: Any = None,
    **unknown: Any,
) -> list[PairInput]:
    """Validated pairs from compute()'s columns and optional per-pair extras."""
    if unknown:
        hint = ""
        if "modality" in unknown:
            hint = (
                "; per-pair modalities go as modalities=[...] (or one string for all), the "
                "default as evaluate.load(..., modality=...)"
            )
        raise TypeError(
            f"unknown keyword(s) {sorted(unknown)} for RadMatch.compute; the per-pair "
            f"extras are {list(PER_PAIR_EXTRAS)}{hint}"
        )
    predictions, references = list(predictions), list(references)
    n = len(references)
    if len(predictions) != n:
        raise ValueError(
            f"The 'predictions' parameter of RadMatch.compute must have one entry per "
            f"reference ({n}); got {len(predictions)} instead"
        )
    columns = {
        "indication": _check_list("indications", indications, n),
        "study_id": _check_list("study_ids", study_ids, n),
        "pair_id": _check_list("pair_ids", pair_ids, n),
        "modality": _check_list("modalities", modalities, n, allow_scalar=True),
    }
    _check_modalities(columns["modality"])
    return [
        PairInput(
            reference=reference,
            candidate=prediction,
            **{key: values[i] for key, values in columns.items()},
        )
        for i, (prediction, reference) in enumerate(zip(predictions, references))
    ]


def default_score(method: str, adjudication: bool) -> str:
    """The headline count: the adjudicated one where it runs (it agrees better with
    radiologists: README, "Agreement with radiologists"), else the paper's."""
    return "significant" if method == "count" or adjudication else "actionable"


def pair_errors(record: AnyRecord, score: str) -> int | None:
    """A pair's count under `score` ("significant" or "actionable"); None when the pair
    failed, or its adjudication did not stand: a missing count is never 0 errors. A
    count baseline's record has one count, its significant errors."""
    if record.error is not None:
        return None
    if isinstance(record, BaselineRecord):
        return record.errors if score == "significant" else None
    if record.scores is None:
        return None
    return record.scores.significant_errors if score == "significant" else record.scores.actionable_errors


def metric_output(
    records: list[AnyRecord], *, judge_calls: int | None = None, judge: dict[str, Any] | None = None,
    score: str | None = None,
) -> dict[str, Any]:
    """compute()'s result: flat corpus scalars for loggers, per-pair lists, the summary,
    and `judge`: which judge scored (judge_notice.judge_identity).

    `errors` is the per-pair count named by `score` (`mean_errors` its mean): the
    adjudicated `significant_errors` by default where it ran, else `actionable_errors`.
    Both lists are given as well. An entry is None when its pair failed (or its
    adjudication did not stand): a failure is never 0 errors.
    """
    if records and all(isinstance(r, BaselineRecord) for r in records):
        return _count_output(records, judge_calls=judge_calls, judge=judge)
    if score is None:
        adjudicated = any(r.scores is not None and r.scores.adjudication != "off" for r in records)
        score = default_score("radmatch", adjudicated)
    summary = summarize(records).to_dict()
    output: dict[str, Any] = {
        "score": score,
        "errors": [pair_errors(r, score) for r in records],
        "mean_errors": summary.get(f"mean_{score}_errors"),
        "mean_errors_ci": summary.get(f"mean_{score}_errors_ci"),
        "mean_significant_errors": summary.get("mean_significant_errors"),
        "mean_significant_errors_ci": summary.get("mean_significant_errors_ci"),
        "mean_actionable_errors": summary["mean_actionable_errors"],
        # 95 % bootstrap interval over studies (seeded); a pair without study id is its own study
        "mean_actionable_errors_ci": summary["mean_actionable_errors_ci"],
        **{key: summary["safety"][tier][name] for key, tier, name in SAFETY_KEYS},
        "n_pairs": len(records),
        "n_scored": summary["n_scored"],
        "n_failed": summary["n_failed"],
        "actionable_errors": [pair_errors(r, "actionable") for r in records],
        "significant_errors": [pair_errors(r, "significant") for r in records],
        "summary": summary,
        "records": [json.loads(r.to_json()) for r in records],
    }
    return _with_judge(output, judge_calls, judge)


def _count_output(
    records: list[BaselineRecord], *, judge_calls: int | None, judge: dict[str, Any] | None
) -> dict[str, Any]:
    """compute()'s result under `method="count"`: one count a pair, no finding-level record."""
    counts = [pair_errors(r, "significant") for r in records]
    scored = [(c, r.study_id or f"pair:{i}") for i, (c, r) in enumerate(zip(counts, records)) if c is not None]
    mean = sum(c for c, _ in scored) / len(scored) if scored else None
    interval = list(mean_interval([c for c, _ in scored], [s for _, s in scored])) if scored else None
    output: dict[str, Any] = {
        "method": "count",
        "score": "significant",
        "errors": counts,
        "mean_errors": mean,
        "mean_errors_ci": interval,
        "significant_errors": counts,
        "mean_significant_errors": mean,
        "mean_significant_errors_ci": interval,
        "n_pairs": len(records),
        "n_scored": len(scored),
        "n_failed": len(records) - len(scored),
        "records": [json.loads(r.to_json()) for r in records],
    }
    return _with_judge(output, judge_calls, judge)


def _with_judge(output: dict[str, Any], judge_calls: int | None, judge: dict[str, Any] | None) -> dict[str, Any]:
    if judge_calls is not None:
        output["judge_calls"] = judge_calls
    if judge is not None:
        output["judge"] = judge
    return output
