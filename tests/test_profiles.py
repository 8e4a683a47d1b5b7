"""Profiles: search path, inheritance, hashing and the refusals that catch what NCCL silently accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.errors import ProfileError
from sglwrap.profiles import find_profile, list_profiles, load_profile

from .conftest import requires_sglang

BUILTINS = ("baseline", "fewchan", "lowgraph", "pcie-ipc", "pcie-ring")


def write(dirpath: Path, name: str, body: str) -> Path:
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / f"{name}.yaml"
    path.write_text(body)
    return path


def show(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["profiles", "show", str(path)])
    err = capsys.readouterr().err
    return rc, err


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_profiles_load_with_description_and_evidence(name: str) -> None:
    prof = load_profile(name)
    assert prof.name == name
    assert len(prof.description) > 40
    assert prof.evidence, f"{name} must say what evidence backs it"


def test_fewchan_sets_the_three_story_variables() -> None:
    env = {k: v.value for k, v in load_profile("fewchan").env.items()}
    assert env == {"NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_NCHANNELS": "2", "NCCL_BUFFSIZE": "131072"}


def test_lowgraph_sets_decode_graph_batch_size() -> None:
    assert load_profile("lowgraph").sglang == {"cuda_graph_max_bs": 128}


def test_user_profile_path_shadows_builtin_and_can_extend_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "mine"
    write(user, "fewchan", "name: fewchan\ndescription: my fewchan with bigger buffers\nextends: fewchan\n"
                           "env:\n  NCCL_BUFFSIZE: 262144\n")
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", str(user))
    prof = load_profile("fewchan")
    assert prof.env["NCCL_BUFFSIZE"].value == "262144"
    assert prof.env["NCCL_MAX_NCHANNELS"].value == "2"  # inherited from the built-in it shadows
    assert prof.sources[0] == str(user / "fewchan.yaml")
    assert len(prof.sources) == 3  # mine -> built-in fewchan -> baseline


def test_search_order_profile_path_then_config_then_etc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         isolated_env: Path) -> None:
    etc = tmp_path / "etc-sglwrap-profiles"
    conf = isolated_env / ".config" / "sglwrap" / "profiles"
    write(etc, "site", "name: site\ndescription: from etc\n")
    assert find_profile("site") == etc / "site.yaml"
    write(conf, "site", "name: site\ndescription: from home config\n")
    assert find_profile("site") == conf / "site.yaml"
    first = tmp_path / "first"
    write(first, "site", "name: site\ndescription: from SGLWRAP_PROFILE_PATH\n")
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", f"{first}:{tmp_path / 'missing'}")
    assert find_profile("site") == first / "site.yaml"
    assert dict(list_profiles())["site"] == first / "site.yaml"


def test_null_removes_an_inherited_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "onechan", "name: onechan\ndescription: fewchan without the buffer size\n"
                                      "extends: fewchan\nenv:\n  NCCL_BUFFSIZE: null\n")
    assert "NCCL_BUFFSIZE" not in load_profile(str(path)).env


def test_hash_ignores_key_order_and_text_but_not_values(tmp_path: Path) -> None:
    a = write(tmp_path / "a", "p", "name: p\ndescription: one\nenv:\n  NCCL_MIN_NCHANNELS: 1\n  NCCL_MAX_NCHANNELS: 2\n")
    b = write(tmp_path / "b", "p", "env:\n  NCCL_MAX_NCHANNELS: '2'\n  NCCL_MIN_NCHANNELS: 1\n"
                                   "description: a different text\nname: p\n")
    c = write(tmp_path / "c", "p", "name: p\ndescription: one\nenv:\n  NCCL_MIN_NCHANNELS: 1\n  NCCL_MAX_NCHANNELS: 4\n")
    ha, hb, hc = (load_profile(str(p)).hash for p in (a, b, c))
    assert ha == hb
    assert ha != hc
    assert len(ha) == 64 and int(ha, 16) >= 0


def test_force_is_read_per_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "f", "name: f\ndescription: forced\nenv:\n"
                                "  NCCL_MIN_NCHANNELS: {value: 1, force: true}\n  NCCL_MAX_NCHANNELS: 2\n")
    prof = load_profile(str(path))
    assert prof.env["NCCL_MIN_NCHANNELS"].force is True
    assert prof.env["NCCL_MAX_NCHANNELS"].force is False


BAD = [
    pytest.param("name: bad\ndescription: x\nenvv:\n  NCCL_MIN_NCHANNELS: 1\n",
                 ["key 'envv'", "unknown top-level key", "Did you mean 'env'?"], id="unknown-top-key"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_MIN_NCHANNEL: 1\n",
                 ["key 'env.NCCL_MIN_NCHANNEL'", "unknown NCCL_* variable", "Did you mean 'NCCL_MIN_NCHANNELS'?"],
                 id="unknown-nccl-var"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_BUFFSIZE: 4M\n",
                 ["key 'env.NCCL_BUFFSIZE'", "'4M'", "not an integer", "silently read it as 4", "no unit suffix"],
                 id="buffsize-with-unit"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_PROTO: ll128\n",
                 ["key 'env.NCCL_PROTO'", "'ll128'", "write 'LL128'", "LL, LL128, Simple"], id="proto-lowercase"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_PROTO: LL256\n",
                 ["key 'env.NCCL_PROTO'", "'LL256'", "LL, LL128, Simple"], id="proto-unknown-token"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_MIN_NCHANNELS: -1\n",
                 ["key 'env.NCCL_MIN_NCHANNELS'", "-1 is out of range", "from 0 to 64"], id="negative-channels"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_MAX_NCHANNELS: 0\n",
                 ["key 'env.NCCL_MAX_NCHANNELS'", "out of range", "from 1 to 64"], id="zero-max-channels"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_BUFFSIZE: 100000\n",
                 ["key 'env.NCCL_BUFFSIZE'", "not a power of two"], id="buffsize-not-power-of-two"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_P2P_LEVEL: pxb\n",
                 ["key 'env.NCCL_P2P_LEVEL'", "write 'PXB'"], id="p2p-level-lowercase"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_ALGO: 'AllReduce:Ring;bcast:Tree'\n",
                 ["key 'env.NCCL_ALGO'", "'bcast' is not a collective name"], id="algo-bad-func"),
    pytest.param("name: bad\ndescription: x\nenv:\n  PYTORCH_CUDA_ALLOC_CONF: expandable:True\n",
                 ["key 'env.PYTORCH_CUDA_ALLOC_CONF'", "unknown allocator option 'expandable'"], id="alloc-conf"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_MIN_NCHANNELS: {value: 1, forced: true}\n",
                 ["key 'env.NCCL_MIN_NCHANNELS.forced'", "Did you mean 'force'?"], id="env-entry-typo"),
    pytest.param("name: bad\ndescription: x\nsglang:\n  cuda_graph_max_batch: 128\n",
                 ["key 'sglang.cuda_graph_max_batch'", "unknown server setting", "Did you mean 'cuda_graph_max_bs'?"],
                 id="unknown-sglang-setting"),
    pytest.param("name: bad\ndescription: x\nsglang:\n  cuda_graph_max_bs: '128'\n",
                 ["key 'sglang.cuda_graph_max_bs'", "must be an integer"], id="setting-wrong-type"),
    pytest.param("name: bad\ndescription: x\nsglang:\n  mem_fraction_static: 1.5\n",
                 ["key 'sglang.mem_fraction_static'", "out of range"], id="setting-out-of-range"),
    pytest.param("name: bad\ndescription: x\nfeatures:\n  torch_symm_mem: maybe\n",
                 ["key 'features.torch_symm_mem'", "'maybe' is not a mode", "require, prefer, off, auto"],
                 id="bad-feature-mode"),
    pytest.param("name: bad\ndescription: x\nfeatures:\n  symmetric_memory: prefer\n",
                 ["key 'features.symmetric_memory'", "unknown feature"], id="unknown-feature"),
    pytest.param("name: other\ndescription: x\n", ["key 'name'", "'other' differs from the file name 'bad'",
                                                   "rename the file to other.yaml"], id="name-mismatch"),
    pytest.param("name: bad\n", ["key 'description'", "required"], id="missing-description"),
    pytest.param("name: bad\ndescription: x\nenv: [NCCL_MIN_NCHANNELS]\n", ["key 'env'", "must be a mapping"],
                 id="env-not-mapping"),
    pytest.param("name: bad\ndescription: x\nenv:\n  NCCL_MIN_NCHANNELS: 1\n   bad indent: 2\n",
                 ["not valid YAML", "line"], id="invalid-yaml"),
    pytest.param("- just\n- a list\n", ["top level must be a mapping"], id="list-at-top"),
    pytest.param("name: bad\ndescription: x\nextends: nosuchprofile\n",
                 ["profile 'nosuchprofile' not found", "Known profiles"], id="extends-missing"),
]


@pytest.mark.parametrize(("body", "words"), BAD)
def test_bad_profile_is_refused_with_78_and_a_message_naming_file_key_and_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, words: list[str]) -> None:
    path = write(tmp_path, "bad", body)
    rc, err = show(path, capsys)
    assert rc == 78
    assert str(path) in err or "profile 'nosuchprofile'" in err
    for w in words:
        assert w in err, f"{w!r} missing from: {err}"
    assert "Traceback" not in err
    assert err.count("\n") == 1, "one message, one line"


def test_extends_cycle_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a", "name: a\ndescription: x\nextends: b\n")
    write(tmp_path, "b", "name: b\ndescription: x\nextends: a\n")
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", str(tmp_path))
    assert main(["profiles", "show", "a"]) == 78
    assert "'extends' forms a cycle" in capsys.readouterr().err


def test_unreadable_binary_profile_is_an_error_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage\x00")
    assert main(["profiles", "show", str(path)]) == 78
    assert "Traceback" not in capsys.readouterr().err


def test_launch_refuses_a_bad_profile_with_78_before_anything_runs(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "bad", "name: bad\ndescription: x\nenv:\n  NCCL_BUFFSIZE: 4M\n")
    rc = main(["launch", "--profile", str(path), "--dry-run", "--assume", "2xH200", "--", "--model-path", "m"])
    out = capsys.readouterr()
    assert rc == 78
    assert "NCCL_BUFFSIZE" in out.err and out.out == ""


@requires_sglang
def test_unknown_sglang_variable_is_checked_against_installed_sglang(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ok = write(tmp_path / "ok", "k", "name: k\ndescription: x\nenv:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: true\n")
    assert load_profile(str(ok)).env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"].value == "1"
    typo = write(tmp_path / "typo", "k", "name: k\ndescription: x\nenv:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUC: 1\n")
    rc, err = show(typo, capsys)
    assert rc == 78 and "Did you mean 'SGLANG_ENABLE_PCIE_IPC_ALLREDUCE'?" in err
    badbool = write(tmp_path / "bb", "k", "name: k\ndescription: x\nenv:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: maybe\n")
    rc, err = show(badbool, capsys)
    assert rc == 78 and "allowed: true, 1, yes" in err


def test_profile_error_is_a_profile_error_type(tmp_path: Path) -> None:
    path = write(tmp_path, "bad", "name: bad\ndescription: x\nenv:\n  NCCL_PROTO: ll128\n")
    with pytest.raises(ProfileError):
        load_profile(str(path))


def test_name_is_optional_the_file_name_is_the_name(tmp_path: Path) -> None:
    path = write(tmp_path, "nameless", "description: no name key\nextends: fewchan\n")
    prof = load_profile(str(path))
    assert prof.name == "nameless" and prof.env["NCCL_MAX_NCHANNELS"].value == "2"


def list_cli(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    rc = main(["profiles", "list", *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_names_each_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_env: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "first"
    write(first, "frompath", "description: from the path\n")
    write(isolated_env / ".config" / "sglwrap" / "profiles", "fromuser", "description: from the user dir\n")
    write(tmp_path / "etc-sglwrap-profiles", "frometc", "description: from etc\n")
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", str(first))
    rc, out, err = list_cli(capsys)
    assert rc == 0 and err == ""
    lines = {ln.split()[0]: ln for ln in out.splitlines()}
    assert set(BUILTINS) | {"frompath", "fromuser", "frometc"} <= set(lines)
    assert all("built-in" in lines[b] for b in BUILTINS)
    assert "$SGLWRAP_PROFILE_PATH" in lines["frompath"] and str(first) in lines["frompath"]
    assert "user" in lines["fromuser"] and ".config/sglwrap/profiles" in lines["fromuser"]
    assert str(tmp_path / "etc-sglwrap-profiles") in lines["frometc"]
    rc, out, _ = list_cli(capsys, "--json")
    doc = json.loads(out)
    assert {r["name"]: r["source"] for r in doc["profiles"]}["frometc"] == "/etc"
    assert doc["broken"] == []


def test_list_shows_the_good_ones_and_one_line_per_broken_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "mine"
    write(d, "good", "description: fine\n")
    bad1 = write(d, "bad1", "description: x\nenv:\n  NCCL_BUFFSIZE: 4M\n")
    bad2 = write(d, "bad2", "name: other\ndescription: x\n")
    (d / "dir.yaml").mkdir()
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", str(d))
    rc, out, err = list_cli(capsys)
    assert rc == 78
    names = [ln.split()[0] for ln in out.splitlines()]
    assert "good" in names and set(BUILTINS) <= set(names)
    assert not {"bad1", "bad2", "dir"} & set(names)
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert any(str(bad1) in ln and "NCCL_BUFFSIZE" in ln for ln in lines)
    assert any(str(bad2) in ln and "'other'" in ln for ln in lines)
    assert any(str(d / "dir.yaml") in ln and "directory" in ln for ln in lines)
    rc, out, _ = list_cli(capsys, "--json")
    doc = json.loads(out)
    assert rc == 78 and sorted(b["name"] for b in doc["broken"]) == ["bad1", "bad2", "dir"]


def test_a_directory_where_a_profile_should_be_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b20.yaml").mkdir()
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", str(tmp_path))
    assert main(["profiles", "show", "b20"]) == 78
    err = capsys.readouterr().err
    assert "a directory" in err and str(tmp_path / "b20.yaml") in err and "Did you mean" not in err


def test_a_dangling_symlink_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b20.yaml").symlink_to(tmp_path / "gone.yaml")
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", str(tmp_path))
    assert main(["profiles", "show", "b20"]) == 78
    err = capsys.readouterr().err
    assert "symlink" in err and str(tmp_path / "gone.yaml") in err and "does not exist" in err
    assert main(["profiles", "show", str(tmp_path / "b20.yaml")]) == 78
    assert "symlink" in capsys.readouterr().err


def test_a_profile_extending_itself_with_nothing_below_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "b20", "description: x\nextends: b20\n")
    monkeypatch.setenv("SGLWRAP_PROFILE_PATH", str(tmp_path))
    assert main(["profiles", "show", "b20"]) == 78
    err = capsys.readouterr().err
    assert "names this profile itself" in err and "Did you mean" not in err


@pytest.mark.parametrize("name", ["baseline", "fewchan"])
def test_profile_hash_is_the_sha256_of_its_canonical_json(name: str) -> None:
    """The identity in run directories and manifests is SHA-256 whatever implementation computes it (the
    interpreter's own, not OpenSSL's, on the fast path)."""
    import hashlib

    from sglwrap.profiles import canonical_json

    prof = load_profile(name, {})
    assert prof.hash == hashlib.sha256(canonical_json(prof).encode()).hexdigest()
    assert prof.short_hash and prof.hash.startswith(prof.short_hash)
