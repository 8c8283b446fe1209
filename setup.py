"""Package discovery for the folder-to-package mapping declared in pyproject.toml.

setuptools cannot discover sub-packages of remapped folders on its own, so list every folder
under cli/, server/, tools/ and knowledge/ that holds an __init__.py.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {"cli": "vllm_tune.cli", "server": "vllm_tune.server", "tools": "vllm_tune.tools",
         "knowledge": "vllm_tune.knowledge"}


def _packages() -> list[str]:
    found: list[str] = []
    here = Path(__file__).parent
    for folder, package in ROOTS.items():
        for init in sorted((here / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(here / folder)
            found.append(".".join([package, *rel.parts]) if rel.parts else package)
    return found


setup(packages=_packages())
