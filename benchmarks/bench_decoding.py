"""The embedded judge's decoding against transformers' default way, on the same calls.

    python benchmarks/bench_decoding.py [--pairs 1] [--threads 1]

Runs the first `--pairs` example pairs (examples/pairs.jsonl) through RadMatch with the
embedded SmolLM2 judge, recording every call (answer cache off), then replays each call
the way transformers' `generate` decodes under a logits processor: a concatenating
`DynamicCache` (the prefix's cache copied in), transformers' SDPA attention (keys and
values repeated per query head whenever a mask is present: TRANSFORMERS_SDPA_FORCE_GQA,
which the judge sets while it computes, is not set here) and one token per forward
pass. Prints, per call and in total, the CPU seconds of each way, their ratio, the
forward passes, and whether the two answers are the same (greedy: they must be).
Both ways run in this one process, one after the other, so the ratio holds on a busy
machine too; the seconds do not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1, help="example pairs to run (1-3)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import os

    os.environ["RADMATCH_TORCH_THREADS"] = str(args.threads)
    import torch
    from transformers import DynamicCache

    from radmatch_audit.judges.config import JudgeConfig
    from radmatch_audit.judges import decoding
    from radmatch_audit.judges.local import LocalTransformersJudge
    from radmatch_audit.run.pipeline import Evaluator
    from radmatch_audit.core.records import PairInput

    judge = LocalTransformersJudge()
    calls: list[dict] = []

    class Recording:
        """The judge, with each call's messages, schema, answer and CPU time kept."""

        def __getattr__(self, name: str):
            return getattr(judge, name)

        async def generate(self, messages, schema, *, max_tokens):
            started = time.process_time()
            result = await judge.generate(messages, schema, max_tokens=max_tokens)
            calls.append({
                "messages": messages, "schema": schema, "max_tokens": max_tokens,
                "text": result.text, "cpu": time.process_time() - started,
                "steps": judge.last_call.steps, "tokens": judge.last_call.completion_tokens,
            })
            return result

    lines = (ROOT / "examples" / "pairs.jsonl").read_text().splitlines()[: args.pairs]
    pairs = [PairInput(**json.loads(line)) for line in lines]
    with Evaluator.from_config(JudgeConfig.from_env(cache=False), judge=Recording()) as evaluator:
        records = evaluator.evaluate(pairs)
    failed = [r.pair_id for r in records if r.error]

    model = judge._hf_model
    print(f"{'call':<10} {'tokens':>6} {'ours: s':>8} {'passes':>6} {'default: s':>10} "
          f"{'passes':>6} {'ratio':>6}  same answer")
    ours_total = default_total = 0.0
    same = 0
    for i, call in enumerate(calls):
        ids, prefix = judge._prefix(call["messages"])
        full = judge._encode(judge.prompt_text(call["messages"]))
        cache = DynamicCache(ddp_cache_data=[(layer.keys, layer.values) for layer in prefix.layers])
        started = time.process_time()
        with torch.inference_mode():
            decoded = decoding.decode(
                model, judge._grammar(call["schema"]), judge._grammar_backend.llg_tokenizer,
                cache, full[:, ids.shape[1]:], call["max_tokens"], fast_forward=False,
            )
        default_cpu = time.process_time() - started
        text = judge._tokenizer.decode(decoded.tokens, skip_special_tokens=True)
        same += text == call["text"]
        ours_total += call["cpu"]
        default_total += default_cpu
        stage = call["schema"].__name__.replace("Answer", "").lower()
        print(f"{i + 1:>2} {stage:<7} {call['tokens']:>6} {call['cpu']:>8.1f} {call['steps']:>6} "
              f"{default_cpu:>10.1f} {decoded.steps:>6} {default_cpu / call['cpu']:>6.2f}  "
              f"{'yes' if text == call['text'] else 'NO'}")
    print(f"total: ours {ours_total:.1f} s of CPU, transformers' default way {default_total:.1f} s: "
          f"{default_total / ours_total:.2f}x less CPU; the same answer in {same} of {len(calls)} calls"
          + (f"; failed pairs: {', '.join(failed)}" if failed else ""))
    asyncio.run(judge.aclose())


if __name__ == "__main__":
    main()
