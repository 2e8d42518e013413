"""The layout's rules, checked from the source (docs/architecture.md): no import cycle inside
crackjax, no private crackjax name used from outside it, crackjax never imports configs/, and
nothing edits sys.path."""

import ast
import collections
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
  parts = path.relative_to(REPO).with_suffix('').parts
  return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _crackjax_modules() -> dict[str, ast.Module]:
  return {
    _module_name(p): ast.parse(p.read_text(), str(p)) for p in (REPO / 'crackjax').rglob('*.py')
  }


def _imported(tree: ast.Module) -> set[str]:
  """Absolute names imported by a module: `from a import b` gives a.b if that is a module of
  crackjax, else a (importing a package's submodule does not depend on the package's own
  code beyond its __init__, which imports nothing eagerly)."""
  modules = set(_module_names())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      for a in node.names:
        full = f'{node.module}.{a.name}'
        names.add(full if full in modules else node.module)
  return names


def _module_names() -> list[str]:
  return [_module_name(p) for p in (REPO / 'crackjax').rglob('*.py')]


def test_no_import_cycle_in_crackjax():
  modules = _crackjax_modules()
  graph = {
    m: {t for t in _imported(tree) if t in modules and t != m} for m, tree in modules.items()
  }
  state: dict[str, int] = {}
  path: list[str] = []
  cycles = []

  def visit(m):
    state[m] = 1
    path.append(m)
    for n in sorted(graph[m]):
      if state.get(n) == 1:
        cycles.append([*path[path.index(n) :], n])
      elif n not in state:
        visit(n)
    path.pop()
    state[m] = 2

  for m in sorted(graph):
    if m not in state:
      visit(m)
  assert not cycles, cycles
  # The check sees real edges: the loop imports checkpoints, scoring and the step.
  assert {
    'crackjax.training.checkpoints',
    'crackjax.evaluation.scoring',
    'crackjax.training.step',
  } <= graph['crackjax.training.loop']


def _outside_files() -> list[Path]:
  files = [REPO / 'launch.py']
  for folder in ('tests', 'bench', 'configs', 'tfds_builders'):
    files += sorted((REPO / folder).rglob('*.py'))
  return files


def test_no_private_crackjax_name_used_outside_crackjax():
  used = []
  for path in _outside_files():
    tree = ast.parse(path.read_text(), str(path))
    aliases = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (node.module or '').startswith('crackjax'):
        used += [f'{path.name}: {node.module}.{a.name}' for a in node.names if a.name[0] == '_']
        aliases.update(a.asname or a.name for a in node.names)
      elif isinstance(node, ast.Import):
        aliases.update(
          (a.asname or a.name.split('.')[0]) for a in node.names if a.name.startswith('crackjax')
        )
    for node in ast.walk(tree):
      if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
        and node.attr.startswith('_')
        and not node.attr.startswith('__')
      ):
        used.append(f'{path.name}:{node.lineno}: {node.value.id}.{node.attr}')
  assert not used, used


def test_crackjax_does_not_import_configs_and_nothing_edits_sys_path():
  offenders = collections.defaultdict(list)
  for name, tree in _crackjax_modules().items():
    if any(t == 'configs' or t.startswith('configs.') for t in _imported(tree)):
      offenders['imports configs'].append(name)
  for path in [*(REPO / 'crackjax').rglob('*.py'), *_outside_files()]:
    if 'sys.path.insert' in path.read_text() or 'sys.path.append' in path.read_text():
      if path.name != 'test_architecture.py':
        offenders['edits sys.path'].append(str(path.relative_to(REPO)))
  assert not offenders, dict(offenders)


def test_one_restore_path():
  # Training, evaluation, the runner, prediction and export restore through checkpoints.restore.
  users = sorted(
    str(p.relative_to(REPO))
    for p in (REPO / 'crackjax').rglob('*.py')
    if 'StandardRestore' in p.read_text() or 'restore_latest_readable(' in p.read_text()
  )
  assert users == ['crackjax/training/checkpoints.py']


# The layers of docs/architecture.md, bottom first: a module imports only from its own layer or
# a lower one. A member is a package (covering its submodules) or a module; a module belongs to
# its longest member, so a package may keep a lower part (evaluation's protocols and metrics)
# and a higher one (its scoring and command).
LAYERS = (
  ('foundation', ('crackjax.config.flags', 'crackjax.config.plugins', 'crackjax.runs')),
  (
    'evaluation protocols',
    (
      'crackjax.evaluation',
      'crackjax.evaluation.aggregate',
      'crackjax.evaluation.matching',
      'crackjax.evaluation.protocols',
      'crackjax.evaluation.thinning',
    ),
  ),
  ('models and losses', ('crackjax.models', 'crackjax.losses')),
  ('data', ('crackjax.data',)),
  (
    'training parts',
    ('crackjax.training', 'crackjax.evaluation.inference', 'crackjax.evaluation.plots'),
  ),
  ('experiment', ('crackjax.config.validation', 'crackjax.experiment')),
  ('scoring', ('crackjax.evaluation.scoring',)),
  ('training loop', ('crackjax.training.loop',)),
  ('applications', ('crackjax.deploy', 'crackjax.paper', 'crackjax.evaluation.evaluate_command')),
)
INDEPENDENT = (('crackjax.deploy', 'crackjax.paper'),)


def _layer_of(module: str) -> tuple[int, str]:
  found = [
    (len(m), i, m)
    for i, (_, members) in enumerate(LAYERS)
    for m in members
    if module == m or module.startswith(m + '.')
  ]
  if found:
    _, i, m = max(found)
    return i, m
  raise AssertionError(f'{module} is in no layer of LAYERS (add it, and to docs/architecture.md)')


def test_modules_import_only_their_layer_or_below():
  modules = _crackjax_modules()
  upward, across = [], []
  for name, tree in modules.items():
    if name == 'crackjax':  # the package's lazy `crackjax.Predictor`
      continue
    layer, member = _layer_of(name)
    for target in _imported(tree):
      if target == 'crackjax' or not target.startswith('crackjax.'):
        continue
      target_layer, target_member = _layer_of(target)
      if target_layer > layer:
        upward.append(f'{name} ({LAYERS[layer][0]}) -> {target} ({LAYERS[target_layer][0]})')
      if {member, target_member} in [set(pair) for pair in INDEPENDENT]:
        across.append(f'{name} -> {target}')
  assert not upward, upward
  assert not across, across


def test_layer_check_sees_an_upward_import():
  # The rule can fail: a foundation module importing the trainer is reported.
  tree = ast.parse('from crackjax.training import loop\n')
  layer, _ = _layer_of('crackjax.runs.identity')
  targets = [t for t in _imported(tree) if t.startswith('crackjax.')]
  assert targets == ['crackjax.training.loop'] and _layer_of(targets[0])[0] > layer
