"""The in-process judge's prefix cache, its transformers floor and its GPU placement.

A tiny random Llama-shaped model is built here from a config, with a byte-level BPE
tokenizer that adds a BOS to every text (as Gemma's and Llama's do; SmolLM2's adds
none, which is why a one-token misalignment went unseen): reusing a prefilled prefix
must give the model exactly what a full prefill gives it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("outlines")

from radmatch_audit.judges import local
from radmatch_audit.judges.local import LocalTransformersJudge
from radmatch_audit.judges.local_model import (
    GPU_HEADROOM,
    bf16_weight_bytes,
    check_transformers,
    gpu_spill_problem,
    spilled_modules,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CORPUS = [
    "Findings: the heart is mildly enlarged. No pleural effusion.",
    '{"findings": [{"text": "Cardiomegaly.", "clinical_status": "abnormal"}]}',
    "You are a radiologist. Extract every finding of the report as JSON.",
] * 20


@pytest.fixture(scope="module")
def bos_model_dir(tmp_path_factory) -> Path:
    """A random 2-layer Llama and a tokenizer that prepends <s> to every text."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-llama-bos")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=400, special_tokens=["<s>", "</s>"])
    bos, eos = bpe.token_to_id("<s>"), bpe.token_to_id("</s>")
    bpe.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    assert tokenizer("No effusion.")["input_ids"][0] == bos  # the point of this model
    tokenizer.save_pretrained(folder)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def judge(bos_model_dir) -> LocalTransformersJudge:
    return LocalTransformersJudge(bos_model_dir, model_name="tiny-llama-bos", device="cpu")


def messages(system: str = "You are a radiologist. Extract every finding.") -> list[dict]:
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "Findings: the heart is mildly enlarged."},
    ]


def next_token_logits(judge: LocalTransformersJudge, msgs: list[dict], *, reuse: bool):
    """The logits after the whole prompt, as Outlines feeds it, with or without the
    prefilled prefix."""
    full = judge._encode(judge.prompt_text(msgs))
    with torch.inference_mode():
        if not reuse:
            return judge._hf_model(input_ids=full).logits[0, -1]
        cached = judge._prefilled(msgs)
        assert cached is not None, "the prefix was not reused"
        n = cached.get_seq_length()
        return judge._hf_model(input_ids=full[:, n:], cache=cached).logits[0, -1]


def test_prefix_reuse_gives_the_logits_of_a_full_prefill(judge):
    msgs = messages()
    assert judge._encode(judge.prompt_text(msgs))[0, 0] == judge._tokenizer.bos_token_id
    reused = next_token_logits(judge, msgs, reuse=True)
    full = next_token_logits(judge, msgs, reuse=False)
    assert torch.allclose(reused, full, atol=1e-4), (reused - full).abs().max()
    # the cached prefix starts with the BOS the model is given
    (ids, _), = [v for k, v in judge._prefixes.items() if k.startswith("<|system|>You are")]
    assert ids[0, 0] == judge._tokenizer.bos_token_id


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # as RadMatch's answer models: no other keys

    label: Literal["normal", "abnormal", "uncertain", "critical"]
    urgent: bool
    side: Literal["left", "right", "both", "none"]


def test_prefix_reuse_gives_the_answer_of_a_full_prefill(judge, monkeypatch):
    msgs = messages("Say whether the finding is abnormal, and on which side.")
    reused = asyncio.run(judge.generate(msgs, Verdict, max_tokens=40))
    monkeypatch.setattr(judge, "_prefilled", lambda m, times=None, room=0, full=None: None)  # a full prefill every call
    full = asyncio.run(judge.generate(msgs, Verdict, max_tokens=40))
    assert reused.text == full.text  # greedy: the same logits give the same answer
    assert reused.text.startswith('{"label"')


