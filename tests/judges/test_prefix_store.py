"""The on-disk store of prefilled prefixes, alone: no model, hand-made keys and values.

The store only saves time, so nothing it meets on disk may fail a call: an unreadable
file reads as missing, a read-only folder is read, a full disk turns saving off.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from radmatch_audit.judges import prefix_store
from radmatch_audit.judges.prefix_store import PREFIX_FILES, PrefixStore

CONFIG = transformers.LlamaConfig(
    num_hidden_layers=2, hidden_size=16, num_attention_heads=2, num_key_value_heads=2, vocab_size=50,
)
PREFIX = "<|system|>Extract every finding.\n"


def prefilled(tokens: int = 5, seed: int = 0):
    """Token ids and a two-layer cache of keys and values for them, as a prefill leaves them."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.arange(tokens).unsqueeze(0) + seed
    kv = [(torch.randn(1, 2, tokens, 8, generator=generator),
           torch.randn(1, 2, tokens, 8, generator=generator)) for _ in range(2)]
    return ids, transformers.DynamicCache(ddp_cache_data=kv)


def same_cache(a, b) -> bool:
    return all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
               for x, y in zip(a.layers, b.layers, strict=True))


def test_a_saved_prefix_loads_back_for_its_ids_and_model_only(tmp_path):
    ids, cache = prefilled()
    store = PrefixStore(tmp_path, "model-a")
    assert store.save(PREFIX, ids, cache)
    loaded = store.load(PREFIX, ids, CONFIG)
    assert same_cache(loaded, cache) and loaded.get_seq_length() == 5
    assert store.load(PREFIX, ids + 1, CONFIG) is None  # other token ids
    assert store.load("<|system|>Other instructions.\n", ids, CONFIG) is None
    assert PrefixStore(tmp_path, "model-b").load(PREFIX, ids, CONFIG) is None  # other weights


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_an_unreadable_file_reads_as_missing_and_a_save_replaces_it(tmp_path, damage, caplog):
    ids, cache = prefilled()
    store = PrefixStore(tmp_path, "model-a")
    store.save(PREFIX, ids, cache)
    (path,) = tmp_path.glob("*.safetensors")
    whole = path.read_bytes()
    path.write_bytes({"truncated": whole[: len(whole) // 2], "garbage": b"\x07" * 4096,
                      "empty": b""}[damage])
    with caplog.at_level(logging.INFO, logger=prefix_store.__name__):
        assert store.load(PREFIX, ids, CONFIG) is None
    assert "could not be read" in caplog.text and PREFIX not in caplog.text
    assert store.save(PREFIX, ids, cache) and path.read_bytes() == whole
    assert same_cache(store.load(PREFIX, ids, CONFIG), cache)


def test_keys_and_values_of_another_shape_read_as_missing(tmp_path):
    ids, cache = prefilled(tokens=5)
    store = PrefixStore(tmp_path, "model-a")
    store.save(PREFIX, ids, cache)
    (path,) = tmp_path.glob("*.safetensors")
    tensors = safetensors_torch.load_file(path)
    tensors["k.0"] = tensors["k.0"][:, :, :3].contiguous()  # fewer positions than ids
    tensors["v.0"] = tensors["v.0"][:, :, :3].contiguous()
    safetensors_torch.save_file(tensors, path)
    assert store.load(PREFIX, ids, CONFIG) is None


def test_only_the_most_recently_used_files_are_kept(tmp_path):
    store = PrefixStore(tmp_path, "model-a")
    texts = [f"<|system|>Instructions {i}.\n" for i in range(PREFIX_FILES + 2)]
    for n, text in enumerate(texts):
        before = set(tmp_path.glob("*.safetensors"))
        ids, cache = prefilled(seed=n)
        store.save(text, ids, cache)
        (saved,) = set(tmp_path.glob("*.safetensors")) - before
        os.utime(saved, (1000 + n, 1000 + n))  # saved in this order (the clock's tick is coarse)
        if n == 1:
            store.load(texts[0], prefilled(seed=0)[0], CONFIG)  # read: the most recent again
    assert len(list(tmp_path.glob("*.safetensors"))) == PREFIX_FILES
    assert store.load(texts[0], prefilled(seed=0)[0], CONFIG) is not None
    assert store.load(texts[1], prefilled(seed=1)[0], CONFIG) is None
    assert store.load(texts[2], prefilled(seed=2)[0], CONFIG) is None


def refuse_writes_into(monkeypatch, folder: Path) -> None:
    """Every write into `folder` raises EROFS, as on a read-only mount (root ignores modes)."""
    def refuse(original):
        def guarded(path, *args, **kwargs):
            if Path(path).resolve().is_relative_to(folder.resolve()):
                raise OSError(errno.EROFS, "Read-only file system", str(path))
            return original(path, *args, **kwargs)
        return guarded

    for name in ("utime", "replace", "unlink", "mkdir"):
        monkeypatch.setattr(os, name, refuse(getattr(os, name)))
    save_file = safetensors_torch.save_file
    monkeypatch.setattr(safetensors_torch, "save_file",
                        lambda tensors, filename, *a, **k: refuse(lambda p: save_file(tensors, p))(filename))


def test_a_read_only_folder_is_read_and_saving_stops_after_one_warning(tmp_path, monkeypatch, caplog):
    ids, cache = prefilled()
    PrefixStore(tmp_path, "model-a").save(PREFIX, ids, cache)
    refuse_writes_into(monkeypatch, tmp_path)
    store = PrefixStore(tmp_path, "model-a")
    assert same_cache(store.load(PREFIX, ids, CONFIG), cache)  # its time is not updated: still read
    other_ids, other = prefilled(seed=3)
    with caplog.at_level(logging.WARNING, logger=prefix_store.__name__):
        assert not store.save("<|system|>New.\n", other_ids, other)
        assert not store.save("<|system|>Newer.\n", other_ids, other)
    assert store.writable is False
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "kept in memory for this run" in warnings[0].getMessage()
    assert len(list(tmp_path.iterdir())) == 1


def test_a_full_disk_leaves_no_partial_file(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    def full_disk(tensors, filename, *args, **kwargs):
        Path(filename).write_bytes(b"\0" * 64)  # what fitted before the disk filled up
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors_torch, "save_file", full_disk)
    ids, cache = prefilled()
    store = PrefixStore(tmp_path, "model-a")
    assert not store.save(PREFIX, ids, cache) and store.writable is False
    assert not list(tmp_path.iterdir())
