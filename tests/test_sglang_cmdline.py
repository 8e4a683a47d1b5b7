"""Reading SGLang's command line as the installed SGLang reads it: the flag table, the generated parser (checked
against SGLang's own parser over generated argvs), and the mapping of every built-in profile onto it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sglwrap.errors import UsageError
from sglwrap.launch import plan_launch
from sglwrap.profiles import list_profiles, load_profile
from sglwrap.settings import FEATURES, SETTINGS
from sglwrap.sglang.cmdline import parse_cmdline
from sglwrap.sglang.flags import bundled_table, flag_table

from .conftest import requires_sglang

pytestmark = requires_sglang


@pytest.fixture(scope="module")
def live():  # type: ignore[no-untyped-def]
    return flag_table(sys.executable)


def test_live_table_is_sglang_0_5_23_and_second_read_comes_from_the_cache(live) -> None:  # type: ignore[no-untyped-def]
    assert live.version == "0.5.23"
    flag_table(sys.executable)
    again = flag_table(sys.executable)
    assert again.source.startswith("cache:")
    assert set(again.flags) == set(live.flags)


def test_bundled_snapshot_matches_live_introspection(live) -> None:  # type: ignore[no-untyped-def]
    snap = bundled_table("0.5.23")
    assert set(snap.flags) == set(live.flags)
    def key(t):  # type: ignore[no-untyped-def]
        return {k: (v.dest, v.nargs, v.type, v.choices and sorted(map(str, v.choices))) for k, v in t.flags.items()}

    assert key(snap) == key(live), "the bundled 0.5.23 data and live introspection read the flags alike"
    assert set(snap.env) == set(live.env)


def test_0_5_23_split_the_graph_batch_flag_and_the_old_spelling_is_ambiguous(live) -> None:  # type: ignore[no-untyped-def]
    assert "--cuda-graph-max-bs-decode" in live.flags and "--cuda-graph-max-bs" not in live.flags
    with pytest.raises(UsageError, match="ambiguous option: --cuda-graph-max-bs could match"):
        parse_cmdline(["--cuda-graph-max-bs", "8"], live)


def test_abbreviation_resolves_like_argparse(live) -> None:  # type: ignore[no-untyped-def]
    cmd = parse_cmdline(["--mem-fraction", "0.8", "--tp-size=2", "--trust-remote-code"], live)
    assert dict(cmd.given_values) == {"mem_fraction_static": 0.8, "tp_size": 2, "trust_remote_code": True}
    assert cmd.abbreviations == (("--mem-fraction", "--mem-fraction-static"),)


def test_every_setting_and_feature_flag_candidate_exists_in_0_5_23_or_is_a_known_older_spelling(live) -> None:  # type: ignore[no-untyped-def]
    for s in SETTINGS.values():
        assert s.flags[0] in live.flags, f"{s.name}: newest spelling {s.flags[0]} missing"
    for f in FEATURES.values():
        for frag in (f.on_flags[0], f.off_flags[0]):
            assert not frag or frag[0] in live.flags, f"{f.name}: {frag}"


def _sglang_prepares(argvs: list[list[str]], attrs: tuple[str, ...]) -> list[dict]:  # type: ignore[type-arg]
    """``attrs`` of SGLang's own ``prepare_server_args(argv)`` (parsing and post-processing, on CPU), per argv."""
    code = ("import json, sys\nfrom sglang.srt.server_args import prepare_server_args\n"
            "argvs, attrs = json.loads(sys.argv[1])\n"
            "print(json.dumps([{k: getattr(prepare_server_args(a), k, None) for k in attrs} for a in argvs]))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps([argvs, attrs])], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_every_builtin_profile_maps_onto_exact_flags_that_sglangs_own_parser_accepts(live) -> None:  # type: ignore[no-untyped-def]
    argvs = {}
    for name, _ in list_profiles():
        plan = plan_launch(load_profile(name), parse_cmdline(["--model-path", "m"], live), python=sys.executable,
                           environ={})
        for tok in plan.profile_args:
            if tok.startswith("--"):
                assert tok in live.flags, f"{name}: {tok} is not an exact flag"
        argvs[name] = list(plan.sglang_args)
    # SGLang's own parser (prepare_server_args, no GPU needed) accepts what we emit, and reads our values.
    names = list(argvs)
    read = _sglang_prepares([argvs[n] for n in names], ("cuda_graph_max_bs_decode", "disable_custom_all_reduce"))
    parsed = dict(zip(names, read))
    assert parsed["lowgraph"]["cuda_graph_max_bs_decode"] == 128
    assert parsed["baseline"]["cuda_graph_max_bs_decode"] != 128
    assert parsed["pcie-ring"]["disable_custom_all_reduce"] is True
    assert parsed["fewchan"]["disable_custom_all_reduce"] is False


def test_no_sglwrap_option_of_any_verb_equals_an_sglang_flag(live) -> None:  # type: ignore[no-untyped-def]
    """Drop-in rule: options sglwrap owns on a line shared with SGLang's args must never be SGLang flags."""
    from sglwrap.commands import launch, memory, preflight

    for mod in (launch, memory, preflight):
        clash = set(mod.OWN_OPTIONS) & set(live.flags)
        assert not clash, f"{mod.__name__}: {clash}"


# --- agreement with SGLang's own parser ------------------------------------------------------------------------

_SGLANG_PARSE = (
    "import argparse, json, sys\n"
    "from sglang.srt.server_args import ServerArgs\n"
    "p = argparse.ArgumentParser(prog='sglang serve')\n"
    "ServerArgs.add_cli_args(p)\n"
    "p.error = lambda m: (print(json.dumps({'error': m})), sys.exit(0))\n"
    "out = []\n"
    "for argv in json.loads(sys.stdin.read()):\n"
    "    try:\n"
    "        ns = vars(p.parse_args(argv))\n"
    "        out.append({'values': {k: v for k, v in ns.items() if isinstance(v, (int, float, str, bool, list))}})\n"
    "    except SystemExit:\n"
    "        out.append({'error': 'exit'})\n"
    "print(json.dumps(out))\n")


def _sglang_reads(argvs: list[list[str]]) -> list[dict]:  # type: ignore[type-arg]
    proc = subprocess.run([sys.executable, "-c", _SGLANG_PARSE], input=json.dumps(argvs), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# Spellings users write (abbreviations, long aliases, = forms, switches, BooleanOptional, typed values, choices);
# each argv is combined from these so the generated set covers the interactions.
_PIECES = [
    ["--model-path", "m"], ["--model", "m"], ["--tp", "4"], ["--tp-size=2"], ["--tensor-parallel", "4"],
    ["--tensor-parallel-size", "8"], ["--dp", "2"], ["--dp-size", "2"], ["--enable-dp-attention"],
    ["--pp-size", "2"], ["--ep-size", "8"], ["--nnodes", "2"], ["--node-rank", "1"], ["--port", "31000"],
    ["--host", "0.0.0.0"], ["--mem-fraction-static", "0.8"], ["--mem-fraction", "0.7"],
    ["--kv-cache-dtype", "fp8_e4m3"], ["--device", "cpu"], ["--trust-remote-code"],
    ["--chunked-prefill-size", "4096"], ["--max-running-requests", "64"], ["--context-length", "8192"],
    ["--cuda-graph-max-bs-decode", "128"], ["--disable-cuda-graph"], ["--attn-dp-size", "2"],
    ["--json-model-override-args", '{"a": 1}'], ["--served-model-name", "x"], ["--page-size", "16"],
    ["--quantization", "fp8"], ["--speculative-algorithm", "EAGLE"], ["--enable-metrics"],
    # values SGLang's parser refuses
    ["--port", "abc"], ["--mem-fraction-static", "85%"], ["--kv-cache-dtype", "bogus"], ["positional"],
    ["--cuda-graph-max-bs", "8"], ["--no-such-flag"],
]


def test_generated_parser_agrees_with_sglangs_own_parser_on_generated_argvs(live) -> None:  # type: ignore[no-untyped-def]
    import random

    rng = random.Random(20261201)
    good, bad = _PIECES[:-6], _PIECES[-6:]
    argvs = [list(p) for p in _PIECES]
    for i in range(240):
        argv: list[str] = ["--model-path", "m"] if i % 4 else []
        for piece in rng.sample(good, rng.randint(1, 6)) + (rng.sample(bad, 1) if i % 3 == 0 else []):
            argv += piece
        rng.shuffle(argv) if i % 17 == 0 else None  # a few scrambled lines: values without their flags
        argvs.append(argv)
    theirs = _sglang_reads(argvs)
    refused = agreed = 0
    for argv, their in zip(argvs, theirs):
        try:
            ours = parse_cmdline(argv, live, require_model=True)
        except UsageError:
            assert "error" in their, f"sglwrap refuses {argv} but SGLang accepts it: {their}"
            refused += 1
            continue
        assert "values" in their, f"sglwrap accepts {argv} but SGLang refuses it: {their}"
        for dest, value in ours.given_values.items():
            if dest in their["values"]:
                assert their["values"][dest] == value, (argv, dest)
        for view, dest in (("tp", "tp_size"), ("pp", "pp_size"), ("dp", "dp_size"), ("ep", "ep_size"),
                           ("nnodes", "nnodes"), ("port", "port")):
            assert getattr(ours, view) == their["values"][dest], (argv, view)
        assert ours.model_path == their["values"].get("model_path")
        agreed += 1
    assert refused > 40 and agreed > 100, (refused, agreed)


def test_prepare_server_args_agrees_on_the_typed_views(live) -> None:  # type: ignore[no-untyped-def]
    """What SGLang's full argument preparation (post-processing included, on CPU) keeps for the exposed views."""
    argvs = [["--model-path", "m", "--tp", "2", "--port", "31000", "--host", "0.0.0.0", "--device", "cpu"],
             ["--model-path", "m", "--tensor-parallel", "4", "--pp-size", "2", "--device", "cpu"]]
    theirs = _sglang_prepares(argvs, ("tp_size", "pp_size", "port", "host", "model_path", "device"))
    for argv, their in zip(argvs, theirs):
        ours = parse_cmdline(argv, live)
        assert (ours.tp, ours.pp, ours.port, ours.host, ours.model_path, ours.device) == (
            their["tp_size"], their["pp_size"], their["port"], their["host"], their["model_path"], their["device"])


def test_config_file_is_merged_once_and_the_command_line_wins(live, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "sglang.yaml"
    cfg.write_text("model-path: /models/a\ntp-size: 2\nport: 31000\ntrust-remote-code: true\n")
    cmd = parse_cmdline(["--config", str(cfg), "--tp-size", "4"], live)
    assert (cmd.model_path, cmd.tp, cmd.port, cmd.get("trust_remote_code")) == ("/models/a", 4, 31000, True)
    assert {"model_path", "tp_size", "port"} <= cmd.config_dests
    cfg.write_text("tp_sise: 2\n")
    with pytest.raises(UsageError, match="tp_sise"):
        parse_cmdline(["--config", str(cfg)], live)
    cfg.write_text("tp_size: 2\n")  # SGLang 0.5.23 itself: "unrecognized arguments: --tp_size 2"
    with pytest.raises(UsageError, match="write the key as 'tp-size'"):
        parse_cmdline(["--config", str(cfg)], live)


def test_long_names_of_older_releases_read_as_todays() -> None:
    old = parse_cmdline(["--model-path", "m", "--tp-size", "4", "--dp-size", "2"], bundled_table("0.5.9"))
    assert "tensor_parallel_size" in old.given() and old.tp == 4 and old.dp == 2
    assert old.canonical_given()["tp_size"] == 4


def test_a_table_standing_in_for_an_unread_release_passes_unknown_options_on_unchecked() -> None:
    """A release sglwrap has not read (here 0.5.24, newer than any it ships) is read with the nearest table, 0.5.23's,
    which must not refuse what the newer release may have added (an option, a choice); a known option written with
    underscores is still refused, as every release refuses it."""
    from sglwrap.errors import UsageError
    from sglwrap.sglang.cmdline import parse_cmdline
    from sglwrap.sglang.flags import bundled_table

    exact, stand_in = bundled_table("0.5.23"), bundled_table("0.5.24")
    assert exact.stands_in_for is None and stand_in.version == "0.5.23" and stand_in.stands_in_for == "0.5.24"
    assert bundled_table("0.4.6.post5").stands_in_for is None  # post releases are read too
    argv = ["--model-path", "m", "--an-option-0523-lacks", "2", "--attention-backend", "a-backend-0523-lacks"]
    with pytest.raises(UsageError, match="invalid choice"):
        parse_cmdline(argv, exact)
    with pytest.raises(UsageError, match="no option '--an-option-0523-lacks'"):
        parse_cmdline(argv[:4], exact)
    cmd = parse_cmdline(argv, stand_in)
    assert cmd.unchecked == ("--an-option-0523-lacks", "2") and cmd.get("attention_backend") == "a-backend-0523-lacks"
    with pytest.raises(UsageError, match="--enable_metrics"):
        parse_cmdline(["--model-path", "m", "--enable_metrics"], stand_in)


@pytest.mark.parametrize(("flags", "named"), [(["--tp-size", "0"], "--tp-size 0"), (["--pp-size", "0"], "--pp-size 0"),
                                              (["--dp-size", "-1"], "--dp-size -1"), (["--nnodes", "0"], "--nnodes 0")])
def test_a_parallel_size_below_one_is_a_usage_error(flags: list[str], named: str) -> None:
    """SGLang divides by these sizes; sglwrap says so in one line instead of crashing in a check (found by the fuzz
    test: --tp-size 0 reached a modulo in the model-parallel check)."""
    with pytest.raises(UsageError, match=f"^{named}: must be a positive integer"):
        parse_cmdline(["--model-path", "m", *flags], bundled_table("0.5.23"))
    assert parse_cmdline(["--model-path", "m", "--tp-size", "1"], bundled_table("0.5.23")).tp == 1


@pytest.mark.parametrize("version", ["0.2.15", "0.5.23"])
@pytest.mark.parametrize("argv", [["--tp-size", "0"], ["--tensor-parallel-size", "0"], ["--dp-size", "-1"]])
def test_a_size_below_one_is_refused_under_every_releases_own_dest(version: str, argv: list[str]) -> None:
    """0.2.x stores --tp-size as tensor_parallel_size: a 0 there used to reach the checks and divide by zero (exit
    70, found by test_exit_codes' random invocations); it is the user's mistake, exit 64 naming the flag."""
    from sglwrap.sglang.flags import bundled_table

    table = bundled_table(version)
    if argv[0] not in table.flags:
        pytest.skip(f"{argv[0]} is not an option of {version}")
    with pytest.raises(UsageError, match="must be a positive integer"):
        parse_cmdline(["--model-path", "m", *argv], table)
