#!/usr/bin/env python3
"""How long a judge server takes to compile RadMatch's three answer schemas.

vLLM compiles each JSON schema a request names once (then caches it): the Outlines
backend builds a regex and then an index over the whole vocabulary, xgrammar a grammar
with a token-mask cache. Both costs grow with the vocabulary, so this measures them
with a vocabulary of Gemma 4's size (262,144 tokens), made from SmolLM2's tokens
(decoded as vLLM decodes them) and pairs of them until it has that many: a tokenizer
of that size with ordinary word pieces, not Gemma's own.

The schemas are the ones the client sends (`structured_outputs.json`, built by
Outlines from the answer models) with the served list caps (`SERVER_LIMITS`), every
free-text string either capped at its canonical length (`--strings bounded`, as
served) or free (`--strings free`, as served before). Each
compile runs in its own process with a time limit. Each exemplar answer of the stage
(fewshots/*/STAGE.json) is then checked against the compiled grammar: what the
prompts teach must stay expressible.

    python benchmarks/bench_grammar_compile.py --backend xgrammar --strings both
    python benchmarks/bench_grammar_compile.py --backend outlines --stages extract --timeout 900

xgrammar is not a RadMatch dependency: run it with a python that has it
(`pip install xgrammar==0.2.8`, the version vLLM 0.33.0 pins, in a scratch venv).
The compiles are CPU-heavy (minutes each with Outlines): run them once, on an idle
machine if the figure is to be compared.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "inference"))

GEMMA4_VOCAB = 262_144
STAGES = ("extract", "match", "grade")


def served_schema(stage: str, bounded_strings: bool) -> str:
    """The JSON schema the client sends for `stage`, as vLLM receives it (a JSON string)."""
    from outlines.models.vllm import VLLMTypeAdapter

    from radmatch_audit.core.schemas import CANONICAL_LIMITS, SERVER_LIMITS, answer_models

    strings = ("text", "quote", "unit", "reasoning", "indication")
    # the served caps with every free-text string capped at its canonical length, or free
    limits = replace(SERVER_LIMITS, **{
        name: getattr(CANONICAL_LIMITS, name) if bounded_strings else None for name in strings
    })
    model = answer_models(limits).for_stage(stage)
    return json.dumps(VLLMTypeAdapter().format_output_type(model)["structured_outputs"]["json"])


def synthetic_vocabulary(size: int) -> tuple[list[bytes], int]:
    """`size` distinct token byte strings (index = token id) and the EOS id."""
    from transformers import AutoTokenizer

    from radmatch_audit.judges import smollm

    tokenizer = AutoTokenizer.from_pretrained(smollm.ensure_hf_dir())
    special = set(tokenizer.all_special_tokens)
    pieces: list[bytes] = []
    seen: set[bytes] = set()
    for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
        if token in special:
            continue
        text = tokenizer.convert_tokens_to_string([token]).encode("utf-8", "surrogatepass")
        if text and text not in seen:
            seen.add(text)
            pieces.append(text)
    base = list(pieces)
    rng = random.Random(0)
    while len(pieces) < size - 1:
        text = rng.choice(base) + rng.choice(base)
        if text not in seen:
            seen.add(text)
            pieces.append(text)
    pieces.append(b"</s>")  # the EOS token, last
    return pieces, len(pieces) - 1


def exemplar_answers(stage: str) -> list[str]:
    """Every exemplar answer of `stage`, as compact JSON (no whitespace)."""
    answers = []
    for path in sorted((REPO / "fewshots").glob(f"*/{stage}.json")):
        for exemplar in json.loads(path.read_text())["exemplars"]:
            answers.append(json.dumps(exemplar["output"], separators=(",", ":"), ensure_ascii=False))
    return answers


def compile_outlines(schema: str, vocab: list[bytes], eos: int) -> tuple[float, object]:
    import outlines_core as oc
    from outlines_core.json_schema import build_regex_from_schema

    mapping: dict[bytes, list[int]] = {}
    for token_id, text in enumerate(vocab):
        if token_id != eos:
            mapping.setdefault(text, []).append(token_id)
    vocabulary = oc.Vocabulary(eos, mapping)
    regex = build_regex_from_schema(schema)  # what vLLM's outlines backend does
    started = time.perf_counter()
    oc.Index(regex, vocabulary)
    took = time.perf_counter() - started

    def accepts(answer: str) -> bool:
        return re.fullmatch(regex, answer) is not None

    return took, accepts


def compile_xgrammar(schema: str, vocab: list[bytes], eos: int) -> tuple[float, object]:
    import xgrammar as xgr

    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, vocab_size=len(vocab),
                             stop_token_ids=[eos])
    compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
    started = time.perf_counter()
    # as vLLM 0.33 with structured-outputs-config disable_any_whitespace=true
    compiled = compiler.compile_json_schema(schema, any_whitespace=False, separators=(",", ":"))
    took = time.perf_counter() - started

    accepts_memory = {"memory_mb": round(compiled.memory_size_bytes / 2**20, 1)}

    def accepts(answer: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(answer) and matcher.accept_token(eos)  # complete

    accepts.extra = accepts_memory  # the compiled grammar's size: vLLM caches 512 MB of them
    return took, accepts


def _one(backend: str, stage: str, bounded: bool, vocab_size: int, queue: mp.Queue) -> None:
    vocab, eos = synthetic_vocabulary(vocab_size)
    schema = served_schema(stage, bounded)
    compile_fn = compile_outlines if backend == "outlines" else compile_xgrammar
    took, accepts = compile_fn(schema, vocab, eos)
    answers = exemplar_answers(stage)
    accepted = sum(1 for a in answers if accepts(a))
    queue.put({"seconds": round(took, 2), "accepted": accepted, "exemplars": len(answers),
               **getattr(accepts, "extra", {})})


def _cpu_seconds(pid: int) -> float | None:
    """CPU time a process has used so far (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)
    except (OSError, IndexError, ValueError):
        return None


def measure(backend: str, stage: str, bounded: bool, vocab_size: int, timeout: float) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_one, args=(backend, stage, bounded, vocab_size, queue))
    started = time.perf_counter()
    proc.start()
    proc.join(timeout)
    row = {"backend": backend, "stage": stage, "strings": "bounded" if bounded else "free",
           "vocab": vocab_size}
    if proc.is_alive():
        cpu = _cpu_seconds(proc.pid)
        proc.terminate()
        proc.join()
        return {**row, "seconds": None, "cpu_s": cpu,
                "note": f"not done after {timeout:g} s (stopped)"}
    if queue.empty():
        return {**row, "seconds": None, "note": f"failed (exit {proc.exitcode})"}
    result = queue.get()
    return {**row, **result, "wall_s": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["outlines", "xgrammar"], required=True)
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated (default: all)")
    parser.add_argument("--strings", choices=["free", "bounded", "both"], default="free",
                        help="free-text strings capped (as served), free, or both")
    parser.add_argument("--vocab-size", type=int, default=GEMMA4_VOCAB)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per compile")
    parser.add_argument("--json", type=Path, help="append one JSON line per compile here")
    args = parser.parse_args(argv)
    bounds = {"free": [False], "bounded": [True], "both": [False, True]}[args.strings]
    for stage in args.stages.split(","):
        for bounded in bounds:
            row = measure(args.backend, stage, bounded, args.vocab_size, args.timeout)
            row["cpus"] = os.cpu_count()
            print(json.dumps(row), flush=True)
            if args.json:
                with args.json.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
