"""What the wheel installs and how an install finds its configs: only `crackjax*` packages
(the repository's configs/ and tfds_builders/ become crackjax.configs and
crackjax.tfds_builders; setup.py derives the list from the folders, a new builder included),
the shipped configs found from any folder, the metadata a user and a type checker read."""

import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import crackjax
from crackjax import cli
from crackjax.runs import config_files

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / 'pyproject.toml').read_text())


def _package_folders() -> set[str]:
  """Every folder that holds Python files, by the name it is installed under."""
  names = set()
  for top, installed in (('crackjax', 'crackjax'), ('configs', 'crackjax.configs')):
    names |= {
      '.'.join([installed, *p.parent.relative_to(REPO / top).parts])
      for p in (REPO / top).rglob('*.py')
    }
  names |= {
    '.'.join(['crackjax.tfds_builders', *p.parent.relative_to(REPO / 'tfds_builders').parts])
    for p in (REPO / 'tfds_builders').rglob('*.py')
  }
  return names


def wheel_packages() -> list[str]:
  """The packages the wheel installs: setup.py's list, derived from the folders."""
  spec = importlib.util.spec_from_file_location('crackjax_setup', REPO / 'setup.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)  # not as __main__: lists, does not build
  return module.packages()


def test_the_wheel_installs_only_the_crackjax_namespace():
  setuptools = PYPROJECT['tool']['setuptools']
  # No hand list in pyproject.toml: setup.py derives it.
  assert 'packages' not in setuptools
  packages = set(wheel_packages())
  assert all(p == 'crackjax' or p.startswith('crackjax.') for p in packages), packages
  # Every folder of code is in it, and the data folders the package-data globs name.
  assert _package_folders() <= packages, _package_folders() - packages
  assert {'crackjax.docs', 'crackjax.models.released', 'crackjax.paper.data'} <= packages
  assert setuptools['package-dir'] == {
    'crackjax.configs': 'configs',
    'crackjax.tfds_builders': 'tfds_builders',
    'crackjax.docs': 'docs',  # data only: the pages
  }


def test_a_builder_folder_ships_and_registers_without_a_line_elsewhere():
  # A new tfds_builders/<name>/ is in the wheel with its README, registered with TFDS and
  # importable as crackjax.tfds_builders.<Class> by `import crackjax.tfds_builders`, with no
  # line naming it in pyproject.toml or tfds_builders/__init__.py. Outside its folder it needs
  # its entry in registry.DATASETS and its row in docs/datasets.md (and a config), no more:
  # docs/architecture.md, "Add a dataset".
  import tensorflow_datasets as tfds

  import crackjax.tfds_builders
  from crackjax.data import registry

  packages = set(wheel_packages())
  readmes = PYPROJECT['tool']['setuptools']['package-data']['crackjax.tfds_builders']
  assert '*/README.md' in readmes
  folders = sorted(p.parent for p in (REPO / 'tfds_builders').glob('*/__init__.py'))
  assert len(folders) >= 9
  registered = {entry.builder for entry in registry.DATASETS.values()}
  table = (REPO / 'docs' / 'datasets.md').read_text()
  for folder in folders:
    assert f'crackjax.tfds_builders.{folder.name}' in packages, folder.name
    assert (folder / 'README.md').is_file(), folder.name
    row = f'[tfds_builders/{folder.name}](../tfds_builders/{folder.name}/README.md)'
    assert row in table, f'docs/datasets.md: add the row of {folder.name}'
    for text in (REPO / 'pyproject.toml', REPO / 'tfds_builders' / '__init__.py'):
      assert not re.search(rf'\b{folder.name}\b', text.read_text()), (folder.name, text.name)
    package = importlib.import_module(f'crackjax.tfds_builders.{folder.name}')
    builders = [
      value
      for value in (getattr(package, name) for name in package.__all__)
      if isinstance(value, type) and issubclass(value, tfds.core.DatasetBuilder)
    ]
    assert builders, f'{folder.name}/__init__.py exports no builder class in __all__'
    for builder in builders:
      assert getattr(crackjax.tfds_builders, builder.__name__) is builder
      assert builder.__name__ in crackjax.tfds_builders.__all__
      assert tfds.builder_cls(builder.name) is builder
      assert builder in registered, f'{builder.name}: add its DatasetEntry to registry.DATASETS'


def test_the_source_tree_has_the_installed_names():
  # In a clone, crackjax.configs and crackjax.tfds_builders are the repository's folders.
  import crackjax.configs
  import crackjax.tfds_builders

  assert Path(crackjax.configs.__file__).parent.resolve() == REPO / 'configs'
  assert Path(crackjax.tfds_builders.__file__).parent.resolve() == REPO / 'tfds_builders'
  assert config_files.shipped_configs_dir().resolve() == REPO / 'configs'


def test_the_builders_under_their_old_top_level_name_are_refused():
  # Under two names TFDS would register every builder twice.
  done = subprocess.run(
    [sys.executable, '-c', 'import tfds_builders'],
    capture_output=True,
    text=True,
    cwd=REPO,
    timeout=120,
    env={**os.environ, 'PYTHONPATH': str(REPO)},
  )
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1] == (
    'ImportError: import crackjax.tfds_builders, not tfds_builders: the builders are part of '
    'crackjax (import crackjax.tfds_builders registers them with TFDS).'
  )


