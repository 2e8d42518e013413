"""Reading one image or mask, validating loudly.

* Every file is read as viewers show it (`upright`): a photo's EXIF orientation (a phone's
  portrait shot is stored sideways with Orientation 6) is applied to images and masks alike,
  as crackjax-predict does, so that a mask drawn on the photo as shown fits it.
* `load_rgb` decodes an image fully (so truncated files fail here, naming the file) and
  converts it to RGB (grey, palette, RGBA and 16-bit images are accepted). Images with more
  than 8 bits are read by their actual range: values up to 1023 / 4095 / 16383 / 65535 are
  10- / 12- / 14- / 16-bit data (`full_range`), so 12-bit data in a 16-bit file is not
  stored almost black.
* `load_mask` turns a mask file into uint8 HxW with 1 = crack. Accepted without comment:
  values {0, 1} or {0, max} (max = 255 for 8-bit, the `full_range` of high-bit-depth files,
  1 for 1-bit files). Anything else (e.g. JPEG-compressed masks, anti-aliased strokes) is
  thresholded at ``value > threshold * max`` (default 0.5, i.e. > 127.5 for 8-bit). Colour
  masks whose channels differ are converted to grey first.
"""

from __future__ import annotations

import numpy as np
import PIL.Image
import PIL.ImageOps
from etils import epath

from crackjax.tfds_builders.errors import DatasetError
from crackjax.tfds_builders.split_report import note

#: Where `upright` keeps the EXIF orientation it applied (1-8), for messages.
ORIENTATION_INFO = 'crackjax_exif_orientation'
#: The EXIF orientations that swap width and height (a quarter turn, with or without a flip).
QUARTER_TURNS = (5, 6, 7, 8)


def upright(image: PIL.Image.Image) -> PIL.Image.Image:
  """``image`` as viewers show it: its EXIF orientation (2-8) applied by
  `PIL.ImageOps.exif_transpose` (crackjax-predict turns photos the same way), the tag it
  applied kept in ``info[ORIENTATION_INFO]``. An image without the tag is returned as it is."""
  orientation = image.getexif().get(0x0112, 1)  # 0x0112: Orientation
  if orientation not in range(2, 9):
    return image
  turned = PIL.ImageOps.exif_transpose(image)
  turned.info[ORIENTATION_INFO] = orientation
  return turned


def read_pil(path: epath.PathLike, what: str = 'image') -> PIL.Image.Image:
  """Opens and fully decodes ``path`` (PIL is lazy: force it so bad files fail here), turned
  `upright` by its EXIF orientation."""
  path = epath.Path(path)
  try:
    with path.open('rb') as f:
      image = PIL.Image.open(f)
      image.load()
      image = upright(image)
  except Exception as e:  # OSError, SyntaxError, ValueError, DecompressionBombError ...
    raise DatasetError(f'Cannot read {what} {path}: {type(e).__name__}: {e}') from e
  if image.width == 0 or image.height == 0:
    raise DatasetError(f'{what.capitalize()} {path} is empty ({image.width}x{image.height}).')
  return image


def full_range(maximum: float) -> int:
  """The full scale of integer data whose largest value is ``maximum``: 255 up to 255, else
  the smallest of 2**10 - 1, 2**12 - 1, 2**14 - 1, 2**16 - 1 that holds it (12-bit data in a
  16-bit file: 4095), else ``maximum`` itself."""
  if maximum <= 255:
    return 255
  for bits in (10, 12, 14, 16):
    if maximum < 2**bits:
      return 2**bits - 1
  return int(maximum)


def _to_8bit(array: np.ndarray) -> np.ndarray:
  if array.dtype == np.uint8:
    return array
  if array.dtype == bool:
    return array.astype(np.uint8) * 255
  if np.issubdtype(array.dtype, np.floating):
    top = 1.0 if array.max(initial=0) <= 1.0 else float(array.max())
  else:
    top = float(full_range(array.max(initial=0)))
  return np.clip(np.round(array.astype(np.float64) * (255.0 / top)), 0, 255).astype(np.uint8)


def load_rgb(path: epath.PathLike) -> PIL.Image.Image:
  """Reads an image of any common format/mode as an 8-bit RGB ``PIL.Image``.

  Grey images of more than 8 bits are scaled by their `full_range` (12-bit data in a 16-bit
  file by 4095, not 65535); that correction is noted (see `note`) unless the data is 16-bit.
  """
  image = read_pil(path, 'image')
  if image.mode == 'RGB':
    return image
  if image.mode in ('I', 'I;16', 'I;16B', 'I;16L', 'F'):  # 16-bit / float grey: scale to 8 bits.
    array = np.asarray(image)
    if not np.issubdtype(array.dtype, np.floating):
      top = full_range(array.max(initial=0))
      if 255 < top < 65535:
        bits = top.bit_length()
        note(
          'high_bit_depth',
          path,
          f'max {array.max()}: {bits}-bit',
          f'Image {path} holds {bits}-bit data (maximum {array.max()}); scaled by {top}.',
        )
    return PIL.Image.fromarray(_to_8bit(array), mode='L').convert('RGB')
  return image.convert('RGB')  # L, 1, P, RGBA, LA, CMYK, YCbCr ...


