"""Prefilled prompt prefixes on disk, so that a run does not prefill what an earlier one did.

On 2 busy cores the three stages' prefixes (11,700 SmolLM2 tokens) take minutes to
prefill; `scripts/setup.sh` fills the store for the default modality. A file is named
by the hash of the model's identity and the prefix text, holds the prefix's token ids
(checked on load) and its keys and values (safetensors: loading runs no code), and
only the `PREFIX_FILES` most recently used are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# prefilled prefixes kept on disk for the embedded CPU judge (about 0.2 GB each, fp32)
PREFIX_FILES = 6


class PrefixStore:
    """The store of one model's prefixes in `folder`.

    The store only saves time, so it never fails a call: a file that cannot be read
    (truncated, corrupt, of another shape) is treated as missing, prefilled again and
    replaced; reading needs no write access (a read-only folder is read); and a save
    that fails (a full or read-only disk) is warned about once, after which `writable`
    is False and the judge keeps its prefixes in memory for the run.
    """

    def __init__(self, folder: Path, model_identity: str) -> None:
        self.folder = folder
        self.identity = model_identity
        self.writable = True  # until a save fails

    def _path(self, prefix_text: str) -> Path:
        digest = hashlib.sha256(f"{self.identity}\0{prefix_text}".encode()).hexdigest()
        return self.folder / f"{digest[:32]}.safetensors"

    def load(self, prefix_text: str, ids: Any, config: Any) -> Any:
        """The stored cache of `prefix_text`, or None (absent, unreadable, or other ids)."""
        import torch
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        from transformers import DynamicCache

        path = self._path(prefix_text)
        try:
            tensors = load_file(path)
            layers = len([k for k in tensors if k.startswith("k.")])
            if not torch.equal(tensors["ids"], ids.cpu()):
                return None
            kv = [(tensors[f"k.{i}"], tensors[f"v.{i}"]) for i in range(layers)]
            cache = DynamicCache(ddp_cache_data=kv, config=config)
            if len(cache.layers) != layers or cache.get_seq_length() != ids.shape[1]:
                raise ValueError("keys and values of another shape")
        except FileNotFoundError:
            return None
        except (OSError, KeyError, ValueError, RuntimeError, SafetensorError) as exc:
            log.info("a stored prefix could not be read (%s): prefilled again", exc)
            return None
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass  # a read-only store is read all the same
        return cache

    def save(self, prefix_text: str, ids: Any, cache: Any) -> bool:
        """Keep the prefix on disk; False when it could not be (then `writable` is False)."""
        from safetensors import SafetensorError
        from safetensors.torch import save_file

        if not self.writable:
            return False
        tensors = {"ids": ids.cpu().contiguous()}
        for i, layer in enumerate(cache.layers):
            tensors[f"k.{i}"] = layer.keys.contiguous()
            tensors[f"v.{i}"] = layer.values.contiguous()
        path = self._path(prefix_text)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            save_file(tensors, partial)
            os.replace(partial, path)
            kept = sorted(self.folder.glob("*.safetensors"), key=lambda f: f.stat().st_mtime)
            for stale in kept[:-PREFIX_FILES]:
                stale.unlink(missing_ok=True)
        except (OSError, SafetensorError) as exc:  # safetensors reports ENOSPC as its own error
            self.writable = False
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass
            log.warning(
                "could not keep prefilled prompt prefixes in %s (%s): they are kept in memory "
                "for this run, and a later run prefills them again", self.folder, exc,
            )
            return False
        return True


def model_identity(model_dir: Path) -> str:
    """What a stored prefix depends on: the weights (by name, size and time), dtype, versions."""
    import torch
    import transformers

    weights = sorted(Path(model_dir).glob("*.safetensors"))
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in weights]
    return json.dumps([str(Path(model_dir).resolve()), stats, "float32", torch.__version__,
                       transformers.__version__])
