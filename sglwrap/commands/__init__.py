"""One module per sglwrap verb. Each defines ``add_parser(subparsers)`` and ``run(args) -> int``.

``sglwrap.cli`` imports only the module of the verb being run, so ``sglwrap diagnose`` never pays for
what ``launch`` imports.
"""

# verb -> module under sglwrap.commands; help text shown by `sglwrap --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "launch": ("launch", "plan, check and exec SGLang (sglang serve) with a profile"),
    "profiles": ("profiles", "list, show and render profiles"),
    "preflight": ("preflight", "run the preflight checks alone"),
    "memory": ("memory", "predict SGLang's GPU memory budget and OOMs"),
    "diagnose": ("diagnose", "read SGLang logs and explain what happened"),
    "bench-comm": ("bench_comm", "measure all-reduce latency and NCCL memory per profile"),
    "systemd-unit": ("systemd_unit", "print a systemd unit that runs sglwrap as a drop-in"),
    "rehearse": ("rehearse", "run the launch once with dummy weights: one request, clean stop, verdict"),
}