def test_a_generation_leaves_the_stored_prefix_as_it_was(judge):
    """Calls share the prefix's tensors (no copy per call): a generation must not grow them."""
    msgs = messages("Say whether the finding is abnormal, and on which side.")
    first = asyncio.run(judge.generate(msgs, Verdict, max_tokens=40))
    (ids, cache), = [v for k, v in judge._prefixes.items() if "on which side" in k]
    assert cache.get_seq_length() == ids.shape[1]
    assert asyncio.run(judge.generate(msgs, Verdict, max_tokens=40)).text == first.text
    assert cache.get_seq_length() == ids.shape[1]
    timing = judge.last_call
    assert timing.completion_tokens > 0 and timing.prefix_tokens == ids.shape[1]


def test_the_answer_has_no_whitespace_between_json_tokens(judge):
    text = asyncio.run(judge.generate(messages("Say it."), Verdict, max_tokens=40)).text
    assert Verdict.model_validate_json(text)
    assert json.dumps(json.loads(text), separators=(",", ":")) == text


def test_a_prefix_prefilled_by_an_earlier_judge_is_read_from_disk(bos_model_dir, tmp_path, monkeypatch):
    msgs = messages("Instructions kept on disk.")
    first = LocalTransformersJudge(bos_model_dir, device="cpu", prefix_dir=tmp_path)
    first.prefill(msgs)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1
    later = LocalTransformersJudge(bos_model_dir, device="cpu", prefix_dir=tmp_path)
    monkeypatch.setattr(later._hf_model, "forward", None)  # any prefill would fail
    from_disk = later._prefilled(msgs)
    monkeypatch.undo()
    full = later._encode(later.prompt_text(msgs))
    n = from_disk.get_seq_length()
    with torch.inference_mode():
        reused = later._hf_model(input_ids=full[:, n:], cache=from_disk).logits[0, -1]
        fresh = later._hf_model(input_ids=full).logits[0, -1]
    assert torch.allclose(reused, fresh, atol=1e-4)


def test_a_stored_prefix_of_other_tokens_is_not_used(bos_model_dir, tmp_path):
    store = local.PrefixStore(tmp_path, "model-a")
    judge = LocalTransformersJudge(bos_model_dir, device="cpu", prefix_dir=tmp_path)
    text = "<|system|>Some prefix.\n"
    ids = judge._encode(text)
    with torch.inference_mode():
        cache = judge._hf_model(input_ids=ids, use_cache=True).cache
    store.save(text, ids, cache)
    assert store.load(text, ids, judge._hf_model.config).get_seq_length() == ids.shape[1]
    assert store.load(text, ids[:, :-1], judge._hf_model.config) is None  # other ids
    assert local.PrefixStore(tmp_path, "model-b").load(text, ids, judge._hf_model.config) is None


def test_the_prefix_cache_keeps_only_the_most_recent_prefixes(judge):
    judge._prefixes.clear()
    systems = [f"Instructions, version {i}." for i in range(judge.prefix_entries + 2)]
    for system in systems:
        judge._prefilled(messages(system))
    kept = [text for text in judge._prefixes]
    assert len(kept) == judge.prefix_entries
    assert all(systems[-1] in text or any(s in text for s in systems[-3:]) for text in kept)
    # using an entry again makes it the most recent: the next new prefix evicts another
    judge._prefilled(messages(systems[-3]))
    judge._prefilled(messages("Yet another prefix."))
    assert any(systems[-3] in text for text in judge._prefixes)
    assert not any(systems[-2] in text for text in judge._prefixes)


# ---- transformers: the `cache` names ------------------------------------------------


def test_transformers_floor_is_the_release_with_the_cache_names():
    check_transformers("5.24.0")
    check_transformers("5.25.1+cu130")
    with pytest.raises(ImportError, match=r"transformers>=5.24 .* found 5.23.2"):
        check_transformers("5.23.2")


