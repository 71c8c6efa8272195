"""Fault mapping alone: each reply or failure a judge server gives -> its typed JudgeError."""

from __future__ import annotations

import asyncio
import json

import pytest

from radmatch_audit.judges.base import JudgeError, TransientJudgeError
from radmatch_audit.judges.faults import (
    ECHOED,
    KEY_HINT,
    retry_after,
    status_error,
    unreachable_error,
)
from radmatch_audit.judges.transport import Unreachable

PAIR = json.dumps({"reference": "Small left pleural effusion.", "candidate": "No effusion."})


def error_for(status: int, message: str = "injected", headers: dict | None = None, **kwargs) -> JudgeError:
    body = json.dumps({"error": {"message": message}}).encode()
    return status_error(status, headers or {}, body, PAIR, **kwargs)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
def test_busy_and_server_errors_are_transient(status):
    error = error_for(status)
    assert isinstance(error, TransientJudgeError)
    assert str(error) == f"HTTP {status} from the judge server: injected"


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_client_errors_are_final(status):
    error = error_for(status)
    assert type(error) is JudgeError and str(error) == f"HTTP {status} from the judge server: injected"


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_says_how_to_set_it_and_hides_the_servers_words(status):
    error = error_for(status, "key sk-live-123 is invalid")
    assert type(error) is JudgeError and KEY_HINT in str(error) and "sk-live" not in str(error)


def test_a_redirect_is_final_and_names_where_it_pointed():
    error = error_for(307, headers={"Location": "http://elsewhere.example/v1"})
    assert type(error) is JudgeError
    assert "'http://elsewhere.example/v1'" in str(error) and "never follows" in str(error)
    assert "no Location" in str(error_for(302))


def test_retry_after_is_kept_as_seconds_or_from_a_date():
    assert error_for(429, headers={"Retry-After": "7"}).retry_after == 7.0
    assert error_for(429).retry_after is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date gone by: now
    assert retry_after("soon") is None and retry_after("-3") == 0.0


def test_a_context_overflow_names_the_servers_context():
    error = error_for(400, "This model's maximum context length is 8192 tokens", context_note=" of 8192 tokens")
    assert type(error) is JudgeError
    assert str(error).startswith("HTTP 400 from the judge server: the prompt and answer budget "
                                 "exceed its context of 8192 tokens (")


def test_a_grammar_compile_timeout_says_which_limit_to_raise():
    assert "--compile-limit" in str(error_for(400, "Grammar compilation timed out after 10s"))


def test_a_server_message_quoting_the_pair_is_left_out():
    quoted = f"could not parse {json.dumps(PAIR)}"
    for status in (400, 500):
        error = error_for(status, quoted)
        assert str(error) == f"HTTP {status} from the judge server: {ECHOED}"
        assert "effusion" not in str(error).lower()


def test_no_reply_is_transient_and_says_whether_it_was_late():
    late = unreachable_error(Unreachable(asyncio.TimeoutError(), 300.2), 300.0)
    assert isinstance(late, TransientJudgeError)
    assert str(late) == "no answer from the judge server within 300 s (timeout)"
    refused = unreachable_error(Unreachable(ConnectionRefusedError("refused"), 0.04), 300.0)
    assert isinstance(refused, TransientJudgeError)
    assert str(refused) == ("the connection to the judge server failed after 0.0 s "
                            "(ConnectionRefusedError: refused)")
