"""The message catalogue built from every release's source: each template parses as the fact it names."""

from __future__ import annotations

import itertools
import re

import pytest

from sglwrap.diagnose import diagnose_lines
from sglwrap.diagnose.catalogue import VersionRange, messages, releases
from sglwrap.diagnose.patterns import KEYWORDS, parse_message, split_prefix

# Templates in the catalogue that carry no fact diagnose reads (their text is kept for the version range only).
NO_FACT = {
    "Load weight end. Committed real weights after CUDA graph capture",  # 0.5.18+ overlap loading, no numbers
    "Post-capture KV sizing: decode CUDA graph max_bs=",
    "Post-capture KV sizing: max_running_requests {} -> {}",
    "Post-capture KV sizing: KV-canary per-forward workspace",
    "Post-capture KV sizing: max_total_num_tokens={}, free memory",
    "Post-capture KV sizing: full_layer_tokens",
    "Post-capture KV sizing: draft KV cache allocated",
    "Use sliding window memory pool (all SWA)",  # no full-layer tokens to report
    "Capture cuda graph bs",  # the bs list only
    "max_total_num_tokens={}",  # a bare fragment of a longer line
    "Capture Frozen-KV MTP draft cuda graph end.",  # a fragment; the numbers follow in another literal
}
# message id -> the Event kind (or error kind) parse_message must produce
EXPECT = {
    "not_enough": "error:not_enough", "no_kv": "error:no_kv", "unbalanced": "error:unbalanced",
    "budget_other": "error:budget_other", "capture_failed": "error:capture_failed", "crash": "crash",
    "kv_exhausted": "error:kv_exhausted",
}
# Leading holes whose value is a name in SGLang's source (read there): the graph kind (SG-0.5.9
# model_runner.py:2147 graph_backend[device]), "{role} {prefill|decode|verify}" (SG-0.5.22 cuda_graph_setup.py:640-712)
# and the pool's cache name (SG-0.5.23 memory_pool.py:2078).
NAMES = {
    "Capture {} begin.": ("cuda graph",), "Capture {} end.": ("cuda graph",),
    "Capture {} {} begin.": ("target decode", "CUDA graph"), "Capture {} {} end.": ("draft decode", "CUDA graph"),
    "Capture {} CUDA graph": ("target prefill",), "{} {VA upper bound|is allocated}": ("KV Cache",),
}


def _instances(template: str) -> list[str]:
    """Lines the template prints: a GiB/seconds value where a unit follows, an integer elsewhere."""
    parts = re.split(r"(\{[^{}]*\})", template)
    names = list(next((v for k, v in NAMES.items() if template.startswith(k)), ()))
    choices = []
    for i, p in enumerate(parts):
        if p == "{}" and names:
            choices.append((names.pop(0),))
        elif p == "{}":
            after = parts[i + 1] if i + 1 < len(parts) else ""
            choices.append(("1.50",) if re.match(r"\s?(?:GB|GiB|s\b)", after) else ("12",))
        elif p.startswith("{") and p.endswith("}") and "|" in p:
            choices.append(tuple(p[1:-1].split("|")))
        else:
            choices.append((p,))
    return ["".join(c) for c in itertools.islice(itertools.product(*choices), 8)]


def _kinds(line: str) -> set[str]:
    tags, msg = split_prefix("[2025-01-01 00:00:00 TP0] " + line)
    out = set()
    for ev in parse_message(tags, msg):
        out.add(f"error:{ev.values.get('kind')}" if ev.kind == "error" else ev.kind)
    return out


CASES = [m for m in messages() if not any(m.template.startswith(x) for x in NO_FACT)]


def test_catalogue_covers_every_downloaded_release_and_the_core_messages() -> None:
    assert len(releases()) >= 20 and releases()[0].startswith("0.2") and releases()[-1] == "0.5.23"
    ids = {m.id for m in messages()}
    assert {"load_begin", "load_end", "kv_alloc", "pool_end", "capture_begin", "capture_end", "not_enough",
            "no_kv", "up", "max_total", "pool_total", "mamba_alloc"} <= ids
    for m in messages():
        assert m.versions and all(v in releases() for v in m.versions)


@pytest.mark.parametrize("msg", CASES, ids=[f"{m.id}:{m.versions[0]}:{m.template[:40]}" for m in CASES])
def test_every_template_of_every_release_is_recognised(msg) -> None:  # type: ignore[no-untyped-def]
    want = EXPECT.get(msg.id, msg.id)
    for line in _instances(msg.template):
        assert want in _kinds(line), line
        assert any(kw in line.encode() for kw in KEYWORDS), line  # the prefilter keeps it


def test_the_release_range_narrows_to_the_releases_that_print_every_line() -> None:
    lines = [
        "[2025-01-01 00:00:00 TP0] Init torch distributed ends. elapsed=1.2 s, mem usage=0.13 GB",
        "[2025-01-01 00:00:00 TP0] Load weight end. elapsed=3.1 s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
        "avail mem=60.00 GB, mem usage=15.00 GB.",
    ]
    node = diagnose_lines("", lines)
    # "Init torch distributed ends. elapsed=" is printed by 0.5.9 to 0.5.20 only (0.5.21 says "Memory baseline")
    assert node.release_span == ("0.5.9", "0.5.20")
    vr = VersionRange()
    vr.feed("load_begin", "Load weight begin. avail mem=1.00 GB")
    assert vr.span() == (releases()[0], releases()[-1])
