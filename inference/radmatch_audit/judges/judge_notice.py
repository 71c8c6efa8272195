"""Which judge produced a result, and the notice that the embedded judge's are not clinical.

Every result (the metric's `compute()`, the reward, the CLI's summary) names its judge:
backend, model, and the judge servers by host and port only (a URL's path, user and query
may hold secrets; API keys never leave the environment). Results of the embedded small
judge also warn, once per process, that they are not clinical, as the dashboard's banner
does: a `NotClinicalWarning`, which Python prints on stderr.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from radmatch_audit.judges.smollm import MODEL_NAME as EMBEDDED_MODEL


class NotClinicalWarning(UserWarning):
    """The scores come from the embedded small judge: they only exercise the pipeline."""


NOT_CLINICAL = (
    f"these RadMatch scores come from the embedded small judge ({EMBEDDED_MODEL}), which "
    "only exercises the pipeline: its error counts are not clinical (it has counted 0 "
    "errors in a report that denies the reference's pleural effusion). For real scores use "
    "a judge server (serve/start_vllm.sh, then base_url / --base-url); what a capable judge reaches: "
    'README.md, "Agreement with radiologists"'
)

_warn_lock = threading.Lock()
_warned = False


def is_embedded_small(model: Optional[str]) -> bool:
    """True for the embedded small judge (as the dashboard tells it: by its model name)."""
    return bool(model) and EMBEDDED_MODEL.lower() in str(model).lower()


def endpoint_host(url: str) -> str:
    """`host:port` of a judge URL: no scheme, path, user or query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def judge_identity(judge: Any) -> dict[str, Any]:
    """{backend, model, endpoints (host:port each), embedded_small_judge} of a judge object."""
    members = getattr(judge, "judges", None) or [judge]  # a JudgePool's servers
    urls = [u for u in (getattr(j, "base_url", None) for j in members) if isinstance(u, str)]
    model = str(getattr(judge, "model", "") or "")
    return {
        "backend": str(getattr(judge, "backend", "") or ""),
        "model": model,
        "endpoints": [endpoint_host(u) for u in urls],
        "embedded_small_judge": is_embedded_small(model),
    }


def configured_identity(config: Any) -> dict[str, Any]:
    """What `judge_identity` will say of the judge `config` (a JudgeConfig) names, read
    from its fields alone: naming the judge must not load a model."""
    if config.is_small_local_model:
        model = Path(config.local_model_dir).expanduser().name if config.local_model_dir else EMBEDDED_MODEL
        endpoints: list[str] = []
    else:
        model = str(config.model or "")
        endpoints = [endpoint_host(u) for u in config.base_urls]
    return {
        "backend": config.resolved_backend,
        "model": model,
        "endpoints": endpoints,
        "embedded_small_judge": is_embedded_small(model),
    }


def describe(identity: dict[str, Any]) -> str:
    """One line naming the judge, for summaries."""
    where = f" at {', '.join(identity['endpoints'])}" if identity.get("endpoints") else ", in process"
    note = " (embedded small judge: not clinical)" if identity.get("embedded_small_judge") else ""
    return f"judge: {identity.get('backend') or '?'} / {identity.get('model') or '?'}{where}{note}"


def warn_not_clinical(identity: dict[str, Any], *, stacklevel: int = 2) -> bool:
    """Warn once per process when `identity` is the embedded small judge; True if it warned."""
    global _warned
    if not identity.get("embedded_small_judge"):
        return False
    with _warn_lock:
        if _warned:
            return False
        _warned = True
    warnings.warn(NOT_CLINICAL, NotClinicalWarning, stacklevel=stacklevel + 1)
    return True
