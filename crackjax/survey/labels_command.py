"""`crackjax-labels`: predicted masks out to a labelling tool, corrected labels back in.

  crackjax-labels export --predictions=OUT --coco=pre.json [--images=PHOTOS] [--polygons]
  crackjax-labels import --coco=corrected.json --images=PHOTOS --out=DATASET [--category=crack]

export: the masks of a crackjax-predict output folder as a COCO file of pre-annotations (one
RLE mask per crack component, category 'crack'; `--polygons`: outlines, for Label Studio), each
image's file_name its path under --images (default: the photos' common folder), as the
labelling task holds the photos. import: a COCO file (CVAT's or Label Studio's export: RLE or
polygons) into DATASET/images and DATASET/masks, the folders configs/finetune.py reads
(--config.data.folder.images=DATASET/images --config.data.folder.masks=DATASET/masks). An
image that is not in --images is left out with a line naming it. docs/datasets.md walks the
round trip. Needs pycocotools (pip install 'crackjax[labels]').
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from absl import flags

from crackjax import cli
from crackjax.survey import coco, survey_tables

PROG = 'crackjax-labels'
USAGE = (
  f'{PROG} export --predictions=OUT --coco=FILE [--images=DIR] [--polygons] | '
  f'{PROG} import --coco=FILE --images=DIR --out=DIR [--category=NAME]'
)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string('predictions', None, "export: crackjax-predict's output folder", fv)
  flags.DEFINE_string('coco', None, 'the COCO file to write (export) or read (import)', fv)
  flags.DEFINE_string(
    'images',
    None,
    "the photos' folder: export, what file_name is relative to (default: the photos' common "
    'folder); import, where its images are',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'polygons',
    False,
    "export: outlines as polygons (Label Studio's COCO import reads polygons, not RLE; holes "
    'and the exact pixels are lost) instead of RLE masks',
    flag_values=fv,
  )
  flags.DEFINE_string('out', None, 'import: the dataset folder (images/, masks/)', fv)
  flags.DEFINE_list('category', None, 'import: the categories that are crack (default: all)', fv)
  flags.DEFINE_bool('overwrite', False, 'replace an existing COCO file or dataset folder', fv)


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name); returns the exit status."""
  return COMMAND.run(_main, argv)


COMMAND = cli.Command(PROG, _define_flags, usage=USAGE, errors=(ValueError,))


def _main(fv: flags.FlagValues, arguments: list[str]) -> int:
  if arguments == ['export']:
    return _export(fv)
  if arguments == ['import']:
    return _import(fv)
  sys.exit(f'{PROG}: say export or import; usage: {USAGE}')


def _export(fv: flags.FlagValues) -> int:
  if not fv.predictions or not fv.coco:
    sys.exit(f'{PROG}: export needs --predictions=OUT and --coco=FILE; usage: {USAGE}')
  out, target = Path(fv.predictions), Path(fv.coco)
  table = out / 'measurements.csv'
  if not table.is_file():
    sys.exit(f'{PROG}: {out} holds no measurements.csv (a finished crackjax-predict output)')
  if target.exists() and not fv.overwrite:
    sys.exit(f'{PROG}: {target} exists; pass --overwrite to replace it.')
  rows = survey_tables.records(*survey_tables.read_table(table))
  images = Path(fv.images) if fv.images else None
  done = coco.export_masks(rows, out / 'masks', target, images_root=images, polygons=fv.polygons)
  if done.left_out:
    shown = [f'{n} ({why})' for n, why in done.left_out.items()]
    print(
      f'{PROG}: {len(shown)} photo(s) left out: {", ".join(shown[:3])}'
      + (f', ... ({len(shown)} in all)' if len(shown) > 3 else ''),
      file=sys.stderr,
    )
  kind = 'polygon outlines' if fv.polygons else 'RLE masks'
  print(
    f'{PROG}: wrote {target}: {done.images} image(s), {done.annotations} crack component(s) as '
    f'{kind} (category crack)',
    file=sys.stderr,
  )
  return 0 if done.images else 1


def _import(fv: flags.FlagValues) -> int:
  if not fv.coco or not fv.images or not fv.out:
    sys.exit(f'{PROG}: import needs --coco=FILE, --images=DIR and --out=DIR; usage: {USAGE}')
  dataset = Path(fv.out)
  if not Path(fv.images).is_dir():
    sys.exit(f'{PROG}: --images={fv.images} is not a folder')
  held = [p for p in (dataset / 'images', dataset / 'masks') if p.exists() and any(p.iterdir())]
  if held and not fv.overwrite:
    sys.exit(f'{PROG}: {held[0]} holds files; pass --overwrite or choose another --out.')
  done = coco.import_labels(Path(fv.coco), Path(fv.images), dataset, categories=fv.category)
  for line in done.lines:
    print(f'{PROG}: {line}', file=sys.stderr)
  print(
    f'{PROG}: wrote {len(done.names)} image(s) and mask(s) to {dataset}/images and '
    f'{dataset}/masks ({len(done.empty)} without a crack); fine-tune with '
    f'--config.data.folder.images={dataset}/images --config.data.folder.masks={dataset}/masks',
    file=sys.stderr,
  )
  return 0 if done.names else 1


if __name__ == '__main__':
  sys.exit(main())