def mask_array(path: epath.PathLike, polarity: str = 'bright') -> np.ndarray:
  """The raw 2-D values of a mask file. A colour mask (its channels differ) is reduced to its
  brightest channel (`polarity` 'bright' or 'auto': a crack drawn in any colour on black, e.g.
  pure red, is crack; luma read red at 30% and lost it) or its darkest (`polarity` 'dark': a
  crack in any colour on white)."""
  image = read_pil(path, 'mask')
  if image.mode == 'P':
    image = image.convert('RGBA' if 'transparency' in image.info else 'RGB')
  array = np.asarray(image)
  if array.ndim == 3:
    array = array[..., :3] if array.shape[2] >= 3 else array[..., :1]
    if all(np.array_equal(array[..., 0], array[..., c]) for c in range(1, array.shape[2])):
      array = array[..., 0]
    else:
      how = 'darkest' if polarity == 'dark' else 'brightest'
      note(
        'colour_mask',
        path,
        '',
        f'Mask {path} is a colour image; each pixel read as its {how} channel before thresholding.',
      )
      array = array.min(axis=2) if polarity == 'dark' else array.max(axis=2)
  return array


def binarize(
  array: np.ndarray, path: epath.PathLike, *, threshold: float = 0.5, polarity: str = 'bright'
) -> np.ndarray:
  """uint8 HxW, 1 = crack, from raw mask values (see the module docstring).

  Args:
    array: 2-D mask values (bool, uint8, uint16, int32 or float).
    path: the file, for messages.
    threshold: fraction of the full range above which a non-binary value is crack.
    polarity: 'bright' (crack = high values), 'dark' (crack = low values) or 'auto' (crack =
      the minority: if more than half the pixels would be crack, the mask is inverted).
  """
  if polarity not in ('bright', 'dark', 'auto'):
    raise ValueError(f"polarity must be 'bright', 'dark' or 'auto', got {polarity!r}")
  if not 0.0 < threshold < 1.0:
    raise ValueError(f'threshold must be in (0, 1), got {threshold}')
  array = np.asarray(array)
  if array.ndim != 2:
    raise DatasetError(f'Mask {path} has shape {array.shape}; expected a 2-D (grey) mask.')
  if array.dtype == bool:
    crack = array
  else:
    if np.issubdtype(array.dtype, np.floating):
      full = 1.0 if array.max(initial=0) <= 1.0 else 255.0
    elif array.dtype == np.uint8:
      full = 255
    else:
      full = full_range(array.max(initial=0))
    values = np.unique(array)
    if set(values.tolist()) <= {0, 1}:
      crack = array == 1
    elif set(values.tolist()) <= {0, full}:
      crack = array == full
    else:
      cut = threshold * full
      crack = array > cut
      shown = ', '.join(f'{v:g}' for v in values[:6]) + (', ...' if len(values) > 6 else '')
      note(
        'non_binary',
        path,
        f'{len(values)} values; crack = value > {cut:g}',
        f'Mask {path} is not binary ({len(values)} distinct values: {shown}); '
        f'thresholded: crack = value > {cut:g} ({threshold:g} of {full:g}).',
      )
  if polarity == 'dark':
    crack = ~crack
  elif polarity == 'auto' and crack.mean() > 0.5:
    crack = ~crack
  return crack.astype(np.uint8)


def load_mask(
  path: epath.PathLike, *, threshold: float = 0.5, polarity: str = 'bright'
) -> np.ndarray:
  """Reads a mask file as uint8 HxW with 1 = crack (see `binarize`)."""
  return binarize(mask_array(path, polarity), path, threshold=threshold, polarity=polarity)


def check_same_size(
  image: PIL.Image.Image,
  mask: np.ndarray,
  image_path: epath.PathLike,
  mask_path: epath.PathLike,
) -> None:
  """Raises DatasetError naming both files if ``mask`` (HxW) is not ``image``'s size."""
  if mask.shape != (image.height, image.width):
    orientation = image.info.get(ORIENTATION_INFO, 1)
    turned = ''
    if orientation in QUARTER_TURNS:
      # The image is stored sideways; a mask of its stored size was drawn on it unturned.
      turned = (
        f' as shown: its EXIF orientation {orientation} turns its stored '
        f'{image.height}x{image.width} pixels a quarter turn (images are read as viewers show '
        'them). Save the mask turned the same way, or the image without the orientation tag '
        '(e.g. PIL.ImageOps.exif_transpose) if the mask fits its stored pixels'
      )
    raise DatasetError(
      f'Mask {mask_path} is {mask.shape[1]}x{mask.shape[0]} (WxH) but its image {image_path} '
      f'is {image.width}x{image.height}{turned}.'
    )
