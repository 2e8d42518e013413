"""Where a CPU train step's time goes, by kind of work, for crackjax and PyTorch side by side.

The GPU profile (bench/trace_summary.py) reads device tracks; XLA's CPU backend has none, but
its thunk executor records one host event per executed HLO instruction (``args.hlo_op``) in
the ``jax.profiler`` trace. This module maps each such event to the instruction's
``metadata.op_name`` in the compiled module's text and sorts it into a kind of work by the
name stack the step carries (`crackjax.engine.step` names ``augment``, ``loss`` and
``optimizer``; autodiff writes the backward pass under ``transpose(jvp(...))``; the blocked
weight gradients of `crackjax.models.conv` run in ``while`` loops). The PyTorch peer
(bench/torch_peer.py) is profiled with ``torch.profiler`` over the same step, its phases
marked with ``record_function`` (forward, loss, backward, optimizer), and sorted into the
same kinds where the two can be compared.

Op times are summed over both threads of the CPU: on 2 cores two ops can run at once, so a
kind's op time can add up to more than the step's wall time.
"""

from __future__ import annotations

import re
from collections import defaultdict

# The rows of the table, in order. Kinds both frameworks fill come first.
KINDS: tuple[str, ...] = (
  'forward convolutions',
  'forward up-convolutions',
  'forward elementwise, pooling, concatenation',
  'loss (forward and backward)',
  'backward: input gradients',
  'backward: weight gradients',
  'backward: input + weight gradients (one call)',
  'backward: up-convolutions',
  'backward elementwise, pooling, concatenation',
  'Adam update (+ non-finite guard)',
  'augmentation',
  'copies and transposes',
  'other',
)

