"""cli.judge_options: the judge's flags come from JudgeConfig's fields, and flags win over RADMATCH_*."""

from __future__ import annotations

import argparse

from radmatch_audit.cli.judge_options import add_judge_arguments, judge_config
from radmatch_audit.judges.config import JudgeConfig


def parser(run_options: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_judge_arguments(p, "judge", run_options=run_options)
    return p


def flags(p: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {action.dest: action.option_strings for action in p._actions}


def test_every_judge_config_field_with_a_flag_has_it():
    run_flags, judge_flags = flags(parser(True)), flags(parser(False))
    for name, option in JudgeConfig.options().items():
        if option.flag is None:
            assert name not in run_flags
            continue
        expected = option.flag or "--" + name.replace("_", "-")
        assert expected in run_flags[name]
        assert (name in judge_flags) is not option.evaluate_only
    assert run_flags["adjudication"] == ["--no-adjudication"]
    assert run_flags["timeout_s"] == ["--timeout"]
    assert run_flags["thinking"] == ["--thinking", "--no-thinking"]


def test_flag_kinds_follow_the_field_types():
    p = parser(True)
    args = p.parse_args(["--no-adjudication", "--no-cache", "--thinking", "--retries", "5",
                         "--timeout", "2.5", "--backend", "vllm"])
    assert (args.adjudication, args.cache, args.thinking) == (False, False, True)
    assert (args.retries, args.timeout_s, args.backend) == (5, 2.5, "vllm")
    unset = p.parse_args([])
    assert all(getattr(unset, name) is None for name in ("adjudication", "cache", "thinking", "retries"))
    assert p.parse_args(["--no-thinking"]).thinking is False


def test_judge_config_reads_flags_over_the_environment(monkeypatch):
    monkeypatch.setenv("RADMATCH_MODEL", "env-model")
    monkeypatch.setenv("RADMATCH_RETRIES", "7")
    p = parser(True)
    from_env = judge_config(p.parse_args([]))
    assert (from_env.model, from_env.retries, from_env.adjudication) == ("env-model", 7, True)
    given = judge_config(p.parse_args(["--model", "flag-model", "--no-adjudication"]))
    assert (given.model, given.retries, given.adjudication) == ("flag-model", 7, False)
