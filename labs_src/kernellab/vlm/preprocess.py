"""Lab 09, an image to patches: Qwen3-VL's image preprocessing in NumPy, as transformers' image processor
(Qwen2VLImageProcessor with PIL; Qwen2VLImageProcessorPil in transformers 5) computes it:

    RGB uint8 [H, W, 3] -> smart_resize: (H', W') multiples of patch x merge = 32, H' x W' within
    [min_pixels, max_pixels], the aspect kept -> bicubic resize (PIL's, in uint8) -> x / 255 (float64 product,
    stored float32) -> (x - 0.5) / 0.5 (float32) -> the image repeated for the temporal patch of 2 ->
    pixel_values [N, 3 * 2 * 16 * 16] in the processor's patch order, image_grid_thw [1, H'/16, W'/16].

The patch order: each 2 x 2 merge window's four patches are consecutive rows (top-left, top-right,
bottom-left, bottom-right; windows row-major), and each row is (channel, frame, row in patch, column in
patch) flattened: lab 05's merge-window order, what lab 06's tower and the Conv3d patch embedding (one
GEMM) read.

resize() calls PIL where Pillow is installed (what the processor runs, so pixel_values match it
exactly); resize_numpy() is PIL's bicubic resample re-done in NumPy (its coefficients in float64, its
22-bit fixed-point taps, one pass into a uint8 image, then the other): each pass equals PIL's byte for
byte (tests/test_vlm.py), the spec a GPU resize kernel can be held to. Which pass runs first is
Pillow's choice (Pillow 13 picks per resize by a rule not reproduced here; older Pillow: horizontal
first); the two orders differ by a few uint8 levels where both sides change.

Which processor: transformers 5 picks its torchvision processor (Qwen2VLImageProcessor there; the "fast"
one of 4.57) by default where torchvision is installed. It resizes with torchvision's antialiased
bicubic in floating point, not PIL's fixed-point one, so its pixel_values are not these byte for byte
(not measured here: no torchvision). The PIL processor (Qwen2VLImageProcessorPil in 5.x, the slow
Qwen2VLImageProcessor in 4.57) is what this file matches exactly."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

# Qwen/Qwen3-VL-8B-Instruct's preprocessor_config.json
PATCH = 16                     # patch_size
MERGE = 2                      # merge_size (the 2 x 2 spatial merge)
TEMPORAL = 2                   # temporal_patch_size: an image is its own second frame
FACTOR = PATCH * MERGE         # 32: the sides' multiple
MIN_PIXELS = 65536             # size.shortest_edge (256 x 256)
MAX_PIXELS = 16777216          # size.longest_edge (4096 x 4096)
IMAGE_MEAN = (0.5, 0.5, 0.5)
IMAGE_STD = (0.5, 0.5, 0.5)
RESCALE = 1 / 255
PATCH_DIM = 3 * TEMPORAL * PATCH * PATCH     # 1536


def smart_resize(height: int, width: int, factor: int = FACTOR, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """(H', W') as transformers' smart_resize: each side rounded to a multiple of factor; when the area
    is above max_pixels (below min_pixels) both sides are scaled down (up) by the same factor, floored
    (ceiled) to multiples of factor. An aspect ratio above 200 is a ValueError, as there."""
    height, width = int(height), int(width)
    if height < 1 or width < 1:
        raise ValueError(f"image {height}x{width}: both sides must be >= 1")
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def load_image(image) -> np.ndarray:
    """An RGB uint8 array [H, W, 3] from a file path, a PIL image (converted to RGB, as the processor's
    do_convert_rgb does) or an array ([H, W, 3] uint8; [H, W] grey is repeated over 3 channels)."""
    if isinstance(image, (str, Path)):
        from PIL import Image
        with Image.open(image) as im:
            return np.asarray(im.convert("RGB"))
    if hasattr(image, "convert") and hasattr(image, "size"):          # a PIL image
        return np.asarray(image.convert("RGB"))
    a = np.asarray(image)
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] != 3 or a.dtype != np.uint8:
        raise ValueError(f"image: expected an RGB uint8 array [H, W, 3], got {a.dtype} {a.shape}")
    return a


# ---- PIL's bicubic resample, in NumPy -------------------------------------------------------------------

PRECISION_BITS = 32 - 8 - 2    # PIL's fixed-point taps (Resample.c)
CUBIC_A = -0.5                 # PIL's bicubic: Keys' cubic with a = -0.5, support 2


def _cubic(x):
    x = np.abs(x)
    a = CUBIC_A
    return np.where(x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1,
                    np.where(x < 2.0, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def resample_coeffs(in_size: int, out_size: int):
    """PIL's precompute_coeffs + normalize_coeffs_8bpc for the bicubic filter: (xmin [out], count [out]: the
    inputs each output reads, taps [out, k] int64: the fixed-point weights, 0 past count). Downscaling widens the filter
    by the scale (antialiasing); each row's weights are normalised to sum 1 before rounding to 22 bits."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 2.0 * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(out_size) + 0.5) * scale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    xmax = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.int64) - xmin
    x = np.arange(ksize)
    w = _cubic((x[None, :] + xmin[:, None] - center[:, None] + 0.5) * (1.0 / filterscale))
    w = np.where(x[None, :] < xmax[:, None], w, 0.0)
    ww = np.zeros(out_size)
    for j in range(ksize):                 # PIL sums the weights in tap order
        ww = ww + w[:, j]
    w = np.where(ww[:, None] != 0.0, w / np.where(ww == 0.0, 1.0, ww)[:, None], w)
    one = float(1 << PRECISION_BITS)
    taps = np.where(w < 0, np.trunc(-0.5 + w * one), np.trunc(0.5 + w * one)).astype(np.int64)
    return xmin, xmax, taps


