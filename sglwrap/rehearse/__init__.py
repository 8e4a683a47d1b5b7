"""The rehearsal: run the launch plan with ``--load-format dummy`` on this machine, one request, a clean stop, and
diagnose's verdict on its log.

Modules, in the order data flows: ``plan`` (what to run: the launch's argv plus the rehearsal's additions, the
refusals, the timeout), ``fingerprint`` (everything that can change the outcome, hashed), ``cache`` (verdicts by
fingerprint), ``run`` (start, wait for /health, one /generate, stop, leave nothing behind), ``report`` (diagnose's
stage, cause and fix, SGLang's real numbers beside the accountant's), ``session`` (the one call both ``sglwrap
rehearse`` and ``launch --rehearse`` make).
"""
