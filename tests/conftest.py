"""Shared fixtures: the real vLLM server (tests/vllm_server.py), the embedded judge, one answer store."""

import os
from pathlib import Path

import pytest

pytest_plugins = ["vllm_server"]  # the real vLLM server fixture (tests/vllm_server.py)


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
