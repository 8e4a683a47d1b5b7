"""The compatibility knowledge base: sourced entries in ``sglwrap/data/compat/*.yaml``, loaded and matched against
HostFacts and the parsed SGLang command line."""
