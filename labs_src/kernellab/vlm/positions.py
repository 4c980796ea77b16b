"""Lab 09, where each token sits: Qwen3-VL's multimodal rotary positions (M-RoPE), as transformers'
Qwen3VLModel.get_rope_index and Qwen3VLTextRotaryEmbedding compute them, in NumPy.

Every token has three positions (t, h, w).
  - A text token: t = h = w = the running position, which then moves on by one.
  - An image of grid (1, gh, gw) patches is gh/2 x gw/2 tokens after the 2 x 2 merge, row-major; the token
    at merged row r, column c has t = start, h = start + r, w = start + c (start: the running position).
    After the image the running position moves on by max(gh, gw) / 2, not by its token count.
  - rope delta = max position + 1 - sequence length (<= 0 with an image): decoding after the prompt, the
    token in sequence slot s sits at position s + delta on all three axes (plain 1-D RoPE, shifted).

The rotary: 64 frequencies inv_i = theta^(-i/64) (head_dim 128), each rotated by one axis's position,
interleaved (mrope_section [24, 20, 20]): frequency i takes h where i % 3 == 1 and i < 3 x 20, w where
i % 3 == 2 and i < 3 x 20, t otherwise (recomposition_frequencies; transformers 4.57's
apply_interleaved_mrope is the same rule). mrope_table gives cos, sin [T, 64] float32 computed in float64:
row t is token t's, the per-token table lab 07's attention_07_rope_prefill reads with p0 = 0.

transformers 5.x finds the image runs from mm_token_type_ids (the processor's), 4.57 from the
vision-start token before each run; both give the same positions for a prompt the processor made. Here
the runs are found from the image token id and consumed in image_grid_thw's order."""
from __future__ import annotations

import numpy as np

IMAGE_TOKEN_ID = 151655        # <|image_pad|>
VISION_START_ID = 151652       # <|vision_start|>
VISION_END_ID = 151653         # <|vision_end|>
MROPE_SECTION = (24, 20, 20)   # (t, h, w) frequencies per axis; sum = head_dim / 2
THETA = 5_000_000.0            # Qwen3-VL-8B's text rope_theta
HEAD_DIM = 128


def image_runs(input_ids, image_grid_thw, image_token_id: int = IMAGE_TOKEN_ID, merge: int = 2):
    """[(first token index, gh / merge, gw / merge)] of each image in the prompt, in image_grid_thw's
    order: image i takes the next t x gh x gw / merge^2 image tokens. A count that does not add up, or an
    image whose tokens are not one consecutive run, is a ValueError naming it."""
    ids = np.asarray(input_ids).reshape(-1)
    grids = np.asarray(image_grid_thw, np.int64).reshape(-1, 3) if image_grid_thw is not None else np.zeros((0, 3))
    where = np.flatnonzero(ids == image_token_id)
    sizes = [int(t * h * w) // merge ** 2 for t, h, w in grids]
    if len(where) != sum(sizes):
        raise ValueError(f"{len(where)} image tokens in the prompt; image_grid_thw {grids.tolist()} needs {sum(sizes)}")
    runs, k = [], 0
    for i, ((t, h, w), n) in enumerate(zip(grids, sizes)):
        if t != 1:
            raise ValueError(f"image {i}: grid t = {t}; an image has one temporal patch (videos are not handled here)")
        if h % merge or w % merge:
            raise ValueError(f"image {i}: grid {h}x{w} is not a multiple of the merge size {merge}")
        first = int(where[k])
        if n and int(where[k + n - 1]) != first + n - 1:
            raise ValueError(f"image {i}: its {n} tokens are not consecutive from index {first}")
        runs.append((first, int(h) // merge, int(w) // merge))
        k += n
    return runs


def get_rope_index(input_ids, image_grid_thw=None, image_token_id: int = IMAGE_TOKEN_ID, merge: int = 2):
    """(positions int64 [3, T] of (t, h, w), rope delta) for one prompt, as Qwen3VLModel.get_rope_index."""
    ids = np.asarray(input_ids).reshape(-1)
    T = len(ids)
    pos = np.zeros((3, T), np.int64)
    cur, i = 0, 0
    for first, gh, gw in image_runs(ids, image_grid_thw, image_token_id, merge):
        n_text = first - i
        pos[:, i:first] = cur + np.arange(n_text)
        cur += n_text
        rr, cc = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        pos[0, first:first + gh * gw] = cur
        pos[1, first:first + gh * gw] = cur + rr.reshape(-1)
        pos[2, first:first + gh * gw] = cur + cc.reshape(-1)
        cur += max(gh, gw)
        i = first + gh * gw
    pos[:, i:] = cur + np.arange(T - i)
    return pos, rope_delta(pos)


def rope_delta(positions) -> int:
    """max position + 1 - sequence length: the shift of every token decoded after the prompt."""
    p = np.asarray(positions)
    return int(p.max()) + 1 - p.shape[-1] if p.size else 0


def decode_positions(start: int, n: int, delta: int) -> np.ndarray:
    """[3, n] positions of the tokens in sequence slots start .. start + n - 1 after the prompt: s + delta."""
    return np.broadcast_to(np.arange(start, start + n, dtype=np.int64) + int(delta), (3, n)).copy()


def section_axes(head_dim: int = HEAD_DIM, mrope_section=MROPE_SECTION) -> np.ndarray:
    """[head_dim / 2] int: the axis (0 t, 1 h, 2 w) each frequency is rotated by (interleaved M-RoPE)."""
    half = head_dim // 2
    if sum(mrope_section) != half:
        raise ValueError(f"mrope_section {tuple(mrope_section)} sums to {sum(mrope_section)}, not head_dim / 2 = {half}")
    i = np.arange(half)
    axis = np.zeros(half, np.int64)
    axis[(i % 3 == 1) & (i < 3 * mrope_section[1])] = 1
    axis[(i % 3 == 2) & (i < 3 * mrope_section[2])] = 2
    return axis


def mrope_angles(positions, head_dim: int = HEAD_DIM, theta: float = THETA, mrope_section=MROPE_SECTION):
    """float64 [T, head_dim / 2]: token t's angle for frequency i, positions[axis(i), t] x theta^(-2i/head_dim)."""
    p = np.asarray(positions, np.float64).reshape(3, -1)
    half = head_dim // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) / half)
    axis = section_axes(head_dim, mrope_section)
    return p[axis].T * inv[None, :]


def mrope_table(positions, head_dim: int = HEAD_DIM, theta: float = THETA, mrope_section=MROPE_SECTION,
                dtype=np.float32):
    """(cos, sin) [T, head_dim / 2], computed in float64, stored as dtype (float32: the layout lab 07's
    rope kernels read, row t = token t; np.float64 for the references)."""
    a = mrope_angles(positions, head_dim, theta, mrope_section)
    return np.cos(a).astype(dtype), np.sin(a).astype(dtype)


def shifted_table(capacity: int, delta: int, head_dim: int = HEAD_DIM, theta: float = THETA, dtype=np.float32):
    """(cos, sin) [capacity, head_dim / 2] whose row s is position s + delta: the token step's table after a
    prompt with rope delta `delta` (what decoder.Decoder.set_rope_delta writes), float64 then dtype."""
    return mrope_table(decode_positions(0, capacity, delta), head_dim, theta, dtype=dtype)
