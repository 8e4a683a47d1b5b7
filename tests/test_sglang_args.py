"""The installed SGLang's flag table and the mapping of every built-in profile onto it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sglwrap.errors import UsageError
from sglwrap.launch import plan_launch
from sglwrap.profiles import list_profiles, load_profile
from sglwrap.settings import FEATURES, SETTINGS
from sglwrap.sglang_args import bundled_table, flag_table, parse_user_args, resolve_option

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
    assert {k: (v.dest, v.nargs) for k, v in snap.flags.items()} == {k: (v.dest, v.nargs) for k, v in live.flags.items()}
    assert set(snap.env) == set(live.env)


def test_0_5_23_split_the_graph_batch_flag_and_the_old_spelling_is_ambiguous(live) -> None:  # type: ignore[no-untyped-def]
    assert "--cuda-graph-max-bs-decode" in live.flags and "--cuda-graph-max-bs" not in live.flags
    with pytest.raises(UsageError, match="ambiguous"):
        resolve_option("--cuda-graph-max-bs", live)


def test_abbreviation_resolves_like_argparse(live) -> None:  # type: ignore[no-untyped-def]
    parsed = parse_user_args(["--mem-fraction", "0.8", "--tp-size=2", "--trust-remote-code"], live)
    assert [(p.flag, p.values, p.abbreviated) for p in parsed] == [
        ("--mem-fraction-static", ("0.8",), True), ("--tp-size", ("2",), False), ("--trust-remote-code", (), False)]


def test_every_setting_and_feature_flag_candidate_exists_in_0_5_23_or_is_a_known_older_spelling(live) -> None:  # type: ignore[no-untyped-def]
    for s in SETTINGS.values():
        assert s.flags[0] in live.flags, f"{s.name}: newest spelling {s.flags[0]} missing"
    for f in FEATURES.values():
        for frag in (f.on_flags[0], f.off_flags[0]):
            assert not frag or frag[0] in live.flags, f"{f.name}: {frag}"


def test_every_builtin_profile_maps_onto_exact_flags_that_sglangs_own_parser_accepts(live) -> None:  # type: ignore[no-untyped-def]
    argvs = {}
    for name, _ in list_profiles():
        plan = plan_launch(load_profile(name), ["--model-path", "m"], live, python=sys.executable, environ={})
        for tok in plan.profile_args:
            if tok.startswith("--"):
                assert tok in live.flags, f"{name}: {tok} is not an exact flag"
        argvs[name] = list(plan.sglang_args)
    # SGLang's own parser (prepare_server_args, no GPU needed) accepts what we emit, and reads our values.
    code = (
        "import json, sys\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "out = {}\n"
        "for name, argv in json.loads(sys.argv[1]).items():\n"
        "    a = prepare_server_args(argv)\n"
        "    out[name] = {'cuda_graph_max_bs_decode': getattr(a, 'cuda_graph_max_bs_decode', None),\n"
        "                 'disable_custom_all_reduce': a.disable_custom_all_reduce}\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
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
