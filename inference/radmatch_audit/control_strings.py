"""A served model's control strings, made plain text before they reach a message (docs/judge.md rule 17).

A chat server renders the messages with the model's template and then tokenizes the
result; a report that contains the text of a special token (Gemma 4's `<|turn>` or
`<channel|>`, ChatML's `<|im_start|>`) would be read as that token, so a report could
open a turn of its own. Each such marker keeps its name but trades its angle brackets
for the single guillemets U+2039/U+203A: `<|im_start|>` becomes `‹|im_start|›`, still
readable, no longer the token. The judge quotes what it saw, so `restore_markers` turns
a quote back into the report's own text for evidence attribution.

Covered shapes: `<|name|>` (ChatML, Llama 3, Gemma 4's `<|think|>`, `<|"|>`, `<|image|>`),
`<|name>` and `<name|>` (Gemma 4's turn, channel, tool and media markers), and bare
`<name>` / `</name>` for the names in `BARE_TOKENS` (Gemma 2/3 turns, bos/eos/pad/unk,
Llama 2's `<s>`). Pure: no I/O.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "\u2039", "\u203a"  # ‹ ›
BARE_TOKENS = (
    "bos", "eos", "pad", "unk", "mask", "s", "start_of_turn", "end_of_turn",
    "start_of_image", "end_of_image", "endoftext",
)
_NAME = r"[A-Za-z0-9_\"]{1,40}"
_INNER = rf"\|{_NAME}\|?|{_NAME}\||/?(?:{'|'.join(BARE_TOKENS)})"
_MARKER = re.compile(rf"<({_INNER})>")
_NEUTRALISED = re.compile(rf"{OPEN}({_INNER}){CLOSE}")


def neutralise_markers(text: str) -> tuple[str, int]:
    """`text` with every control marker made plain, and how many there were."""
    if "<" not in text:
        return text, 0
    return _MARKER.subn(lambda m: f"{OPEN}{m.group(1)}{CLOSE}", text)


def restore_markers(text: str) -> str:
    """The inverse of `neutralise_markers` on a quote of neutralised text."""
    if OPEN not in text:
        return text
    return _NEUTRALISED.sub(lambda m: f"<{m.group(1)}>", text)
