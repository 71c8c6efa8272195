"""Judge configuration from keyword arguments and RADMATCH_* environment variables.

No configured server means the embedded CPU judge (SmolLM2), so that a fresh machine
can run the whole pipeline. The API key is read from the environment variable named by
`api_key_env` when the judge is built; it is never stored in the config, a record or a
log line.

Each field is declared once, with its `Option` (help, variable, flag): the variables,
the command line's judge flags and the metric's options are generated from them. The
judge itself is built beside the backends (`radmatch_audit.judges.build_judge`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from radmatch_audit.core.schemas import (
    SERVER_LIMITS, SERVER_MAX_TOKENS, SMALL_MODEL_LIMITS, SMALL_MODEL_MAX_TOKENS, Limits,
)
from radmatch_audit.core.vocabulary import DEFAULT_MODALITY, MODALITIES, Modality

Backend = Literal["auto", "vllm", "hosted", "transformers"]
_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}

DEFAULT_SERVED_MODEL = "radmatch-judge"
# Judge calls in flight per server by default: enough to fill a vLLM batch on one
# workstation (the paper ran 15 workers) without queueing far ahead of it.
SERVER_CONCURRENCY = 32


@dataclass(frozen=True)
class Option:
    """How one JudgeConfig field is set from outside, declared once on the field.

    The environment variables (`JudgeConfig.from_env`), the judge flags of the command
    line (`radmatch_audit.cli.judge_options`) and the metric's options and their help
    (`radmatch_audit.hf.metric`) are all generated from these.
    """

    help: str
    env: Optional[str] = None  # its RADMATCH_* variable (None: none)
    flag: Optional[str] = ""  # its command-line flag: "" is --field-name, None is none
    metavar: Optional[str] = None
    choices: bool = True  # a Literal's values become the flag's choices
    evaluate_only: bool = False  # a flag of `evaluate` (a run's option), not of `baseline`
    metric_name: Optional[str] = None  # the metric's name for it, where `evaluate` takes the field's


class JudgeConfig(BaseModel):
    """Which judge to use and how to drive it; each field's `Option` says how it is set."""

    model_config = ConfigDict(extra="forbid")

    # In the order the command line lists them.
    backend: Annotated[Backend, Option(
        "judge backend: auto picks vllm when a server URL is set, else the in-process "
        "transformers judge", env="RADMATCH_BACKEND")] = "auto"
    base_url: Annotated[Optional[str], Option(
        "OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1; several comma-separated "
        "servers of the same model share the calls", env="RADMATCH_BASE_URL")] = None
    model: Annotated[str, Option(
        f"served model name (default {DEFAULT_SERVED_MODEL})", env="RADMATCH_MODEL")] = DEFAULT_SERVED_MODEL
    api_key_env: Annotated[str, Option(
        "environment variable holding the API key (default RADMATCH_API_KEY); the key itself "
        "is never given as an option", env="RADMATCH_API_KEY_ENV", metavar="VAR")] = "RADMATCH_API_KEY"
    allow_remote_endpoint: Annotated[bool, Option(
        "allow sending report text to a non-local endpoint, or through a proxy named by "
        "HTTP_PROXY/ALL_PROXY (ignored without this)", env="RADMATCH_ALLOW_REMOTE_ENDPOINT")] = False
    concurrency: Annotated[Optional[int], Field(ge=1), Option(
        "judge calls in flight (default 32 per server, 1 for the in-process judge); a few more "
        "pairs than that are held open so that the judge never waits", env="RADMATCH_CONCURRENCY")] = None
    timeout_s: Annotated[float, Field(gt=0), Option(
        "seconds for one server call, whole (default 300; the in-process judge has none)",
        env="RADMATCH_TIMEOUT_S", flag="--timeout", metavar="TIMEOUT")] = 300.0
    retries: Annotated[int, Field(ge=1), Option(
        "attempts per judge call on transient errors (default 3); an answer that does not fit "
        "its schema gets one more try", env="RADMATCH_RETRIES")] = 3
    thinking: Annotated[Optional[bool], Option(
        "turn a reasoning model's thinking on or off (server default if unset)",
        env="RADMATCH_THINKING")] = None
    context_window: Annotated[Optional[int], Field(gt=0), Option(
        "judge context in tokens, for the budget", env="RADMATCH_CONTEXT_WINDOW")] = None
    temperature: Annotated[float, Field(ge=0), Option(
        "sampling temperature of the judge (default 0: greedy)", env="RADMATCH_TEMPERATURE")] = 0.0
    # caps and token budgets: "small_model" for a small model (in process, or served as in
    # the tests), "server" for a capable served judge; "auto" picks by backend
    decoding: Annotated[Literal["auto", "server", "small_model"], Option(
        "list caps and token budgets: small_model for a small served model (default auto: "
        "small_model in process, server otherwise)", env="RADMATCH_DECODING")] = "auto"
    local_model_dir: Annotated[Optional[str], Option(
        "a transformers model folder for the in-process judge", env="RADMATCH_LOCAL_MODEL_DIR")] = None
    cache: Annotated[bool, Option(
        "the answer cache on disk (on by default); --no-cache, cache=False or RADMATCH_CACHE=0: "
        "do not read or write it", env="RADMATCH_CACHE", flag="--no-cache")] = True
    cache_dir: Annotated[Optional[str], Option(
        "answer cache folder (default ~/.cache/radmatch/judge)", env="RADMATCH_JUDGE_CACHE_DIR",
        metric_name="judge_cache_dir")] = None
    modality: Annotated[Modality, Option(
        "few-shot set: " + ", ".join(f"{m} (default)" if m == DEFAULT_MODALITY else m for m in MODALITIES),
        env="RADMATCH_MODALITY", choices=False, evaluate_only=True)] = DEFAULT_MODALITY
    # runs of the stages per pair (score stability); 1: one greedy run
    samples: Annotated[int, Field(ge=1), Option(
        "run the stages K times per pair and store every sample, to see how stable a score is "
        "(default 1; use with a temperature above 0)", env="RADMATCH_SAMPLES", metavar="K",
        evaluate_only=True)] = 1
    adjudication: Annotated[bool, Option(
        "the error adjudication: one more judge call per pair that counts the clinically "
        "significant errors of its units in context (significant_errors; on by default); "
        "--no-adjudication, adjudication=False or RADMATCH_ADJUDICATION=0: skip it",
        env="RADMATCH_ADJUDICATION", flag="--no-adjudication", evaluate_only=True)] = True
    max_tokens: Annotated[Optional[dict[str, int]], Option(
        'answer tokens per stage over the decoding\'s budgets, e.g. {"extract": 4096}', flag=None)] = None

    @classmethod
    def options(cls) -> dict[str, Option]:
        """Each field's Option, in declaration order."""
        return {name: next(m for m in info.metadata if isinstance(m, Option))
                for name, info in cls.model_fields.items()}

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, **overrides: Any) -> "JudgeConfig":
        """Environment first, keyword arguments (when not None) over it."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, var in ENV_VARS.items():
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            if field in _BOOL_FIELDS:
                if raw.lower() not in _BOOLS:
                    raise ValueError(f"{var} must be one of 1/0/true/false/yes/no; got {raw!r}")
                values[field] = _BOOLS[raw.lower()]
            else:
                values[field] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as exc:  # one line per bad option, naming it
            raise ValueError("; ".join(
                f"The '{'.'.join(map(str, e['loc']))}' option: {e['msg']}" for e in exc.errors()
            )) from None

    @property
    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        return "vllm" if self.base_url else "transformers"

    @property
    def is_small_local_model(self) -> bool:
        return self.resolved_backend == "transformers"

    @property
    def small_model_decoding(self) -> bool:
        if self.decoding == "auto":
            return self.is_small_local_model
        return self.decoding == "small_model"

    @property
    def resolved_concurrency(self) -> int:
        """Judge calls in flight: a server batches many (32 per server by default); an
        in-process model runs one call at a time."""
        if self.concurrency is not None:
            return self.concurrency
        if self.is_small_local_model:
            return 1
        return SERVER_CONCURRENCY * max(1, len(self.base_urls))

    def answer_cache_dir(self) -> Optional[Path]:
        if not self.cache:
            return None
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        from radmatch_audit.files.paths import cache_root

        return cache_root() / "judge"

    @property
    def limits(self) -> Limits:
        """The answers' caps: a small model's or a capable server's, as `decoding` says."""
        return SMALL_MODEL_LIMITS if self.small_model_decoding else SERVER_LIMITS

    def stage_max_tokens(self) -> dict[str, int]:
        base = SMALL_MODEL_MAX_TOKENS if self.small_model_decoding else SERVER_MAX_TOKENS
        return {**base, **(self.max_tokens or {})}

    def build_judge(self):
        """The judge this config names: `radmatch_audit.judges.build_judge(self)`."""
        from radmatch_audit.judges.factory import build_judge

        return build_judge(self)

    @property
    def base_urls(self) -> list[str]:
        """`base_url` may name several servers of the same model, comma-separated."""
        return [url.strip() for url in (self.base_url or "").split(",") if url.strip()]


# The RADMATCH_* variable of each field, and the fields read as yes/no: from the fields.
ENV_VARS: dict[str, str] = {name: o.env for name, o in JudgeConfig.options().items() if o.env}
_BOOL_FIELDS = {name for name, info in JudgeConfig.model_fields.items()
                if info.annotation in (bool, Optional[bool])}
