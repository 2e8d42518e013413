"""The wheel's package list, derived from the folders; everything else is in pyproject.toml.

pyproject.toml can only list packages by hand or find them by their own path: the repository
keeps configs/ and tfds_builders/ at its top and installs them as crackjax.configs and
crackjax.tfds_builders ([tool.setuptools.package-dir]), and a find there names them
`tfds_builders.deepcrack`, not `crackjax.tfds_builders.deepcrack`. Derived here, a new builder
in tfds_builders/<name>/ (or a new folder of crackjax/) ships without an edit to either file;
tests/test_packaging.py checks the list against the folders.
"""

import tomllib
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
  """Every package the wheel installs, by its installed name.

  crackjax/'s folders with or without an ``__init__.py`` (engine/, runs/ and trainer/ have
  none; the data folders paper/data/ and models/released/ are packages too), and each folder
  that package-dir maps with its subpackages that have an ``__init__.py`` (the builders of
  tfds_builders/, configs/release/; docs/ holds pages, not packages).
  """
  found = ['crackjax'] + [
    f'crackjax.{name}'
    for name in setuptools.find_namespace_packages(str(ROOT / 'crackjax'), exclude=['*__pycache__'])
  ]
  pyproject = tomllib.loads((ROOT / 'pyproject.toml').read_text())
  for name, folder in pyproject['tool']['setuptools']['package-dir'].items():
    found += [name, *(f'{name}.{sub}' for sub in setuptools.find_packages(str(ROOT / folder)))]
  return sorted(found)


if __name__ == '__main__':  # the build backend runs this file as a script
  setuptools.setup(packages=packages())
