"""How an unsupported feature becomes a verdict: the profile's mode and the user's own flags decide.

- the user wrote the flag            -> block (warn with ``--force``)
- the profile says ``require``       -> block
- the profile says ``prefer``        -> downgrade: the feature is dropped from the launch, with the reason
- ``auto``/``off``/absent (default) -> pass (nothing asks for it)
"""

from __future__ import annotations

from sglwrap.preflight.model import Context, FeatureChange, Status, Verdict


def wanted(ctx: Context, feature: str, *flags: str) -> tuple[bool, str | None]:
    """Whether the launch asks for ``feature``, and the user's own flag for it (None if only the profile does)."""
    for flag in flags:
        info = ctx.args.table.flags.get(flag)
        if info is not None and ctx.args.is_given(info.dest) and ctx.args.get(info.dest) not in (False, None):
            return True, flag
    return ctx.mode(feature) in ("require", "prefer"), None


def unsupported(ctx: Context, check: str, feature: str, user_flag: str | None, why: str, fix: str,
                mode_off: str | None = None) -> Verdict:
    """The verdict for a wanted feature that will not work here. ``mode_off`` is the mode a downgrade sets."""
    if user_flag is not None:
        if ctx.force:
            return Verdict(check, Status.WARN, f"{user_flag} given with --force although {why}", fix)
        return Verdict(check, Status.BLOCK, f"{user_flag} was given but {why}",
                       f"remove {user_flag} (or pass --force to launch anyway); {fix}")
    mode = ctx.mode(feature)
    prof = ctx.profile.name if ctx.profile is not None else "-"
    if mode == "require":
        return Verdict(check, Status.BLOCK, f"profile {prof} requires {feature} but {why}",
                       f"set features.{feature}: prefer (or off) in profile {prof}; {fix}")
    if mode == "prefer":
        return Verdict(check, Status.DOWNGRADE, f"{feature} dropped: {why}", fix,
                       (FeatureChange(feature, mode_off, why),))
    return Verdict(check, Status.PASS, f"{feature} not requested ({why})")