def _pass(img, xmin, taps, axis):
    """One PIL pass along `axis` (1: horizontal, 0: vertical) of a uint8 [H, W, C] image -> uint8."""
    a = np.moveaxis(img.astype(np.int64), axis, 0)                       # [in, other, C]
    n_in = a.shape[0]
    acc = np.full((len(xmin),) + a.shape[1:], 1 << (PRECISION_BITS - 1), np.int64)
    for j in range(taps.shape[1]):
        idx = np.minimum(xmin + j, n_in - 1)                             # taps past the end are 0
        acc += a[idx] * taps[:, j].reshape(-1, *([1] * (a.ndim - 1)))
    out = np.clip(acc >> PRECISION_BITS, 0, 255)                         # PIL's clip8
    return np.moveaxis(out.astype(np.uint8), 0, axis)


def resize_numpy(img, height: int, width: int, order: str = "h") -> np.ndarray:
    """PIL's Image.resize((width, height), BICUBIC) of an RGB uint8 [H, W, 3] array, in NumPy. order "h":
    the horizontal pass (over only the input rows the vertical pass reads) into uint8, then the vertical
    pass, as Pillow's Resample.c has long done; "v": the vertical pass first. Each pass is PIL's byte for
    byte; Pillow 13 picks the order per resize by a rule of its own, and the two orders round the
    intermediate image differently (a few uint8 levels) when both sides change."""
    img = np.asarray(img)
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img.copy()
    if order not in ("h", "v"):
        raise ValueError(f"order must be 'h' or 'v', not {order!r}")
    ymin, ycount, ytaps = resample_coeffs(h, height)
    xmin, _, xtaps = resample_coeffs(w, width)
    if order == "v":
        img = _pass(img, ymin, ytaps, axis=0) if h != height else img
        return _pass(img, xmin, xtaps, axis=1) if w != width else img
    if w != width:
        first, last = int(ymin[0]), int(ymin[-1] + ycount[-1])
        img = _pass(img[first:last], xmin, xtaps, axis=1)
        ymin = ymin - first
    if h != height:
        img = _pass(img, ymin, ytaps, axis=0)
    return img


