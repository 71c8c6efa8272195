"""Shared fixtures: the real vLLM server (tests/vllm_server.py), the embedded judge, one answer store."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["vllm_server"]  # the real vLLM server fixture (tests/vllm_server.py)

# Hugging Face libraries (evaluate, datasets, transformers, huggingface_hub) write their
# caches under ~/.cache/huggingface unless told otherwise; `radmatch-audit install-metric`
# writes into evaluate's modules cache. The tests get one throw-away HF home for the
# session, set here, before any test module imports those libraries (they read the
# variables at import). RadMatch's own caches (the embedded SmolLM2 model and the judge's
# answers, ~/.cache/radmatch or RADMATCH_CACHE_DIR) are not Hugging Face's and stay where
# they are, so the slow tests keep their model. RADMATCH_TEST_HF_HOME keeps one elsewhere.
HF_CACHE_VARIABLES = (
    "HF_MODULES_CACHE", "HF_DATASETS_CACHE", "HF_EVALUATE_CACHE", "HF_METRICS_CACHE",
    "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE",
)
_SESSION_HF_HOME: Path | None = None


def pytest_configure(config) -> None:
    global _SESSION_HF_HOME
    kept = os.environ.get("RADMATCH_TEST_HF_HOME")
    if kept:
        home = Path(kept)
        home.mkdir(parents=True, exist_ok=True)
    else:
        home = _SESSION_HF_HOME = Path(tempfile.mkdtemp(prefix="radmatch-tests-hf-"))
    os.environ["HF_HOME"] = str(home)
    for name in HF_CACHE_VARIABLES:
        os.environ.pop(name, None)  # each follows HF_HOME
    os.environ["HF_MODULES_CACHE"] = str(home / "modules")  # named too: install-metric reads it


def pytest_unconfigure(config) -> None:
    if _SESSION_HF_HOME is not None:
        shutil.rmtree(_SESSION_HF_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_answer_cache(tmp_path_factory) -> Path:
    """One judge-answer store for every slow test of the session (test_reward too):
    the session's base temp dir is the same for all modules. Set
    RADMATCH_TEST_JUDGE_CACHE to keep answers across sessions when iterating locally."""
    override = os.environ.get("RADMATCH_TEST_JUDGE_CACHE")
    path = Path(override) if override else tmp_path_factory.getbasetemp() / "radmatch-judge-answers"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def local_judge():
    from radmatch_audit.judges.local import LocalTransformersJudge

    return LocalTransformersJudge()
