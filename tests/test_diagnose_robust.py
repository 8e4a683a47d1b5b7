"""Garbage, binary, truncated and large input: diagnose never crashes, and its reader streams."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglwrap.diagnose import diagnose, diagnose_lines
from sglwrap.diagnose.patterns import KEYWORDS, parse_message, split_prefix
from sglwrap.diagnose.render import to_dict
from sglwrap.diagnose.sources import _hits, iter_lines, looks_binary
from sglwrap.errors import SglwrapError

LOG_DIR = Path(__file__).resolve().parent / "fixtures" / "sglang-logs"  # copies of shared/data/sglang-logs
FIX = Path(__file__).parent / "fixtures" / "logs"
REAL = [yaml.safe_load(p.read_text())["log"] for p in sorted(LOG_DIR.glob("*.yaml"))]
FIXTURES = [p.read_text() for p in sorted(FIX.glob("v*"))]
ALL_LINES = [ln for text in REAL + FIXTURES for ln in text.splitlines()]
OUTCOMES = {"ok", "oom", "error", "incomplete"}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check(path: Path) -> dict:
    try:
        rep = diagnose([str(path)])
    except SglwrapError as e:  # a corrupt gzip stream, an empty or a binary input: "could not read" (exit 2)
        data = path.read_bytes()
        assert e.exit_code == 2
        assert data[:2] == b"\x1f\x8b" or not data.replace(b"\x00", b"").strip() or looks_binary(data[:65536]) \
            or "empty" in e.message
        return {"outcome": "incomplete", "ranks": []}
    d = to_dict(rep)
    assert d["outcome"] in OUTCOMES and rep.exit_code in (0, 1)
    return d


@SETTINGS
@given(st.binary(max_size=4096))
def test_random_bytes_never_crash(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "bin.log"
    p.write_bytes(data)
    _check(p)


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from(ALL_LINES), st.text(max_size=200)), max_size=60))
def test_shuffled_real_lines_and_noise_never_crash(tmp_path: Path, lines: list[str]) -> None:
    p = tmp_path / "mix.log"
    p.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    _check(p)


@SETTINGS
@given(st.sampled_from(REAL + FIXTURES), st.integers(min_value=0, max_value=10**6))
def test_truncated_at_any_byte_never_crashes(tmp_path: Path, text: str, cut: int) -> None:
    data = text.encode()
    p = tmp_path / "cut.log"
    p.write_bytes(data[: cut % (len(data) + 1)])
    _check(p)


@SETTINGS
@given(st.sampled_from(REAL), st.data())
def test_a_line_prefix_of_a_log_never_invents_numbers(tmp_path: Path, text: str, data: st.DataObject) -> None:
    lines = text.splitlines()
    n = data.draw(st.integers(min_value=0, max_value=len(lines)))
    full = {(r.node, r.label): r for r in diagnose_lines("", lines).ranks}
    for r in diagnose_lines("", lines[:n]).ranks:
        whole = full[(r.node, r.label)]
        for key in ("avail_before_weights_gib", "weight_mem_gib", "avail_after_weights_gib", "kv_tokens",
                    "avail_after_kv_pool_gib", "avail_before_cuda_graph_gib"):
            assert getattr(r, key) in (None, getattr(whole, key)), key


@pytest.mark.parametrize("line", ALL_LINES)
def test_every_line_with_a_fact_holds_a_prefilter_keyword(line: str) -> None:
    tags, msg = split_prefix(line)
    if parse_message(tags, msg):
        assert any(kw in line.encode() for kw in KEYWORDS), line


def test_prefilter_keeps_order_and_drops_noise() -> None:
    buf = (b"noise 1\nLoad weight begin. avail mem=1.00 GB\nnoise 2\nKV Cache x\nDecode batch. #token: 1\n"
           b"Decode batch. #token: 2\n")
    # the first serving line of a chunk is kept (the server was up), the rest of the serving noise is not
    assert list(_hits(buf)) == [(1, "Load weight begin. avail mem=1.00 GB"), (3, "KV Cache x"),
                                (4, "Decode batch. #token: 1")]


def test_huge_line_without_newline_is_cut_not_buffered(tmp_path: Path) -> None:
    p = tmp_path / "one-line.log"
    with p.open("wb") as fh:
        fh.write(b"[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=5.00 GB" + b"x" * (20 << 20))
    d = _check(p)
    assert d["ranks"][0]["avail_before_weights_gib"] == 5.0


def _big_log(path: Path, megabytes: int) -> None:
    head = (FIX / "v0.4.8_docker_tp4_mla_ok.log").read_bytes()
    noise = b"[2025-06-20 09:10:00 TP0] Decode batch. #running-req: 7, #token: 5120, token usage: 0.01, " \
            b"cuda graph: True, gen throughput (token/s): 512.33, #queue-req: 0\n" * 8000
    with path.open("wb") as fh:
        fh.write(head)
        while fh.tell() < megabytes << 20:
            fh.write(noise)


def _peak(path: Path) -> int:
    tracemalloc.start()
    try:
        for _ in iter_lines(str(path)):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_stays_flat_as_the_log_grows(tmp_path: Path) -> None:
    small, big = tmp_path / "s.log", tmp_path / "b.log"
    _big_log(small, 8)
    _big_log(big, 64)
    p_small, p_big = _peak(small), _peak(big)
    assert p_big < 32 << 20
    assert p_big < p_small * 1.5 + (1 << 20)
    assert to_dict(diagnose([str(big)]))["outcome"] == "ok"
