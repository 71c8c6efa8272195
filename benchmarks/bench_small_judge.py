"""Where the embedded SmolLM2 judge spends its time on a CPU: prefill and decoding.

    python benchmarks/bench_small_judge.py [--threads 1] [--context 4500] [--int8]

Prefills `--context` random tokens, then decodes 40 tokens one at a time on the key/value
cache (no grammar, no sampling): seconds for the prefill and milliseconds per decoded
token, at RadMatch's prompt size (instructions and exemplars are 2,000-5,500 tokens a
stage). `--int8` applies torch's dynamic int8 quantisation to the linear layers first.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=4500)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--int8", action="store_true")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from radmatch_audit.judges import smollm

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(smollm.ensure_hf_dir(), dtype=torch.float32).eval()
    if args.int8:
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    ids = torch.randint(100, 40000, (1, args.context), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        started = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        prefill = time.perf_counter() - started
        token = ids[:, -1:]
        started = time.perf_counter()
        for _ in range(args.tokens):
            model(input_ids=token, cache=cache, use_cache=True)
        decode = (time.perf_counter() - started) / args.tokens
    print(f"threads {args.threads}, context {args.context}{', int8' if args.int8 else ''}: "
          f"prefill {prefill:.1f} s ({args.context / prefill:.0f} tokens/s), "
          f"decode {1000 * decode:.0f} ms a token")


if __name__ == "__main__":
    main()
