"""The one exit-code table: README and every verb's --help show it, and no input a user can type or set ends in
exit 70 (internal error) or a traceback (a fuzz over main(argv) and the environment)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglwrap.cli import main
from sglwrap.commands import COMMANDS
from sglwrap.errors import EXIT_CODES, EXIT_SOFTWARE, exit_codes_text

from .conftest import REPO

MODEL = str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B")


def test_readme_shows_exactly_the_table() -> None:
    text = (REPO / "README.md").read_text()
    rows = set(re.findall(r"^\| `([a-z-]+)` \| (\d+) \| (.+?) \|$", text, flags=re.M))
    want = {(verb, str(code), meaning) for verb, table in EXIT_CODES.items() for code, meaning in table}
    assert want <= rows, f"README lacks {sorted(want - rows)}"
    assert {r for r in rows if r[0] in EXIT_CODES} == want, "README has rows the table does not"
    assert set(EXIT_CODES) == set(COMMANDS)


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_every_verb_help_ends_with_its_exit_codes(verb: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    help_text = re.sub(r"\s+", " ", out.getvalue())
    assert re.sub(r"\s+", " ", exit_codes_text(verb)) in help_text


# --- fuzz: nothing a user types or sets is an internal error ----------------------------------------------------

_VERBS = ["launch", "preflight", "memory", "profiles", "systemd-unit", "diagnose"]
_OWN = [["--dry-run"], ["--json"], ["--force"], ["--keep"], ["--profile", "fewchan"], ["--profile", "nope"],
        ["--profile"], ["--assume", "2xH200"], ["--assume", "8xRTX-PRO-6000"], ["--assume", "H200"],
        ["--assume", "8xH20O"], ["--assume", "0xH200"], ["--assume-stack", "sglang=0.5.9"],
        ["--assume-stack", "sglang=0.4.6"], ["--assume-stack", "cuda-driver=12.x"], ["--assume-stack", "sglang"],
        ["--assume-stack", "torch=2.9.1+cu128,driver=570.124.06"], ["--assume-stack", "bananas=1.0"],
        ["--explain-change", "fewchan"], ["--plot", "x.txt"], ["--avail-before-weights-gib", "abc"],
        ["--weights-gib", "-3"], ["--profle", "x"], ["list"], ["show", "fewchan"], ["render", "baseline"],
        ["--notify"], ["/no/such.log"]]
_SGLANG = [["--model-path", MODEL], ["--model-path", "no/such-model"], ["--tp-size", "2"], ["--tp", "8"],
           ["--tensor-parallel", "4"], ["--tp-size", "0"], ["--tp-size", "-1"], ["--dp", "2"],
           ["--enable-dp-attention"], ["--port", "abc"], ["--port", "70000"], ["--mem-fraction-static", "85%"],
           ["--mem-fraction-static", "1.5"], ["--mem-fraction-static", "0.3"], ["--kv-cache-dtype", "bogus"],
           ["--kv-cache-dtype", "fp8_e4m3"], ["--device", "cpu"], ["--cuda-graph-max-bs", "8"],
           ["--cuda-graph-max-bs-decode", "0"], ["--chunked-prefill-size", "-1"], ["--context-length", "1M"],
           ["positional"], ["--no-such-flag"], ["--config", "/no/such.yaml"], ["--nnodes", "2"],
           ["--node-rank", "5"], ["--speculative-algorithm", "EAGLE"], ["--quantization", "fp8"],
           ["--json-model-override-args", "{bad json"], ["--served-model-name", "--json"], ["--"]]
_ENV = {"NCCL_BUFFSIZE": ["4M", "0x400000", "", "-1", "131072"], "NCCL_MAX_NCHANNELS": ["abc", "2", "0"],
        "NCCL_MIN_NCHANNELS": ["3", "x"], "NCCL_PROTO": ["ll128", "LL,Simple", "^LL128"],
        "NCCL_P2P_LEVEL": ["pxb", "NVL", "9"], "SGLWRAP_PROFILE": ["fewchan", "nope", ""],
        "SGLWRAP_PYTHON": ["/no/such/python"], "SGLWRAP_DIST_INIT_PORT": ["abc"], "NO_COLOR": ["1"]}


@st.composite
def invocations(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    verb = draw(st.sampled_from(_VERBS))
    argv = [verb]
    for piece in draw(st.lists(st.sampled_from(_OWN), max_size=4)):
        argv += piece
    if verb == "launch" and "--dry-run" not in argv:
        argv.append("--dry-run")  # a real launch would start SGLang (exec is refused below as a second guard)
    if draw(st.booleans()):
        argv.append("--")
    for piece in draw(st.lists(st.sampled_from(_SGLANG), max_size=5)):
        argv += piece
    env = {name: draw(st.sampled_from(values)) for name, values in _ENV.items() if draw(st.integers(0, 4)) == 0}
    return argv, env


def _refuse_exec(*_args: object, **_kwargs: object) -> None:
    raise OSError(1, "exec refused in the fuzz test")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(invocations())
def test_no_invocation_ends_in_an_internal_error(case: tuple[list[str], dict[str, str]]) -> None:
    argv, env = case
    err = io.StringIO()
    out = io.StringIO()
    with mock.patch.dict(os.environ, env), mock.patch("os.execve", _refuse_exec), \
            mock.patch("os.execvpe", _refuse_exec), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's own --help / usage error
            rc = int(e.code or 0)
    assert rc != EXIT_SOFTWARE, f"sglwrap {argv} with {env} -> internal error:\n{err.getvalue()[-3000:]}"
    assert "Traceback" not in err.getvalue(), f"sglwrap {argv} with {env} printed a traceback"


# The invocations that once ended in exit 70 (from the issue that asked for this table), each run as a user would.
_KNOWN: list[tuple[list[str], dict[str, str], int]] = [
    (["preflight", "--assume", "2xH200", "--", "--model-path", MODEL], {"NCCL_BUFFSIZE": "4M"}, 0),
    (["preflight", "--assume", "2xH200", "--", "--model-path", MODEL], {"NCCL_BUFFSIZE": "0x400000"}, 0),
    (["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", MODEL], {"NCCL_MAX_NCHANNELS": "abc"}, 0),
    (["preflight", "--assume", "2xH200", "--assume-stack", "cuda-driver=12.x", "--", "--model-path", MODEL], {}, 64),
    (["preflight", "--assume", "2xH200", "--", "--model-path", MODEL, "--tensor-parallel", "4"], {}, 78),
    (["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", MODEL, "--port", "abc"], {}, 64),
    (["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", MODEL, "--mem-fraction-static", "85%"],
     {}, 64),
    (["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", MODEL, "--kv-cache-dtype", "bogus"], {}, 64),
    (["launch", "--dry-run", "--assume", "2xH200", "--", MODEL], {}, 64),
    (["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", str(REPO / "sglwrap/data/models/Llama-3.1-70B"),
      "--tp", "2", "--device", "cpu", "--mem-fraction-static", "0.3"], {}, 0),
]


@pytest.mark.parametrize(("argv", "env", "code"), _KNOWN)
def test_known_hazards_exit_as_the_table_says(argv: list[str], env: dict[str, str], code: int) -> None:
    err, out = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(argv)
    assert rc == code, err.getvalue()[-2000:]
    if env:  # the user's own NCCL values are named in a warning, with what NCCL will really read
        name, value = next(iter(env.items()))
        assert f"{name}={value!r} in your environment: NCCL reads it as" in out.getvalue() + err.getvalue()
