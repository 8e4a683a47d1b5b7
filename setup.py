"""Package layout: the top-level profiles/ and sitecustomize_templates/ folders ship inside the package
as sglwrap/_profiles and sglwrap/_templates (pyproject.toml cannot map folders and find packages at once)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["sglwrap", "sglwrap.*"]) + ["sglwrap._profiles", "sglwrap._templates"],
    package_dir={"sglwrap._profiles": "profiles", "sglwrap._templates": "sitecustomize_templates"},
)