def test_this_environment_meets_the_pin():
    check_transformers(transformers.__version__)  # the pin in pyproject.toml holds here
    assert "cache" in transformers.modeling_outputs.CausalLMOutputWithPast.__dataclass_fields__


# ---- GPU placement: refuse to spill a large model to the CPU -------------------------


def test_a_31b_model_on_a_small_gpu_is_refused_with_the_numbers():
    gib = 2**30
    problem = gpu_spill_problem(int(61.4 * gib), [int(23.5 * gib)])  # 31B bf16 on one 24 GB card
    assert problem is not None
    assert "about 61.4 GiB in bf16" in problem
    assert "1 GPU(s) have 23.5 GiB free (21.1 GiB usable for weights)" in problem
    assert "serve/start_vllm.sh" in problem
    assert gpu_spill_problem(int(61.4 * gib), [int(79 * gib)]) is None  # an 80 GB card holds it
    assert gpu_spill_problem(int(61.4 * gib), [int(39 * gib)] * 2) is None  # two 40 GB cards


def test_weights_are_sized_in_bf16_whatever_they_are_stored_in(tmp_path):
    (tmp_path / "model-00001.safetensors").write_bytes(b"\0" * 4000)
    (tmp_path / "model-00002.safetensors").write_bytes(b"\0" * 4000)
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32"}))
    assert bf16_weight_bytes(tmp_path) == 4000
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert bf16_weight_bytes(tmp_path) == 8000


def test_modules_placed_on_the_cpu_are_found():
    assert spilled_modules({"model.embed_tokens": 0, "model.layers.0": 0}) == []
    assert spilled_modules({"model.layers.0": 0, "model.layers.59": "cpu", "lm_head": "disk"}) == [
        "model.layers.59", "lm_head",
    ]
    assert spilled_modules(None) == []
    assert GPU_HEADROOM < 1


# --------------------------------------------------------------------------- decoding


def _decode(judge: LocalTransformersJudge, msgs: list[dict], schema, **kwargs):
    """`judges.decoding.decode` on the judge's model from a full prefill of `msgs`."""
    from radmatch_audit.judges import decoding

    full = judge._encode(judge.prompt_text(msgs))
    cache = decoding.growing_cache(judge._layers, 4)  # small: the buffers must grow
    with torch.inference_mode():
        return decoding.decode(
            judge._hf_model, judge._grammar(schema), judge._grammar_backend.llg_tokenizer,
            cache, full, kwargs.pop("max_new_tokens", 60), **kwargs,
        )


def test_forced_tokens_in_one_pass_give_the_tokens_of_one_pass_each(judge):
    """The grammar's forced tokens (a key's name, the rest of an enum value) go into the
    model together: the greedy answer must be token for token the one-at-a-time answer."""
    msgs = messages("Say whether the finding is abnormal, and on which side.")
    together = _decode(judge, msgs, Verdict)
    one_by_one = _decode(judge, msgs, Verdict, fast_forward=False)
    assert together.tokens == one_by_one.tokens
    assert together.forced > 0 and one_by_one.forced == 0
    assert together.steps < one_by_one.steps  # the point: fewer forward passes
    text = judge._tokenizer.decode(together.tokens)
    assert Verdict.model_validate_json(text)


def test_a_complete_answer_costs_no_forward_pass_for_its_end(judge):
    decoded = _decode(judge, messages("Say it."), Verdict, fast_forward=False)
    # one pass per answer token, the first one prefilling the prompt; none for the end
    assert decoded.steps == len(decoded.tokens)
    assert judge._tokenizer.eos_token_id not in decoded.tokens


def test_the_answer_budget_bounds_forced_tokens_too(judge):
    decoded = _decode(judge, messages("Say it."), Verdict, max_new_tokens=3)
    assert len(decoded.tokens) == 3


def test_a_caller_who_gave_up_stops_the_loop_before_the_next_pass(judge):
    asked = []

    def stop_after_two() -> bool:
        asked.append(1)
        return len(asked) > 2

    decoded = _decode(judge, messages("Say it."), Verdict, should_stop=stop_after_two)
    assert decoded.stopped and decoded.steps == 2


