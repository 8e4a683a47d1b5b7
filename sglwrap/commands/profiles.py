"""`sglwrap profiles list | show NAME | render NAME`."""

from __future__ import annotations

import json
import sys
from typing import Any

from sglwrap import envvars
from sglwrap.inject import render_sitecustomize
from sglwrap.profiles import list_profiles, load_profile
from sglwrap.settings import FEATURES, SETTINGS


def add_parser(sub: Any) -> None:
    """Register `profiles` and its three actions."""
    p = sub.add_parser("profiles", help="list, show and render profiles",
                       description="Inspect the profiles on the search path ($SGLWRAP_PROFILE_PATH, "
                                   "~/.config/sglwrap/profiles, /etc/sglwrap/profiles, built-ins).")
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = acts.add_parser("list", help="every visible profile, its hash and where it comes from")
    ls.add_argument("--json", action="store_true", help="one JSON object on stdout")
    show = acts.add_parser("show", help="the resolved profile: variables, settings, features, evidence")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="one JSON object on stdout")
    render = acts.add_parser("render", help="print the sitecustomize.py that launch would write")
    render.add_argument("name")


def run(args: Any) -> int:
    """Dispatch to one action."""
    if args.action == "list":
        return _list(args.json)
    if args.action == "show":
        return _show(args.name, args.json)
    sys.stdout.write(render_sitecustomize(load_profile(args.name)))
    return 0


def _list(as_json: bool) -> int:
    rows = []
    for name, path in list_profiles():
        prof = load_profile(str(path)) if path.stem == name else load_profile(name)
        first = prof.description.split(". ")[0].rstrip(".")
        rows.append({"name": name, "hash": prof.hash, "file": str(path), "summary": first})
    if as_json:
        sys.stdout.write(json.dumps({"profiles": rows}, indent=1) + "\n")
        return 0
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        sys.stdout.write(f"{r['name']:<{width}}  {r['hash'][:12]}  {r['summary']}\n")
    return 0


def _show(name: str, as_json: bool) -> int:
    prof = load_profile(name)
    if as_json:
        sys.stdout.write(json.dumps(prof.to_dict(), indent=1) + "\n")
        return 0
    out = [f"{prof.name}  {prof.hash}", "", prof.description, ""]
    for ev in prof.evidence:
        out.append(f"  evidence: {ev}")
    for k, v in sorted(prof.env.items()):
        out.append(f"  env {k}={v.value}{' (forced)' if v.force else ''}  - {envvars.describe(k)}")
    for k, val in sorted(prof.sglang.items()):
        out.append(f"  sglang {k}={val}  - {SETTINGS[k].meaning}")
    for k, mode in sorted(prof.features.items()):
        out.append(f"  feature {k}: {mode}  - {FEATURES[k].meaning}")
    out.append(f"  from: {' <- '.join(prof.sources)}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0