def test_a_shipped_config_is_found_from_another_folder(tmp_path, monkeypatch, capsys):
  # crackjax-train --config=configs/smoke.py:... from a folder without configs/: the shipped
  # copy, said on stderr; its `from crackjax.configs import ...` works.
  monkeypatch.chdir(tmp_path)
  argv = ['prog', '--config=configs/smoke.py', '--config.num_epochs=3']
  flag_values = cli.new_flag_values(argv)
  cli.parse_flags(flag_values, argv, prog='prog')
  assert flag_values.config.num_epochs == 3
  assert flag_values.config.data.name == 'crackforest'
  shipped = config_files.shipped_configs_dir() / 'smoke.py'
  assert capsys.readouterr().err.splitlines() == [
    f'prog: no configs/smoke.py under the current folder: using the config crackjax ships, '
    f'{shipped}.'
  ]
  # A file of that name in the current folder is the user's, and wins.
  (tmp_path / 'configs').mkdir()
  (tmp_path / 'configs' / 'smoke.py').write_text(
    'import ml_collections\n\n\ndef get_config():\n  return ml_collections.ConfigDict({"x": 1})\n'
  )
  flag_values = cli.new_flag_values(argv[:2])
  cli.parse_flags(flag_values, argv[:2], prog='prog')
  assert flag_values.config.x == 1
  assert capsys.readouterr().err == ''