# Container instructions whose events span the instructions they run (counted there).
_CONTAINERS = ('while', 'call', 'conditional', 'async-start', 'async-done')
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+) = .*?\s([a-z][a-z0-9\-]*)\(')
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def hlo_ops(hlo_text: str) -> dict[str, tuple[str, str]]:
  """{instruction name: (opcode, metadata op_name)} of every instruction in `hlo_text`
  (``compiled.as_text()``)."""
  ops = {}
  for line in hlo_text.splitlines():
    m = _INSTRUCTION.match(line)
    if not m:
      continue
    name_m = _OP_NAME.search(line)
    ops[m.group(1)] = (m.group(2), name_m.group(1) if name_m else '')
  return ops


def jax_kind(instruction: str, opcode: str, op_name: str) -> str:
  """The kind of work (`KINDS`) of one HLO instruction of crackjax's train step."""
  if '/augment' in op_name or 'augment/' in op_name:
    return 'augmentation'
  if 'optimizer' in op_name:
    return 'Adam update (+ non-finite guard)'
  if '(loss' in op_name or '/loss' in op_name:
    return 'loss (forward and backward)'
  if opcode in ('copy', 'transpose') or instruction.startswith(('copy', 'transpose')):
    return 'copies and transposes'
  if 'UNet' not in op_name:
    return 'other'
  backward = 'transpose(jvp(UNet' in op_name
  if backward and '/while' in op_name:
    return 'backward: weight gradients'
  if 'conv_general_dilated' in op_name:
    return 'backward: input gradients' if backward else 'forward convolutions'
  if 'bhwi,acio' in op_name or 'dot_general' in op_name:
    return 'backward: up-convolutions' if backward else 'forward up-convolutions'
  if backward:
    return 'backward elementwise, pooling, concatenation'
  return 'forward elementwise, pooling, concatenation'


def jax_kinds(events: list[dict], hlo_text: str, steps: int, module: str = 'train_step'):
  """Op time per step (ms) by kind of the jitted `module` from the trace `events` of `steps`
  traced steps (bench/trace_summary.py `trace_events`); None if they hold no op events of it.

  Returns:
    {'kinds': {kind: ms per step}, 'ops': {instruction: ms per step} (the 15 largest),
    'op_ms': the sum, 'events': op events per step}.
  """
  ops = hlo_ops(hlo_text)
  per_kind: dict[str, float] = defaultdict(float)
  per_op: dict[str, float] = defaultdict(float)
  n = 0
  for e in events:
    args = e.get('args') or {}
    op = args.get('hlo_op')
    if e.get('ph') != 'X' or not op or module not in args.get('hlo_module', ''):
      continue
    opcode, op_name = ops.get(op, ('', ''))
    if opcode in _CONTAINERS:
      continue
    ms = e.get('dur', 0.0) / 1e3 / steps
    per_kind[jax_kind(op, opcode, op_name)] += ms
    per_op[op] += ms
    n += 1
  if not n:
    return None
  top = dict(sorted(per_op.items(), key=lambda kv: -kv[1])[:15])
  return {'kinds': dict(per_kind), 'ops': top, 'op_ms': sum(per_kind.values()), 'events': n / steps}


def torch_kind(name: str, phase: str) -> str:
  """The kind of work (`KINDS`) of one aten op of PyTorch's step run in `phase` ('forward',
  'loss', 'backward', 'optimizer' or '' outside them)."""
  lowered = name.lower()
  if phase == 'optimizer':
    return 'Adam update (+ non-finite guard)'
  if phase == 'loss':
    return 'loss (forward and backward)'
  if 'copy' in lowered or 'contiguous' in lowered or 'clone' in lowered:
    return 'copies and transposes'
  if phase == 'forward':
    if 'conv' in lowered:
      return 'forward convolutions'
    return 'forward elementwise, pooling, concatenation'
  if phase == 'backward':
    if 'convolution_backward' in lowered:
      return 'backward: input + weight gradients (one call)'
    if 'loss' in lowered or 'binary_cross_entropy' in lowered or 'sigmoid' in lowered:
      return 'loss (forward and backward)'
    return 'backward elementwise, pooling, concatenation'
  return 'other'


def torch_kinds(self_ms: list[list]) -> dict:
  """{'kinds': {kind: ms per step}, 'ops': the 15 largest ops, 'op_ms': the sum} from the
  PyTorch worker's [op, phase, self ms per step] rows (bench/torch_peer.py `TorchStep.profile`)."""
  per_kind: dict[str, float] = defaultdict(float)
  per_op: dict[str, float] = defaultdict(float)
  for name, phase, ms in self_ms:
    per_kind[torch_kind(name, phase)] += ms
    per_op[f'{name} ({phase or "-"})'] += ms
  top = dict(sorted(per_op.items(), key=lambda kv: -kv[1])[:15])
  return {'kinds': dict(per_kind), 'ops': top, 'op_ms': sum(per_kind.values())}


def report_lines(jax_profile: dict | None, torch_profile: dict | None) -> list[str]:
  """The side-by-side table: op time per step by kind, and each side's largest ops."""
  if jax_profile is None:
    return ['CPU profile: the trace holds no op events of the train step']
  lines = [
    'CPU profile, op time per step by kind (ms; summed over threads, so it can exceed the '
    'wall time):',
    f'  {"kind":<48} {"crackjax":>9} {"torch":>9}',
  ]
  jk = jax_profile['kinds']
  tk = (torch_profile or {}).get('kinds', {})
  for kind in KINDS:
    if kind not in jk and kind not in tk:
      continue
    t = f'{tk[kind]:9.1f}' if kind in tk else f'{"-":>9}'
    lines.append(f'  {kind:<48} {jk.get(kind, 0.0):9.1f} {t}')
  t_sum = f'{torch_profile["op_ms"]:9.1f}' if torch_profile else f'{"-":>9}'
  lines.append(f'  {"all ops":<48} {jax_profile["op_ms"]:9.1f} {t_sum}')
  lines.append(f'  crackjax: {jax_profile["events"]:.0f} op events per step; largest ops (ms):')
  lines += [f'    {op:<40} {ms:8.1f}' for op, ms in list(jax_profile['ops'].items())[:10]]
  if torch_profile:
    lines.append('  torch: largest ops (ms, self time; phase):')
    lines += [f'    {op:<40} {ms:8.1f}' for op, ms in list(torch_profile['ops'].items())[:10]]
  return lines