def test_sampling_stays_inside_the_grammar(judge):
    torch.manual_seed(3)
    answers = {
        judge._tokenizer.decode(_decode(judge, messages("Say it."), Verdict, temperature=1.5).tokens)
        for _ in range(4)
    }
    for text in answers:
        Verdict.model_validate_json(text)
    assert len(answers) > 1  # it samples: greedy would give one answer


def test_a_growing_cache_gives_the_logits_of_a_dynamic_cache(judge):
    """Written in place and reallocated when full, the cache must hold what transformers'
    concatenating cache holds."""
    from transformers import DynamicCache

    from radmatch_audit.judges import decoding

    ids = judge._encode(judge.prompt_text(messages()))
    steps = [ids[:, :9], ids[:, 9:10], ids[:, 10:14], ids[:, 14:15], ids[:, 15:]]
    growing, dynamic = decoding.growing_cache(judge._layers, 10), DynamicCache()
    with torch.inference_mode():
        for chunk in steps:
            a = judge._hf_model(input_ids=chunk, cache=growing).logits[0, -1]
            b = judge._hf_model(input_ids=chunk, cache=dynamic).logits[0, -1]
            assert torch.allclose(a, b, atol=1e-5)
    assert growing.get_seq_length() == ids.shape[1]
    assert growing.layers[0].capacity >= ids.shape[1] > 10  # it grew


def test_grouped_attention_equals_attention_over_repeated_heads(monkeypatch):
    """SmolLM2 shares each key/value head among 3 query heads: transformers' SDPA with
    TRANSFORMERS_SDPA_FORCE_GQA (the judge's, no copies) must give what its default path
    gives, which repeats the heads whenever a mask is present."""
    from types import SimpleNamespace

    from transformers.integrations import sdpa_attention
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from radmatch_audit.judges.decoding import grouped_query_attention

    monkeypatch.delenv("TRANSFORMERS_SDPA_FORCE_GQA", raising=False)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    gen = torch.Generator().manual_seed(0)
    for queries, past in ((1, 40), (5, 40), (12, 0)):
        q = torch.randn(1, 9, queries, 16, generator=gen)
        k, v = torch.randn(2, 1, 3, past + queries, 16, generator=gen)
        mask = None
        if past:  # a prompt's new tokens see everything before them and themselves causally
            mask = torch.ones(queries, past + queries, dtype=torch.bool).tril(diagonal=past)[None, None]
        with grouped_query_attention():
            assert sdpa_attention.use_gqa_in_sdpa(mask, k, v)  # the flag exists and is read
            grouped, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
        if mask is not None and queries > 1:
            assert not sdpa_attention.use_gqa_in_sdpa(mask, k, v)  # the default repeats the heads
        repeated, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
        assert torch.allclose(grouped, repeated, atol=1e-5), (queries, past)