def test_a_missing_config_from_another_folder_names_a_close_shipped_one(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert config_files.config_file_problem('configs/smoek.py:cpu') == (
    'configs/smoek.py does not exist; did you mean configs/smoke.py?'
  )
  assert config_files.shipped_config('configs/release/crackforest_unet_cpu.py:x') == (
    f'{config_files.shipped_configs_dir() / "release" / "crackforest_unet_cpu.py"}:x'
  )
  assert config_files.shipped_config('configs/nothing.py') is None
  assert config_files.shipped_config('/abs/configs/smoke.py') is None


def test_the_metadata_a_user_and_a_type_checker_read():
  project = PYPROJECT['project']
  assert project['license'] == 'Apache-2.0'
  assert 'Apache License' in (REPO / 'LICENSE').read_text().splitlines()[1]
  assert 'Version 2.0, January 2004' in (REPO / 'LICENSE').read_text()
  assert (REPO / 'crackjax' / 'py.typed').is_file()
  assert 'py.typed' in PYPROJECT['tool']['setuptools']['package-data']['crackjax']
  assert crackjax.__version__ in (project['version'], '0+unknown')
  assert f'## {project["version"]}' in (REPO / 'CHANGELOG.md').read_text()
  assert 'tensorboard' in project['optional-dependencies']


@pytest.mark.parametrize('name', ['orbax-checkpoint', 'grain', 'tensorflow-datasets'])
def test_the_libraries_whose_apis_move_have_an_upper_bound_the_install_meets(name):
  (requirement,) = [
    Requirement(r) for r in PYPROJECT['project']['dependencies'] if Requirement(r).name == name
  ]
  assert any(s.operator == '<' for s in requirement.specifier), requirement
  assert requirement.specifier.contains(importlib.metadata.version(name)), (
    name,
    importlib.metadata.version(name),
  )


def test_importlib_resources_stays_declared():
  # tensorflow-datasets 4.9.x imports it (through etils) but declares it only for Python < 3.9
  # (tensorflow/datasets#11212): without the line a new environment prepares no dataset.
  names = {Requirement(r).name for r in PYPROJECT['project']['dependencies']}
  assert 'importlib_resources' in names or 'importlib-resources' in names
  text = (REPO / 'pyproject.toml').read_text()
  assert 'tensorflow/datasets issue #11212' in text
  assert "No module named 'importlib_resources'" in (REPO / 'docs/troubleshooting.md').read_text()


def test_the_released_models_licence_notice_ships_and_names_every_model():
  # The wheel's metadata says Apache-2.0 (the code); the model files carry their training
  # data's licence, in a notice beside them that is a licence file of the distribution.
  notice = 'crackjax/models/released/LICENSE-MODELS.md'
  assert notice in PYPROJECT['project']['license-files']
  assert (
    'released/LICENSE-MODELS.md'
    in PYPROJECT['tool']['setuptools']['package-data']['crackjax.models']
  )
  text = (REPO / notice).read_text()
  released = REPO / 'crackjax' / 'models' / 'released'
  names = [m['name'] for p in released.glob('*.json') for m in json.loads(p.read_text())['models']]
  assert names
  for name in names:
    assert f'`{name}`' in text, name
  assert 'non-commercial research only' in text
  # The README's first lines say which licence covers what.
  head = '\n'.join((REPO / 'README.md').read_text().splitlines()[:12])
  assert 'Apache-2.0' in head and 'LICENSE-MODELS.md' in head


def test_the_docs_ship_as_package_data_and_crackjax_docs_prints_them(capsys, monkeypatch, tmp_path):
  from crackjax.runs import docs

  # The wheel carries docs/*.md as crackjax/docs/ (a hint naming docs/X.md leads somewhere).
  setuptools = PYPROJECT['tool']['setuptools']
  assert 'crackjax.docs' in wheel_packages()
  assert '*.md' in setuptools['package-data']['crackjax.docs']
  assert PYPROJECT['project']['scripts']['crackjax-docs'] == 'crackjax.runs.docs:main'
  # Every page a message names through docs.doc exists.
  named = set()
  for path in (REPO / 'crackjax').rglob('*.py'):
    named |= set(re.findall(r"""docs\.doc\(['"]([^'"#]+)""", path.read_text()))
  assert named and all((REPO / 'docs' / page).is_file() for page in named), named
  # In a source tree a message says docs/X.md; the command lists and prints the pages.
  assert docs.doc('models.md') == 'docs/models.md'
  assert docs.main([]) == 0
  listing = capsys.readouterr().out
  assert str(REPO / 'docs') in listing and 'troubleshooting' in listing
  assert docs.main(['troubleshooting', '--path']) == 0
  assert Path(capsys.readouterr().out.strip()) == REPO / 'docs' / 'troubleshooting.md'
  assert docs.main(['docs/models.md']) == 0
  assert capsys.readouterr().out == (REPO / 'docs' / 'models.md').read_text()
  assert docs.main(['nosuch']) == 1
  assert "no page 'nosuch'" in capsys.readouterr().err
  # Installed (a wheel's layout: crackjax/docs/), a message names the installed file.
  (tmp_path / 'crackjax' / 'docs').mkdir(parents=True)
  (tmp_path / 'crackjax' / 'docs' / 'models.md').write_text('# Models\n')
  monkeypatch.setattr(docs, '_PACKAGE', tmp_path / 'crackjax')
  assert docs.doc('models.md') == str(tmp_path / 'crackjax' / 'docs' / 'models.md')
