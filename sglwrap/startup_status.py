"""One SGLang log line → a short ``STATUS=`` text for ``systemctl status`` (or None for most lines).

The line formats are diagnose's (``sglwrap.diagnose.patterns``, every SGLang version it knows), so the status
follows the same releases the log reader does. Only rank-0 (or untagged) lines update the status: with TP=8
eight identical lines would just flicker.
"""

from __future__ import annotations

import re
from typing import Final

from sglwrap.diagnose.patterns import ANSI_RE, parse_message, rank_number, split_prefix

# "Gracefully exiting... Remaining number of requests 3" (SG-0.5.23 managers/tokenizer_manager.py sigterm_watchdog)
DRAIN_RE: Final = re.compile(r"Gracefully exiting\.+ Remaining number of requests (\d+)")
# Cheap pre-filter: a line without any of these cannot change the status.
_KEYS: Final = ("Load weight", "KV Cache", "Memory pool", "graph", "fired up", "Gracefully exiting", "Init ",
                "Memory baseline", "Uvicorn", "startup complete")


def status_for_line(line: str) -> str | None:
    """The status text this log line announces, if any."""
    if not any(k in line for k in _KEYS):
        return None
    label, msg = split_prefix(ANSI_RE.sub("", line.rstrip("\r\n")))
    m = DRAIN_RE.search(msg)
    if m:
        return f"draining: {m.group(1)} requests left"
    if label and rank_number(label) != 0:
        return None
    for ev in parse_message(label, msg):
        text = _describe(ev.kind, ev.values)
        if text:
            return text
    return None


def _describe(kind: str, v: dict[str, object]) -> str | None:
    if kind == "init_begin":
        return "initialising torch.distributed"
    if kind == "load_begin":
        return f"loading weights (free {v['avail']} GiB)"
    if kind == "load_end":
        usage = v.get("usage")
        return "weights loaded" + (f": {usage} GiB per GPU" if usage is not None else "")
    if kind in ("kv_alloc", "kv_post_capture"):
        tokens = v.get("tokens")
        size = v.get("size") or v.get("kv")
        bits = [f"{tokens} tokens" if tokens is not None else None, f"{size} GiB" if size else None]
        return "KV cache pool: " + ", ".join(b for b in bits if b) if any(bits) else "KV cache pool allocated"
    if kind == "pool_end":
        return f"memory pool ready (free {v['avail']} GiB)"
    if kind == "capture_begin":
        name = str(v.get("name") or "").strip()
        return f"capturing {name + ' ' if name else ''}CUDA graphs"
    if kind == "capture_end":
        return "CUDA graphs captured"
    if kind == "up":
        return "warm-up done; waiting for /health"
    return None