@pytest.fixture(scope="module")
def sliding_judge(bos_model_dir, tmp_path_factory) -> LocalTransformersJudge:
    """A random Mistral whose layers attend to a window of 8 tokens, far shorter than the
    prompts: its caches keep only the window, so they cannot be copied into full buffers."""
    import shutil

    from transformers import MistralConfig, MistralForCausalLM

    folder = tmp_path_factory.mktemp("tiny-mistral-sliding")
    for name in bos_model_dir.iterdir():
        if "token" in name.name or name.name.endswith(".jinja"):
            shutil.copy(name, folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(1)
    config = MistralConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, sliding_window=8,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    MistralForCausalLM(config).save_pretrained(folder)
    return LocalTransformersJudge(folder, model_name="tiny-mistral-sliding", device="cpu")


def test_a_sliding_window_model_keeps_its_own_cache_layers(sliding_judge):
    msgs = messages("Say whether the finding is abnormal, and on which side.")
    assert judge_prompt_tokens(sliding_judge, msgs) > 3 * 8  # the window matters
    reused = next_token_logits(sliding_judge, msgs, reuse=True)
    full = next_token_logits(sliding_judge, msgs, reuse=False)
    assert torch.allclose(reused, full, atol=1e-4), (reused - full).abs().max()
    cache = sliding_judge._prefilled(msgs)
    assert {type(layer).__name__ for layer in cache.layers} == {"DynamicSlidingWindowLayer"}
    answer = asyncio.run(sliding_judge.generate(msgs, Verdict, max_tokens=40)).text
    assert Verdict.model_validate_json(answer)


def judge_prompt_tokens(judge: LocalTransformersJudge, msgs: list[dict]) -> int:
    return judge._encode(judge.prompt_text(msgs)).shape[1]


def test_the_cpu_judge_attends_without_repeating_heads(judge, monkeypatch):
    """Every attention call of the judge's prefill and decoding shares the key/value heads
    (enable_gqa), and the switch is off again in the process once the judge is done."""
    import torch.nn.functional as F

    monkeypatch.delenv("TRANSFORMERS_SDPA_FORCE_GQA", raising=False)
    sdpa, grouped = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        grouped.append(kwargs.get("enable_gqa", False))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    # a system prompt of its own: its prefix is prefilled here, not taken from an earlier test
    asyncio.run(judge.generate(messages("You are a radiologist. Say which side, with grouped heads."),
                               Verdict, max_tokens=40))
    assert len(grouped) > 2 * 2 and all(grouped)  # two layers, several forward passes
    assert "TRANSFORMERS_SDPA_FORCE_GQA" not in os.environ


def test_a_users_own_setting_of_the_switch_is_kept(monkeypatch):
    from radmatch_audit.judges.decoding import FORCE_GQA, grouped_query_attention

    monkeypatch.setenv(FORCE_GQA, "0")
    with grouped_query_attention(), grouped_query_attention():  # two judges at once
        assert os.environ[FORCE_GQA] == "1"
    assert os.environ[FORCE_GQA] == "0"


# ---- the prefix store on disk never fails a call (issue 36, item 3) ----------------


def stored_prefix(bos_model_dir, folder: Path, msgs: list[dict]) -> Path:
    """The file an earlier judge kept for the prefix of `msgs` in `folder`."""
    LocalTransformersJudge(bos_model_dir, device="cpu", prefix_dir=folder).prefill(msgs)
    (path,) = folder.glob("*.safetensors")
    return path


def count_prefills(judge: LocalTransformersJudge, monkeypatch) -> list[int]:
    """A list that grows by one with every forward pass over a whole prefix."""
    calls: list[int] = []
    forward = judge._hf_model.forward

    def counted(*args, **kwargs):
        if kwargs.get("cache") is None:  # decoding passes its cache; a prefix prefill none
            calls.append(1)
        return forward(*args, **kwargs)

    monkeypatch.setattr(judge._hf_model, "forward", counted)
    return calls


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_an_unreadable_prefix_file_is_prefilled_again_and_replaced(bos_model_dir, tmp_path, damage):
    msgs = messages("Instructions whose stored prefix gets damaged.")
    path = stored_prefix(bos_model_dir, tmp_path, msgs)
    whole = path.read_bytes()
    path.write_bytes({"truncated": whole[: len(whole) // 2], "garbage": b"\x07" * 4096,
                      "empty": b""}[damage])
    judge = LocalTransformersJudge(bos_model_dir, device="cpu", prefix_dir=tmp_path)
    answer = asyncio.run(judge.generate(msgs, Verdict, max_tokens=40))
    assert Verdict.model_validate_json(answer.text)
    assert path.read_bytes() == whole  # rebuilt and stored again, whole
    ids = judge._encode(judge._tokenizer.apply_chat_template(msgs[:-1], tokenize=False))
    assert judge._prefix_store.load(
        judge._tokenizer.apply_chat_template(msgs[:-1], tokenize=False), ids, judge._hf_model.config
    ).get_seq_length() == ids.shape[1]


@pytest.mark.parametrize("failure", ["safetensors", "oserror"])
def test_a_full_disk_keeps_the_prefixes_in_memory_and_warns_once(
    bos_model_dir, tmp_path, monkeypatch, caplog, failure
):
    """safetensors reports ENOSPC as its own SafetensorError (as a 64 KiB tmpfs shows);
    an OSError(ENOSPC) can come from the folder's creation or the rename."""
    import errno

    import safetensors.torch
    from safetensors import SafetensorError

    def full_disk(tensors, filename, *args, **kwargs):
        Path(filename).write_bytes(b"\0" * 64)  # what fitted before the disk filled up
        if failure == "safetensors":
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    judge = LocalTransformersJudge(bos_model_dir, device="cpu", prefix_dir=tmp_path)
    prefills = count_prefills(judge, monkeypatch)
    stages = [messages(f"Stage {i}: say whether the finding is abnormal.") for i in range(3)]
    with caplog.at_level("WARNING", logger=local.__name__):
        for _ in range(2):  # the three stages of two pairs, in turn
            for msgs in stages:
                assert Verdict.model_validate_json(
                    asyncio.run(judge.generate(msgs, Verdict, max_tokens=40)).text)
    assert len(prefills) == 3  # each prefix prefilled once, then kept in memory
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "kept in memory for this run" in warnings[0].getMessage()
    assert not list(tmp_path.iterdir())  # no partial file left behind


def read_only(monkeypatch, folder: Path) -> None:
    """Make `folder` read-only. Tests run as root, whom mode bits do not stop, so every
    write into the folder (create, rename, utime, unlink) also raises EROFS, as a
    read-only mount does."""
    import errno

    import safetensors.torch

    folder.chmod(0o500)  # what stops any other user

    def inside(path) -> bool:
        return Path(path).resolve().is_relative_to(folder.resolve())

    def refuse(original):
        def guarded(path, *args, **kwargs):
            if inside(path):
                raise OSError(errno.EROFS, "Read-only file system", str(path))
            return original(path, *args, **kwargs)
        return guarded

    for module, name in ((os, "utime"), (os, "replace"), (os, "unlink"), (os, "mkdir")):
        monkeypatch.setattr(module, name, refuse(getattr(module, name)))
    save_file = safetensors.torch.save_file
    monkeypatch.setattr(safetensors.torch, "save_file",
                        lambda tensors, filename, *a, **k: refuse(lambda p: save_file(tensors, p))(filename))


def test_a_read_only_prefix_folder_is_read_and_never_fails_a_pair(bos_model_dir, tmp_path, monkeypatch, caplog):
    stored = messages("Instructions stored before the folder became read-only.")
    path = stored_prefix(bos_model_dir, tmp_path, stored)
    read_only(monkeypatch, tmp_path)
    try:
        judge = LocalTransformersJudge(bos_model_dir, device="cpu", prefix_dir=tmp_path)
        prefills = count_prefills(judge, monkeypatch)
        with caplog.at_level("WARNING", logger=local.__name__):
            for msgs in (stored, messages("Instructions never stored."), stored):
                assert Verdict.model_validate_json(
                    asyncio.run(judge.generate(msgs, Verdict, max_tokens=40)).text)
        assert len(prefills) == 1  # the stored prefix is read, the other prefilled once
        assert [p.name for p in tmp_path.iterdir()] == [path.name]
        assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1
    finally:
        tmp_path.chmod(0o700)


def test_the_embedded_judge_reads_its_control_tokens_from_its_tokenizer(judge):
    assert judge.control_tokens == ("</s>", "<s>")  # the tiny tokenizer's two special tokens
