"""What a `jax.profiler` trace says about the device: how busy it was, and where its time went.

Reads the Perfetto file that ``jax.profiler.start_trace(dir, create_perfetto_trace=True)``
writes (``**/perfetto_trace.json.gz``, Chrome trace events) without TensorBoard or xprof,
which the GPU image lacks. Used by bench/train_step.py (``--profile_steps``: the kernels of
the isolated step) and bench/loop_vs_step.py (``--profile_steps``: the loop's idle time).

* `device_idle`: busy and idle time of the device tracks over the traced window.
* `kernels`: the device time per step by kernel name and by kind of kernel
  (`CATEGORIES`: cuDNN's convolution passes by their names' fprop / dgrad / wgrad, other
  cuDNN / CUTLASS / GEMM kernels, layout transposes, reductions, XLA's elementwise fusions,
  copies), so a speed-up can start from what takes the time.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

# (kind, pattern on the kernel's name), the first match wins. Names as XLA and cuDNN give them
# on Hopper, e.g. 'sm90_xmma_fprop_implicit_gemm_bf16bf16_...', 'loop_add_fusion',
# 'input_reduce_fusion_3', 'cutlass3x_sm90_tensorop_gemm_...', 'nchwToNhwcKernel' ('conv' but
# not 'convert': a dtype conversion, e.g. 'loop_convert_fusion', is an elementwise fusion).
CATEGORIES: tuple[tuple[str, str], ...] = (
  ('convolution forward (fprop)', r'fprop'),
  ('convolution data gradient (dgrad)', r'dgrad'),
  ('convolution weight gradient (wgrad)', r'wgrad'),
  ('other cuDNN / CUTLASS / GEMM', r'xmma|cutlass|gemm|cudnn|conv(?!ert)|sm\d\d_'),
  ('layout transposes', r'transpose|nchw|nhwc'),
  ('reductions', r'reduc'),
  ('XLA fusions (elementwise)', r'fusion|^loop_|^input_|^wrapped_'),
  ('copies and memsets', r'memcpy|memset|copy'),
)


def category(name: str) -> str:
  """The kind of kernel `name` is (`CATEGORIES`), 'other' if none fits."""
  lowered = name.lower()
  for kind, pattern in CATEGORIES:
    if re.search(pattern, lowered):
      return kind
  return 'other'


def union_length(intervals: list[tuple[float, float]]) -> float:
  """The length covered by the union of `intervals` ([start, end] pairs)."""
  total, end = 0.0, float('-inf')
  for a, b in sorted(intervals):
    if b <= end:
      continue
    total += b - max(a, end)
    end = b
  return total


def newest_trace(profile_dir: str | Path) -> Path | None:
  """The newest ``perfetto_trace.json.gz`` under `profile_dir`, or None."""
  files = sorted(
    Path(profile_dir).glob('**/perfetto_trace.json.gz'), key=lambda p: p.stat().st_mtime
  )
  return files[-1] if files else None


def trace_events(trace: str | Path | None) -> list[dict]:
  """The Chrome trace events of the Perfetto file `trace` ([] for None)."""
  if trace is None:
    return []
  data = json.loads(gzip.open(trace).read())
  return data['traceEvents'] if isinstance(data, dict) else data


def device_spans(profile_dir: str | Path) -> dict | None:
  """The device events of the newest Perfetto trace under `profile_dir`: {'trace': its path,
  'devices': the device process names, 'tracks': 'streams' or 'all device tracks', 'spans':
  the complete ('X') events, of the stream threads only where there are any (XLA's module
  and op tracks span the kernels they hold)}. None without a trace or device tracks (the
  CPU backend)."""
  trace = newest_trace(profile_dir)
  if trace is None:
    return None
  events = trace_events(trace)
  devices, threads = {}, {}
  for e in events:
    if e.get('ph') != 'M':
      continue
    name = (e.get('args') or {}).get('name', '')
    if e.get('name') == 'process_name' and name.startswith('/device:'):
      devices[e['pid']] = name
    elif e.get('name') == 'thread_name':
      threads[(e['pid'], e.get('tid'))] = name
  spans = [
    (e, threads.get((e['pid'], e.get('tid')), ''))
    for e in events
    if e.get('ph') == 'X' and e.get('pid') in devices
  ]
  if not spans:
    return None
  streams = [e for e, t in spans if 'stream' in t.lower()]
  return {
    'trace': str(trace),
    'devices': sorted(set(devices.values())),
    'tracks': 'streams' if streams else 'all device tracks',
    'spans': streams or [e for e, _ in spans],
  }


def _busy(spans: list[dict]) -> tuple[float, float]:
  """(window, busy) in microseconds: first to last event, and the union of the events."""
  intervals = [(float(e['ts']), float(e['ts']) + float(e.get('dur', 0))) for e in spans]
  window = max(b for _, b in intervals) - min(a for a, _ in intervals)
  return window, union_length(intervals)


def device_idle(profile_dir: str | Path) -> dict | None:
  """Device busy / idle time in the newest Perfetto trace under `profile_dir` (`device_spans`:
  the window runs from the first to the last device event). None without device tracks."""
  found = device_spans(profile_dir)
  if found is None:
    return None
  window, busy = _busy(found['spans'])
  return {
    'trace': found['trace'],
    'devices': found['devices'],
    'tracks': found['tracks'],
    'window_ms': window / 1e3,
    'busy_ms': busy / 1e3,
    'idle_fraction': 1.0 - busy / window if window > 0 else 0.0,
  }


def kernels(profile_dir: str | Path, steps: int, top: int = 15) -> dict | None:
  """Where the device time of `steps` traced steps went (the newest trace under
  `profile_dir`): per step, the `top` kernels by time and every kind of kernel
  (`category`), each with its share of the summed kernel time; the busy and idle time as
  `device_idle`. None without device tracks."""
  found = device_spans(profile_dir)
  if found is None:
    return None
  total: dict[str, float] = defaultdict(float)
  count: dict[str, int] = defaultdict(int)
  for e in found['spans']:
    total[e.get('name', '?')] += float(e.get('dur', 0))
    count[e.get('name', '?')] += 1
  summed = sum(total.values()) or 1.0
  kinds: dict[str, float] = defaultdict(float)
  for name, us in total.items():
    kinds[category(name)] += us
  window, busy = _busy(found['spans'])
  ranked = sorted(total.items(), key=lambda kv: -kv[1])
  return {
    'trace': found['trace'],
    'devices': found['devices'],
    'tracks': found['tracks'],
    'steps': steps,
    'window_ms_per_step': window / 1e3 / steps,
    'busy_ms_per_step': busy / 1e3 / steps,
    'idle_fraction': 1.0 - busy / window if window > 0 else 0.0,
    'kernel_ms_per_step': summed / 1e3 / steps,
    'distinct_kernels': len(total),
    'launches_per_step': sum(count.values()) / steps,
    'categories': [
      {'kind': kind, 'ms_per_step': us / 1e3 / steps, 'share': us / summed}
      for kind, us in sorted(kinds.items(), key=lambda kv: -kv[1])
    ],
    'top': [
      {
        'name': name,
        'kind': category(name),
        'launches_per_step': count[name] / steps,
        'ms_per_step': us / 1e3 / steps,
        'share': us / summed,
      }
      for name, us in ranked[:top]
    ],
  }


def report_lines(summary: dict | None, top: int = 10) -> list[str]:
  """`kernels`'s summary as text lines (one line when there is no device trace)."""
  if summary is None:
    return ['profile: no device tracks in the trace (the CPU backend records none)']
  lines = [
    f'profile ({summary["steps"]} steps, {summary["tracks"]} of {", ".join(summary["devices"])}): '
    f'{summary["busy_ms_per_step"]:.2f} ms busy of {summary["window_ms_per_step"]:.2f} ms per '
    f'step ({summary["idle_fraction"]:.1%} idle), {summary["kernel_ms_per_step"]:.2f} ms of '
    f'kernels, {summary["launches_per_step"]:.0f} launches of {summary["distinct_kernels"]} '
    'kernels per step',
    '  by kind:',
  ]
  lines += [
    f'    {c["share"]:6.1%} {c["ms_per_step"]:8.3f} ms  {c["kind"]}' for c in summary['categories']
  ]
  lines.append(f'  top {min(top, len(summary["top"]))} kernels:')
  for k in summary['top'][:top]:
    name = k['name'] if len(k['name']) <= 90 else k['name'][:87] + '...'
    lines.append(
      f'    {k["share"]:6.1%} {k["ms_per_step"]:8.3f} ms  x{k["launches_per_step"]:g}  {name}'
    )
  return lines
