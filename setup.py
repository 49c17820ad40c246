"""The one build step pyproject.toml cannot declare: the recipes, accelerate configs and sbatch templates go into
the package.

They stay top-level folders of the repository (``recipes/``, ``accelerate_configs/``, ``launch/``), where a clone
edits them; a wheel carries them as ``persetrain/_shipped/<folder>``, where ``persetrain.resources`` finds them.
Building from the sdist works the same way: MANIFEST.in puts the three folders into it. Everything else about the
package is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: persetrain.resources.SHIPPED_FOLDERS (this file cannot import the package it builds)
SHIPPED_FOLDERS = ("recipes", "accelerate_configs", "launch")


class BuildPyWithShippedFiles(build_py):
    """``build_py`` that also copies the shipped folders into ``<build>/persetrain/_shipped``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout itself
            return
        target = Path(self.build_lib) / "persetrain" / "_shipped"
        shutil.rmtree(target, ignore_errors=True)  # a build folder left by an earlier build may hold deleted files
        for folder in SHIPPED_FOLDERS:
            shutil.copytree(ROOT / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithShippedFiles})
