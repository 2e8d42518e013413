"""The general model's members are spelled once, in configs/release/roads_unet_cpu.py's
`MEMBERS` (issue 77): no shell script or bench spells a list of them, and the scripts that loop
over them read the config, so joining the roads model never means editing a shell list."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from crackjax.configs import lodo
from crackjax.configs.release import roads_unet, roads_unet_cpu

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*(REPO / 'scripts').glob('*.sh'), *(REPO / 'bench').glob('*.sh')])


def _code(line: str) -> str:
  return line.split('#', 1)[0]  # a comment may name members; code may not list them


@pytest.mark.parametrize('script', SCRIPTS, ids=lambda p: p.name)
def test_no_script_spells_a_list_of_the_members(script):
  members = set(roads_unet_cpu.MEMBERS)
  for number, line in enumerate(script.read_text().splitlines(), start=1):
    named = {w for w in re.findall(r'[a-z0-9_]+', _code(line)) if w in members}
    assert len(named) < 3, f'{script.name}:{number} spells members {sorted(named)}: read MEMBERS'


def test_every_members_list_is_the_configs():
  assert tuple(lodo.MEMBERS) == tuple(roads_unet_cpu.MEMBERS)
  assert tuple(roads_unet.MEMBERS) == tuple(roads_unet_cpu.MEMBERS)


@pytest.mark.parametrize(
  'script, reads',
  [
    ('release_roads_cpu.sh', "roads_unet_cpu as r; print(' '.join(r.MEMBERS))"),
    ('release_roads_gpu.sh', "roads_unet as r; print(' '.join(r.MEMBERS))"),
    ('lodo_gpu.sh', "lodo; print(' '.join(lodo.MEMBERS))"),
    ('peer_table.sh', "roads_unet_cpu as r; print(' '.join(r.MEMBERS))"),
  ],
)
def test_the_scripts_that_loop_over_the_members_read_them(script, reads):
  text = (REPO / 'scripts' / script).read_text()
  assert reads in text, script
  # And the one-liner they run prints the members, in order.
  line = next(x for x in text.splitlines() if reads in x)
  code = re.search(r'python3? -c "([^"]+)"', line).group(1)
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO)
  assert done.stdout.split() == list(roads_unet_cpu.MEMBERS), done.stderr
