"""A knowledge-base downgrade applied to a profile: a setting (``sglang:<name>``) or a forced worker variable
(``env:<NAME>``), so the launch's argv/env carries it and the manifest records why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglwrap.preflight.model import FeatureChange
from sglwrap.record import replace

if TYPE_CHECKING:
    from sglwrap.profiles import Profile


def apply_setting_change(profile: Profile, change: FeatureChange) -> Profile:
    """``profile`` with ``change`` (``sglang:attention_backend`` -> ``triton``, ``env:NCCL_P2P_DISABLE`` -> ``1``)."""
    from sglwrap.profiles import EnvSetting
    from sglwrap.settings import SETTINGS

    kind, _, name = change.feature.partition(":")
    note = f"{change.feature} set {change.mode}: {change.reason}"
    if kind == "env":
        env = {**profile.env, name: EnvSetting(str(change.mode), force=True)}
        return replace(profile, env=env, notes=profile.notes + (note,))
    setting = SETTINGS[name]
    value: object = change.mode
    if setting.kind == "int":
        value = int(str(change.mode))
    elif setting.kind == "float":
        value = float(str(change.mode))
    elif setting.kind == "bool":
        value = str(change.mode).lower() in ("1", "true", "yes")
    sglang = {**profile.sglang, name: value}
    return replace(profile, sglang=sglang, notes=profile.notes + (note,))
