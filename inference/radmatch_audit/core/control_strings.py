"""A served model's control strings, made plain text before they reach a message (docs/judge.md rule 17).

A chat server renders the messages with the model's template and then tokenizes the
result; a report that contains the text of a special token (Gemma 4's `<|turn>` or
`<channel|>`, ChatML's `<|im_start|>`) would be read as that token, so a report could
open a turn of its own. Each such marker keeps its name but trades its angle brackets
for the single guillemets U+2039/U+203A: `<|im_start|>` becomes `‹|im_start|›`, still
readable, no longer the token. The judge quotes what it saw, so `restore_markers` turns
a quote back into the report's own text for evidence attribution.

Covered by hand, whatever the judge: `<|name|>` (ChatML, Llama 3, Gemma 4's `<|think|>`,
`<|"|>`, `<|image|>`), `<|name>` and `<name|>` (Gemma 4's turn, channel, tool and media
markers), bare `<name>` / `</name>` for the names in `BARE_TOKENS` (Gemma 2/3 turns,
bos/eos/pad/unk, Llama 2's `<s>`, Qwen's `<think>` and `<tool_call>`), DeepSeek's
`<｜User｜>`-style markers (full-width bars), and Mistral's `[INST]`-style markers
(`BRACKET_TOKENS`). Beside those, every special token of the tokenizer in use (a
judge's `control_tokens`, read from its tokenizer: `tokenizer_tokens`) is neutralised
whatever its shape: `<x>` becomes `‹x›`, `[x]` becomes `⁅x⁆` (U+2045/U+2046), and any
other gets a WORD JOINER (U+2060) after its first character. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

OPEN, CLOSE = "\u2039", "\u203a"  # ‹ ›
SQUARE_OPEN, SQUARE_CLOSE = "\u2045", "\u2046"  # ⁅ ⁆
JOINER = "\u2060"  # WORD JOINER: breaks a token of no bracketed shape, invisibly
BARE_TOKENS = (
    "bos", "eos", "pad", "unk", "mask", "s", "start_of_turn", "end_of_turn",
    "start_of_image", "end_of_image", "endoftext",
    "think", "tool_call", "tool_response", "tools",  # Qwen 2.5/3
)
# Mistral's control tokens (v3 and later tokenizers)
BRACKET_TOKENS = (
    "INST", "/INST", "TOOL_CALLS", "AVAILABLE_TOOLS", "/AVAILABLE_TOOLS", "TOOL_RESULTS",
    "/TOOL_RESULTS", "SYSTEM_PROMPT", "/SYSTEM_PROMPT", "THINK", "/THINK", "IMG", "IMG_BREAK",
    "IMG_END",
)
_NAME = r"[A-Za-z0-9_\"]{1,40}"
_FULLWIDTH = r"\uff5c[^<>\s]{1,40}?\uff5c"  # DeepSeek's <｜User｜>, <｜begin▁of▁sentence｜>
_INNER = rf"\|{_NAME}\|?|{_NAME}\||/?(?:{'|'.join(BARE_TOKENS)})|{_FULLWIDTH}"
_MARKER = re.compile(rf"<({_INNER})>|\[({'|'.join(BRACKET_TOKENS)})\]")
_NEUTRAL = str.maketrans({OPEN: "<", CLOSE: ">", SQUARE_OPEN: "[", SQUARE_CLOSE: "]", JOINER: ""})


def neutralise_markers(text: str, tokens: Iterable[str] = ()) -> tuple[str, int]:
    """`text` with every control marker made plain, and how many there were: the shapes
    above, and each of `tokens` (the special tokens of the judge's tokenizer)."""
    count = 0
    if "<" in text or "[" in text:
        text, count = _MARKER.subn(lambda m: neutral(m.group(0)), text)
    literal = _literal_pattern(tuple(sorted(set(tokens))))
    if literal is not None:
        text, more = literal.subn(lambda m: neutral(m.group(0)), text)
        count += more
    return text, count


def neutral(token: str) -> str:
    """`token` as plain text: its brackets traded, or a WORD JOINER after its first character."""
    if token[0] == "<" and token[-1] == ">":
        return f"{OPEN}{token[1:-1]}{CLOSE}"
    if token[0] == "[" and token[-1] == "]":
        return f"{SQUARE_OPEN}{token[1:-1]}{SQUARE_CLOSE}"
    return token[0] + JOINER + token[1:]


def restore_markers(text: str) -> str:
    """The inverse of `neutralise_markers` on a quote of neutralised text (used only when
    the quote is not found as it is: a report's own ‹ › stays found)."""
    if not any(c in text for c in (OPEN, CLOSE, SQUARE_OPEN, SQUARE_CLOSE, JOINER)):
        return text
    return text.translate(_NEUTRAL)


def tokenizer_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The control tokens of a Hugging Face tokenizer: its special tokens, and its added
    tokens marked special or bracketed (Qwen's `<think>` is added but not marked special,
    and is still read as one token). Strings under 3 characters, or of whitespace, are
    left alone: changing them would change ordinary text."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or ())
    for added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        content = str(getattr(added, "content", added))
        if getattr(added, "special", False) or _bracketed(content):
            found.add(content)
    return tuple(sorted(t for t in found if isinstance(t, str) and len(t.strip()) >= 3))


def tokenizer_info_tokens(info: Any) -> tuple[str, ...]:
    """The control tokens of a tokenizer as vLLM's GET /tokenizer_info describes it (its
    `init_kwargs`, with every added token as its text): the `*_token` entries, the
    `additional_special_tokens` and the bracketed added tokens; () for anything else."""
    if not isinstance(info, dict):
        return ()
    found: set[str] = {v for k, v in info.items() if k.endswith("_token") and isinstance(v, str)}
    extra = info.get("additional_special_tokens")
    found.update(t for t in (extra if isinstance(extra, list) else ()) if isinstance(t, str))
    added = info.get("added_tokens_decoder")
    for entry in (added.values() if isinstance(added, dict) else ()):
        content = entry.get("content") if isinstance(entry, dict) else entry
        special = isinstance(entry, dict) and entry.get("special") is True
        if isinstance(content, str) and (special or _bracketed(content)):
            found.add(content)
    return tuple(sorted(t for t in found if len(t.strip()) >= 3))


def control_tokens(judge: Any) -> tuple[str, ...]:
    """The special tokens a judge read from its tokenizer (`control_tokens`), if any."""
    return tuple(getattr(judge, "control_tokens", None) or ())


def _bracketed(token: str) -> bool:
    return len(token) >= 3 and (token[0], token[-1]) in (("<", ">"), ("[", "]"))


@lru_cache(maxsize=8)
def _literal_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    """One alternation of `tokens`, longest first (a token that starts another loses)."""
    usable = sorted((t for t in tokens if len(t.strip()) >= 3), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, usable))) if usable else None
