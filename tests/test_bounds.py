"""Numbers no host or server could have (a trillion GPUs, a trillion-request batch, nan GiB) are refused up front:
exit 64, one line naming the option, in well under two seconds; never exit 70, never an out-of-memory kill."""

from __future__ import annotations

import contextlib
import io
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglwrap.cli import main
from sglwrap.errors import EXIT_SOFTWARE, EXIT_USAGE
from sglwrap.sglang.flags import flag_table

from .conftest import REPO, run_sglwrap

MODEL = str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B")


_WARM: list[str] = []


def _main(argv: list[str]) -> tuple[int, str, float]:
    if not _WARM:  # the session's first plan reads SGLang's flags into the fresh test cache (~10 s, once)
        _WARM.append("x")
        for verb in ("memory", "preflight"):
            _main([verb, "--assume", "8xH100", "--", "--model-path", MODEL])
    err = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "execvpe", lambda *a: pytest.fail("exec"))
        mp.setattr(os, "execve", lambda *a: pytest.fail("exec"))
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = int(e.code or 0)
    return rc, err.getvalue(), time.monotonic() - t0


@pytest.mark.parametrize("argv, names", [
    (["preflight", "--assume", "999999999999xH100", "--", "--model-path", MODEL], "--assume"),
    (["memory", "--assume", "1x" + "9" * 5000 + "xH100", "--", "--model-path", MODEL], "--assume"),
    (["memory", "--assume", "4xH100+999999999999xH200", "--", "--model-path", MODEL], "--assume"),
    (["memory", "--assume", "8xH100", "--", "--model-path", MODEL, "--cuda-graph-max-bs-decode", "999999999999"],
     "--cuda-graph-max-bs-decode"),
    (["preflight", "--assume", "8xH100", "--", "--model-path", MODEL, "--cuda-graph-max-bs-prefill", "100000000"],
     "--cuda-graph-max-bs-prefill"),
    (["memory", "--assume", "8xH100", "--", "--model-path", MODEL, "--chunked-prefill-size", "999999999999"],
     "--chunked-prefill-size"),
    (["launch", "--dry-run", "--assume", "8xH100", "--", "--model-path", MODEL, "--dp-size", "999999999999"],
     "--dp-size"),
    (["memory", "--assume", "8xH100", "--weights-gib", "nan", "--", "--model-path", MODEL], "--weights-gib"),
    (["memory", "--assume", "8xH100", "--avail-before-weights-gib", "inf", "--", "--model-path", MODEL],
     "--avail-before-weights-gib"),
    (["bench-comm", "--backend", "gloo", "--timeout", "nan"], "--timeout"),
    (["bench-comm", "--backend", "gloo", "--world-size", "999999999999"], "--world-size"),
    (["bench-comm", "--backend", "gloo", "--decode-bs", "1,999999999999", "--model-path", MODEL], "--decode-bs"),
])
def test_an_impossible_number_is_one_usage_line(argv: list[str], names: str) -> None:
    rc, err, took = _main(argv)
    assert rc == EXIT_USAGE, err
    lines = [ln for ln in err.splitlines() if ln.startswith("sglwrap: error")]
    assert len(lines) == 1 and names in lines[0], err
    assert took < 2.0


def test_a_trillion_gpus_is_refused_in_a_fresh_process_without_growing() -> None:
    t0 = time.monotonic()
    r = run_sglwrap("preflight", "--assume", "999999999999xH100", "--", "--model-path", MODEL, timeout=60)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "--assume" in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 30  # the cold start of a fresh interpreter; before: killed for memory after 110 s


_NUMERIC = sorted({i.options[0] for i in flag_table().unique()
                   if i.type in ("int", "float", "other:human_readable_int") and i.options[0].startswith("--")
                   and i.nargs in (None, 1, "?", "+", "*")})
# the options that size per-GPU tables and batch-size lists, drawn half of the time
_SIZING = ["--tp-size", "--dp-size", "--pp-size", "--ep-size", "--nnodes", "--cuda-graph-max-bs-decode",
           "--cuda-graph-max-bs-prefill", "--chunked-prefill-size", "--cuda-graph-bs-decode", "--max-running-requests",
           "--context-length", "--max-total-tokens", "--mem-fraction-static", "--weights-gib"]
_OWN_NUMERIC = {"memory": ["--avail-before-weights-gib", "--weights-gib"]}
_VALUES = st.one_of(
    st.integers(min_value=-(10 ** 15), max_value=10 ** 15).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "999999999999", "0", "-1", "1e-300", "65537", "1048577"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(verb=st.sampled_from(["memory", "preflight"]),
       flag=st.one_of(st.sampled_from(_SIZING), st.sampled_from(_NUMERIC + _OWN_NUMERIC["memory"])), value=_VALUES)
def test_no_numeric_option_value_is_an_internal_error_or_slow(verb: str, flag: str, value: str) -> None:
    own = flag in _OWN_NUMERIC["memory"]
    if own and verb != "memory":
        verb = "memory"
    argv = [verb, "--assume", "8xH100"] + ([flag, value] if own else []) + ["--", "--model-path", MODEL] + \
        ([] if own else [flag, value])
    rc, err, took = _main(argv)
    assert rc != EXIT_SOFTWARE, err
    assert "Traceback" not in err
    assert took < 2.0, f"{argv}: {took:.1f} s"
