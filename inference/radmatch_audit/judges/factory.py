"""The judge a `JudgeConfig` names, built beside the backends it chooses from.

Heavy imports (torch, transformers, openai) happen in `build_judge`, never at import.
The config is read by its fields only, so that this module imports nothing of
`radmatch_audit.judges.config` (whose `JudgeConfig.build_judge()` calls it): no loop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from radmatch_audit.judges.base import Judge


def build_judge(config: Any) -> Judge:
    """The judge `config` (a `radmatch_audit.judges.config.JudgeConfig`) names: the in-process
    judge, one server's judge, or a pool over several servers."""
    backend = config.resolved_backend
    if backend == "transformers":
        from radmatch_audit.judges.local import LocalTransformersJudge

        model_dir = Path(config.local_model_dir).expanduser() if config.local_model_dir else None
        return LocalTransformersJudge(
            model_dir, context_window=config.context_window, temperature=config.temperature
        )
    if not config.base_url:
        raise ValueError(
            f"the {backend!r} backend needs a server URL: pass --base-url or set RADMATCH_BASE_URL"
        )
    from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge

    judges = [
        OpenAICompatibleJudge(
            base_url=url,
            model=config.model,
            api_key=os.environ.get(config.api_key_env),  # read now, never stored
            backend=backend,
            timeout_s=config.timeout_s,
            temperature=config.temperature,
            thinking=config.thinking,
            context_window=config.context_window,
            allow_remote=config.allow_remote_endpoint,
        )
        for url in config.base_urls
    ]
    if len(judges) == 1:
        return judges[0]
    from radmatch_audit.judges.pool import JudgePool

    return JudgePool(judges)
