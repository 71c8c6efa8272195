"""The in-process judge's prefix cache, its transformers floor and its GPU placement.

A tiny random Llama-shaped model is built here from a config, with a byte-level BPE
tokenizer that adds a BOS to every text (as Gemma's and Llama's do; SmolLM2's adds
none, which is why a one-token misalignment went unseen): reusing a prefilled prefix
must give the model exactly what a full prefill gives it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("outlines")

from radmatch_audit.judges import local
from radmatch_audit.judges.local import (
    LocalTransformersJudge,
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
        assert "cache" in cached, "the prefix was not reused"
        n = cached["cache"].get_seq_length()
        return judge._hf_model(input_ids=full[:, n:], cache=cached["cache"]).logits[0, -1]


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
    monkeypatch.setattr(judge, "_prefilled", lambda m, times=None: {})  # a full prefill every call
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
    from_disk = later._prefilled(msgs)["cache"]
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
    assert local.GPU_HEADROOM < 1
