"""Facts about the machine: GPUs, links, driver and software stack."""
