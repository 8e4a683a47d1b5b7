"""Preflight: (HostFacts, Profile, SGLang args) -> verdicts that block or downgrade a launch before it loads."""

from sglwrap.preflight.model import FeatureChange, Status, Verdict
from sglwrap.preflight.runner import PreflightResult, run_preflight

__all__ = ["FeatureChange", "PreflightResult", "Status", "Verdict", "run_preflight"]