def resize(img, height: int, width: int) -> np.ndarray:
    """Bicubic resize of an RGB uint8 [H, W, 3] array to [height, width, 3], as the processor does it:
    PIL's Image.resize(BICUBIC) where Pillow is installed, else resize_numpy (the same bytes)."""
    img = load_image(img)
    try:
        from PIL import Image
    except ImportError:
        return resize_numpy(img, height, width)
    if img.shape[:2] == (height, width):
        return img.copy()
    return np.asarray(Image.fromarray(img).resize((int(width), int(height)), Image.Resampling.BICUBIC))


# ---- rescale, normalise, patches ------------------------------------------------------------------------

def normalize(img, mean=IMAGE_MEAN, std=IMAGE_STD) -> np.ndarray:
    """uint8 [H, W, 3] -> float32 [3, H, W]: x * (1/255) in float64 stored as float32, then (x - mean) / std
    in float32 (the processor's rescale and normalize, operation for operation)."""
    x = (np.asarray(img).astype(np.float64) * RESCALE).astype(np.float32).transpose(2, 0, 1)
    m, s = np.asarray(mean, np.float32)[:, None, None], np.asarray(std, np.float32)[:, None, None]
    return (x - m) / s


def patchify(x, patch: int = PATCH, merge: int = MERGE, temporal: int = TEMPORAL):
    """float32 [3, H, W] -> (pixel_values [gh * gw, 3 * temporal * patch^2], gh, gw): rows in merge-window
    order, each (channel, frame, row, column); the frames are copies of the image."""
    c, h, w = x.shape
    if h % (patch * merge) or w % (patch * merge):
        raise ValueError(f"image {h}x{w}: sides must be multiples of patch x merge = {patch * merge}")
    gh, gw = h // patch, w // patch
    p = x.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.broadcast_to(p[:, :, :, :, :, None], (*p.shape[:5], temporal, patch, patch))
    return np.ascontiguousarray(p.reshape(gh * gw, c * temporal * patch * patch)), gh, gw


def unpatchify(pixel_values, grid_h: int, grid_w: int, patch: int = PATCH, merge: int = MERGE,
               temporal: int = TEMPORAL) -> np.ndarray:
    """patchify's inverse (frame 0): pixel_values [gh * gw, 3 * temporal * patch^2] -> [3, H, W]."""
    p = np.asarray(pixel_values).reshape(grid_h // merge, grid_w // merge, merge, merge, 3, temporal, patch, patch)
    return p[:, :, :, :, :, 0].transpose(4, 0, 2, 5, 1, 3, 6).reshape(3, grid_h * patch, grid_w * patch)


def preprocess(images, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS, mean=IMAGE_MEAN, std=IMAGE_STD,
               resize_fn=None):
    """One image or a list (paths, PIL images, RGB uint8 arrays) -> (pixel_values float32 [sum N, 1536],
    image_grid_thw int64 [images, 3] of (1, grid_h, grid_w)): the processor's pixel_values and
    image_grid_thw. resize_fn: resize (PIL, the default) or resize_numpy."""
    if not isinstance(images, (list, tuple)):
        images = [images]
    resize_fn = resize_fn or resize
    rows, grids = [], []
    for im in images:
        a = load_image(im)
        h, w = smart_resize(a.shape[0], a.shape[1], FACTOR, min_pixels, max_pixels)
        p, gh, gw = patchify(normalize(resize_fn(a, h, w), mean, std))
        rows.append(p)
        grids.append((1, gh, gw))
    return np.concatenate(rows), np.array(grids, np.int64)


def image_tokens(grid_thw, merge: int = MERGE) -> list[int]:
    """The number of image-pad tokens each image takes in the prompt: t x h x w / merge^2."""
    return [int(t * h * w) // merge ** 2 for t, h, w in np.asarray(grid_thw).reshape(-1, 3)]


def split_patches(pixel_values, grid_thw) -> list:
    """pixel_values split per image (t x h x w rows each)."""
    sizes = [int(t * h * w) for t, h, w in np.asarray(grid_thw).reshape(-1, 3)]
    if sum(sizes) != len(pixel_values):
        raise ValueError(f"pixel_values has {len(pixel_values)} rows; image_grid_thw gives {sum(sizes)}")
    return np.split(np.asarray(pixel_values), np.cumsum(sizes)[:-1])
