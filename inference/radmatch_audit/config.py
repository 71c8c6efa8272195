"""Judge configuration from keyword arguments and RADMATCH_* environment variables.

No configured server means the embedded CPU judge (SmolLM2), so that a fresh machine
can run the whole pipeline. The API key is read from the environment variable named by
`api_key_env` when the judge is built; it is never stored in the config, a record or a
log line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# each stage holds its answer-token budget; the two sets are named here too
from radmatch_audit.stages.stage import SERVER_MAX_TOKENS, SMALL_MODEL_MAX_TOKENS
from radmatch_audit.vocabulary import DEFAULT_MODALITY, Modality

Backend = Literal["auto", "vllm", "hosted", "transformers"]

ENV_VARS: dict[str, str] = {
    "backend": "RADMATCH_BACKEND",
    "base_url": "RADMATCH_BASE_URL",
    "model": "RADMATCH_MODEL",
    "api_key_env": "RADMATCH_API_KEY_ENV",
    "allow_remote_endpoint": "RADMATCH_ALLOW_REMOTE_ENDPOINT",
    "timeout_s": "RADMATCH_TIMEOUT_S",
    "retries": "RADMATCH_RETRIES",
    "temperature": "RADMATCH_TEMPERATURE",
    "thinking": "RADMATCH_THINKING",
    "context_window": "RADMATCH_CONTEXT_WINDOW",
    "local_model_dir": "RADMATCH_LOCAL_MODEL_DIR",
    "concurrency": "RADMATCH_CONCURRENCY",
    "samples": "RADMATCH_SAMPLES",
    "cache": "RADMATCH_CACHE",
    "cache_dir": "RADMATCH_JUDGE_CACHE_DIR",
    "modality": "RADMATCH_MODALITY",
    "decoding": "RADMATCH_DECODING",
}
_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}

DEFAULT_SERVED_MODEL = "radmatch-judge"
# Judge calls in flight per server by default: enough to fill a vLLM batch on one
# workstation (the paper ran 15 workers) without queueing far ahead of it.
SERVER_CONCURRENCY = 32


class JudgeConfig(BaseModel):
    """Which judge to use and how to drive it. Every field has a RADMATCH_* variable."""

    model_config = ConfigDict(extra="forbid")

    backend: Backend = "auto"
    base_url: Optional[str] = None
    model: str = DEFAULT_SERVED_MODEL
    api_key_env: str = "RADMATCH_API_KEY"
    allow_remote_endpoint: bool = False
    timeout_s: float = Field(300.0, gt=0)
    retries: int = Field(3, ge=1)
    temperature: float = Field(0.0, ge=0)
    thinking: Optional[bool] = None
    context_window: Optional[int] = Field(None, gt=0)
    local_model_dir: Optional[str] = None
    samples: int = Field(1, ge=1)  # runs of the stages per pair (score stability); 1: one greedy run
    concurrency: Optional[int] = Field(None, ge=1)  # calls in flight; None: 32 a server, 1 in process
    cache: bool = True
    cache_dir: Optional[str] = None
    modality: Modality = DEFAULT_MODALITY
    max_tokens: Optional[dict[str, int]] = None
    # caps and token budgets: "small_model" for a small model (in process, or served as in
    # the tests), "server" for a capable served judge; "auto" picks by backend
    decoding: Literal["auto", "server", "small_model"] = "auto"

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, **overrides: Any) -> "JudgeConfig":
        """Environment first, keyword arguments (when not None) over it."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, var in ENV_VARS.items():
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            if field in ("allow_remote_endpoint", "cache", "thinking"):
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
        from radmatch_audit.paths import cache_root

        return cache_root() / "judge"

    def stage_max_tokens(self) -> dict[str, int]:
        base = SMALL_MODEL_MAX_TOKENS if self.small_model_decoding else SERVER_MAX_TOKENS
        return {**base, **(self.max_tokens or {})}

    def build_judge(self):
        """Construct the backend. Heavy imports happen here, not at import time."""
        backend = self.resolved_backend
        if backend == "transformers":
            from radmatch_audit.judges.local import LocalTransformersJudge

            model_dir = Path(self.local_model_dir).expanduser() if self.local_model_dir else None
            return LocalTransformersJudge(
                model_dir, context_window=self.context_window, temperature=self.temperature
            )
        if not self.base_url:
            raise ValueError(
                f"the {backend!r} backend needs a server URL: pass --base-url or set RADMATCH_BASE_URL"
            )
        from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge

        judges = [
            OpenAICompatibleJudge(
                base_url=url,
                model=self.model,
                api_key=os.environ.get(self.api_key_env),
                backend=backend,
                timeout_s=self.timeout_s,
                temperature=self.temperature,
                thinking=self.thinking,
                context_window=self.context_window,
                allow_remote=self.allow_remote_endpoint,
            )
            for url in self.base_urls
        ]
        if len(judges) == 1:
            return judges[0]
        from radmatch_audit.judges.pool import JudgePool

        return JudgePool(judges)

    @property
    def base_urls(self) -> list[str]:
        """`base_url` may name several servers of the same model, comma-separated."""
        return [url.strip() for url in (self.base_url or "").split(",") if url.strip()]
