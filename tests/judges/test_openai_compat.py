"""judges/openai_compat.py: the pre-flight refuses a base URL without /v1 against a server that
serves the OpenAI API only under /v1 (vLLM), naming the URL to use."""

from __future__ import annotations

import asyncio

import pytest

from radmatch_audit.judges.base import JudgeUnavailable
from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
from radmatch_audit.testing.fake_server import StubServer


def preflight(base_url: str) -> None:
    async def check() -> None:
        judge = OpenAICompatibleJudge(base_url=base_url, model="stub-judge")
        try:
            await judge.check()
        finally:
            await judge.aclose()

    asyncio.run(check())


def test_a_base_url_without_v1_is_refused_naming_the_v1_url():
    with StubServer(v1_only=True) as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(JudgeUnavailable) as caught:
            preflight(root)
        preflight(server.base_url)  # the suggested URL passes
    message = str(caught.value)
    assert "404" in message and f"--base-url {root}/v1" in message


def test_a_server_that_lists_no_models_anywhere_still_passes():
    with StubServer(v1_only=True) as server:  # /other/models is a 404, and so is /other/v1/models
        preflight(server.base_url.removesuffix("/v1") + "/other")
