"""`sglwrap profiles list | show NAME | render NAME`."""

from __future__ import annotations

import json
import sys
from typing import Any

from sglwrap import envvars
from sglwrap.errors import EXIT_CONFIG
from sglwrap.inject import render_sitecustomize
from sglwrap.profiles import ListedProfile, load_profile, scan_profiles
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


def _where(entry: ListedProfile) -> str:
    """The source column: built-in, or the directory (with how it got on the path)."""
    if entry.source == "built-in":
        return "built-in"
    d = str(entry.path.parent)
    return {"user": f"user {d}", "/etc": d}.get(entry.source, f"{entry.source} {d}")


def _list(as_json: bool) -> int:
    """Every good profile with its hash and source on stdout; each broken file on its own line on stderr (78)."""
    from sglwrap import term

    entries = scan_profiles()
    good = [e for e in entries if e.profile is not None]
    broken = [e for e in entries if e.profile is None]
    rows = []
    for e in good:
        assert e.profile is not None
        first = e.profile.description.split(". ")[0].rstrip(".")
        rows.append({"name": e.name, "hash": e.profile.hash, "file": str(e.path), "source": e.source,
                     "where": _where(e), "summary": first})
    if as_json:
        doc = {"profiles": rows,
               "broken": [{"name": e.name, "file": str(e.path), "source": e.source, "error": e.error}
                          for e in broken]}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        import textwrap

        width = max((len(r["name"]) for r in rows), default=4)
        where = max((len(r["where"]) for r in rows), default=6)
        cols = term.wrap_width(sys.stdout)
        text = []
        for r in rows:
            head = f"{r['name']:<{width}}  {r['hash'][:12]}  {r['where']:<{where}}  "
            body = (textwrap.wrap(r["summary"], max(cols - len(head), 30), break_long_words=False,
                                  break_on_hyphens=False) if cols
                    else [r["summary"]]) or [""]
            text += [head + body[0], *(" " * len(head) + b for b in body[1:])]
        term.report("\n".join(text) + "\n")
    for e in broken:
        term.note(f"sglwrap: error: {e.error}")
    return EXIT_CONFIG if broken else 0


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
    from sglwrap import term

    term.report("\n".join(out) + "\n")  # wrapped to a terminal's width
    return 0
