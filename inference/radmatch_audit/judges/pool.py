"""Several independent judge servers behind one judge: calls go where the least is waiting.

For users who outgrow one workstation without a router: `--base-url` takes several
comma-separated URLs of servers serving the same model. Each call goes to the healthy
server with the fewest calls outstanding. A server that fails the pre-flight, or fails
a call with a transient fault (down, reset, 5xx, timeout), is drained for `cooldown_s`
and the call moves at once to another server; when every server has failed this call,
the fault goes to the usual retry path. One server's GPU parallelism is vLLM's own
(tensor and data parallelism, serve/start_vllm.sh); this only spreads over machines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from pydantic import BaseModel

from radmatch_audit.judges.base import JudgeResult, JudgeUnavailable, Message, TransientJudgeError

log = logging.getLogger(__name__)


class JudgePool:
    """Judges of the same model on different servers, used as one."""

    def __init__(self, judges: list[Any], *, cooldown_s: float = 30.0) -> None:
        if not judges:
            raise ValueError("The 'judges' parameter of JudgePool must hold at least one judge")
        if len({judge.model for judge in judges}) != 1:
            raise ValueError("The judges of a JudgePool must serve the same model")
        self.judges = judges
        self.backend = judges[0].backend
        self.model = judges[0].model
        windows = [j.context_window for j in judges if j.context_window]
        self.context_window: Optional[int] = min(windows) if windows else None
        self.settings = getattr(judges[0], "settings", None)
        self.loaded_model: Optional[str] = None  # as the pre-flight found it (vLLM's `root`)
        self.max_model_len: Optional[int] = None
        self.cooldown_s = cooldown_s
        self._outstanding = [0] * len(judges)
        self._drained_until = [0.0] * len(judges)
        self._serving = list(judges)  # those that passed the pre-flight

    def _pick(self, tried: set[int]) -> Optional[int]:
        now = time.monotonic()
        candidates = [i for i in range(len(self.judges)) if i not in tried]
        healthy = [i for i in candidates if self._drained_until[i] <= now]
        pool = healthy or candidates  # all drained: try the one drained longest ago
        if not pool:
            return None
        key = (lambda i: self._outstanding[i]) if healthy else (lambda i: self._drained_until[i])
        return min(pool, key=key)

    def _drain(self, i: int, why: str) -> None:
        self._drained_until[i] = time.monotonic() + self.cooldown_s
        log.warning("judge server %s drained for %.0f s: %s", self.judges[i].base_url, self.cooldown_s, why)

    async def generate(self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int) -> JudgeResult:
        tried: set[int] = set()
        last: Optional[TransientJudgeError] = None
        while True:
            i = self._pick(tried)
            if i is None:  # every server failed this call: the retry path decides
                assert last is not None
                raise last
            tried.add(i)
            self._outstanding[i] += 1
            try:
                return await self.judges[i].generate(messages, schema, max_tokens=max_tokens)
            except TransientJudgeError as exc:
                self._drain(i, type(exc).__name__)
                last = exc
            finally:
                self._outstanding[i] -= 1

    def count_tokens(self, messages: list[Message]) -> int:
        return self.judges[0].count_tokens(messages)

    async def check(self) -> None:
        """Every server is checked; the run goes on while at least one serves."""
        results = await asyncio.gather(*(j.check() for j in self.judges), return_exceptions=True)
        failures = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
        for i, exc in failures:
            if not isinstance(exc, JudgeUnavailable):
                raise exc
            self._drain(i, str(exc))
        if len(failures) == len(self.judges):
            raise JudgeUnavailable("no judge server answers: " + "; ".join(str(e) for _, e in failures))
        serving = [j for i, j in enumerate(self.judges) if i not in dict(failures)]
        loaded = {j.loaded_model for j in serving if getattr(j, "loaded_model", None)}
        if len(loaded) > 1:
            raise JudgeUnavailable(
                f"the judge servers serve {self.model!r} from different weights {sorted(loaded)}; "
                "one run needs one judge"
            )
        self.loaded_model = loaded.pop() if loaded else None
        lengths = [j.max_model_len for j in serving if getattr(j, "max_model_len", None)]
        self.max_model_len = min(lengths) if lengths else None
        windows = [j.context_window for j in self.judges if j.context_window]
        self.context_window = min(windows) if windows else None
        self.settings = getattr(serving[0], "settings", None)
        # one model: the special tokens any server listed reach every server as plain text
        self.control_tokens = tuple(sorted({t for j in serving for t in getattr(j, "control_tokens", ())}))
        self._serving = serving

    async def calibrate(self, messages: list[Message]) -> None:
        """Each server that passed the pre-flight learns its tokens' rate (`calibrate`)."""
        await asyncio.gather(*(j.calibrate(messages) for j in self._serving if hasattr(j, "calibrate")))

    async def aclose(self) -> None:
        await asyncio.gather(*(j.aclose() for j in self.judges))
