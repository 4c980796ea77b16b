"""Lab 09 on the GPU: Qwen3-VL from the course's kernels, an image and a prompt in, tokens out.

    pixel_values (vlm.preprocess, host) -> per image: lab 06's vision tower (patch embed, blocks, the main
    merger and the DeepStack mergers) -> the prompt's embedding rows with the image features placed at the
    image tokens (lab 05's scatter) -> the multimodal rotary table of every prompt token (vlm.positions) ->
    lab 08's prefill with that table and the DeepStack features added to the image rows after the early
    layers -> the rope delta set on the decoder -> lab 08's token step (graph replays) for every new token.

vlm/stages.py times each stage as a user calls it (bench.wall)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .positions import get_rope_index, mrope_table
from .preprocess import split_patches
from .reference import image_rows


def need(vcfg, path: str = "float16", capacity: int = 4096) -> dict:
    """Bytes the model needs on the GPU: lab 08's count for the text model (weights, KV cache, workspaces,
    margin) and the vision tower's fp16 weights (lab 06's work model with no tokens) plus its workspace for a
    512 x 512 image (1024 patches)."""
    from ..decoder import fit
    from ..vit_block.report import work
    mergers = 1 + len(vcfg.deepstack)
    vision = work(0, vcfg.vision_depth, mergers)["bytes"] + work(1024, 1, 1)["bytes"] - work(0, 1, 1)["bytes"]
    text = fit.need(vcfg.text, path, capacity)["total"]
    return {"text": text, "vision": vision, "total": text + vision}


def check_fits(vcfg, path: str = "float16", capacity: int = 4096, free=None) -> dict:
    """need() when it fits the free memory (free: bytes, or None: this device's); otherwise a ValueError with
    the numbers, before anything is allocated."""
    from ..decoder import fit
    b = need(vcfg, path, capacity)
    free = fit.free_memory() if free is None else free
    if free is not None and b["total"] > free:
        raise ValueError(
            f"{vcfg.text.name.removesuffix(' (text)')} on {path} with a {capacity}-token KV cache needs "
            f"{b['total'] / 1e9:.1f} GB ({b['text'] / 1e9:.1f} GB text model, {b['vision'] / 1e9:.1f} GB vision "
            f"tower); {free / 1e9:.1f} GB is free: it does not fit. A shorter cache (capacity=) needs less; the "
            "smaller Qwen3-VL models (2B, 4B) have a 1024-wide vision tower, which lab 06 does not "
            "build yet (its widths are Qwen3-VL-8B's).")
    return b


def _device(W):
    """Lab 06's weights (host or device) as device arrays, once: every image's tower shares them."""
    import cupy
    to = lambda d: {k: cupy.asarray(v) for k, v in d.items()}     # noqa: E731
    return SimpleNamespace(layers=[to(L) for L in W.layers], mergers=[to(M) for M in W.mergers], patch=to(W.patch))


class VLM:
    """Qwen3-VL on the GPU. vcfg: vlm.VLMConfig; vision_W: lab 06's layout (vlm.load_checkpoint or
    vlm.random_vision); text_W: lab 08's names. Batch 1, fp16 (the text model on `path`)."""

    def __init__(self, vcfg, vision_W, text_W, capacity: int = 4096, path: str = "float16"):
        from ..core.device import need_gpu
        from ..decoder import Decoder
        need_gpu("Qwen3-VL")
        check_fits(vcfg, path, capacity)
        self.vcfg, self.cfg = vcfg, vcfg.text
        self.dec = Decoder(vcfg.text, text_W, path, capacity)
        self.vision = _device(vision_W)
        self._towers: dict = {}
        self._graphs: dict = {}

    def tower(self, grid_h: int, grid_w: int, patches):
        """Lab 06's tower for one image's grid, run on `patches`. The first image of a grid runs eagerly and
        captures the tower's launches as a CUDA graph (its workspace and weights are bound once); every later
        image of that grid is a copy into the bound patches and one graph replay."""
        from .. import vit_block as VB
        key = (grid_h, grid_w)
        t = self._towers.get(key)
        if t is None:
            t = self._towers[key] = VB.Tower(grid_h, grid_w, self.vcfg.vision_depth, self.vision, patches,
                                             model="qwen3-vl", deepstack=tuple(self.vcfg.deepstack))
            t()
            self._graphs[key] = VB.graph(t.ops)
        else:
            t.patches[...] = patches
            self._graphs[key]()
        return t

    def encode(self, pixel_values, image_grid_thw):
        """(features [image tokens, hidden], [DeepStack features]) of every image, in order, on the GPU."""
        import cupy
        main, deep = [], []
        for p, (t, gh, gw) in zip(split_patches(pixel_values, image_grid_thw), np.asarray(image_grid_thw).reshape(-1, 3)):
            if int(t) != 1:
                raise ValueError(f"grid t = {t}: one temporal patch per image")
            tw = self.tower(int(gh), int(gw), cupy.asarray(np.asarray(p, np.float16)))
            main.append(tw.output.copy())
            deep.append([d.copy() for d in tw.deep])
        feats = cupy.concatenate(main) if main else cupy.zeros((0, self.cfg.hidden), cupy.float16)
        return feats, [cupy.concatenate([d[j] for d in deep]) for j in range(len(deep[0]))] if deep else []

    def embed(self, input_ids, feats):
        """(the prompt's embedding rows with the image features at its image tokens (lab 05's scatter), the image
        rows on the device)."""
        import cupy
        from .. import vision as V
        ids = np.asarray(input_ids).reshape(-1)
        rows = image_rows(ids, self.vcfg.image_token_id)
        if len(rows) != feats.shape[0]:
            raise ValueError(f"{len(rows)} image tokens in the prompt, {feats.shape[0]} image features")
        emb = cupy.take(self.dec.embed_w, cupy.asarray(ids.astype(np.int32)), axis=0)
        drows = cupy.asarray(rows.astype(np.int32))
        if len(rows):
            V.replace_image_tokens(emb, feats, drows)
        return emb, drows

    def text_prefill(self, input_ids, emb, rows, deep, image_grid_thw) -> int:
        """Lab 08's prefill of the embedded prompt with its M-RoPE table and the DeepStack features, then the rope
        delta set on the decoder for the token steps; returns the delta."""
        import cupy
        cfg, vc = self.cfg, self.vcfg
        ids = np.asarray(input_ids).reshape(-1)
        pos, delta = get_rope_index(ids, image_grid_thw, vc.image_token_id, vc.merge)
        cos, sin = (cupy.ascontiguousarray(cupy.asarray(t)) for t in mrope_table(pos, cfg.head_dim, cfg.theta,
                                                                                 vc.mrope_section))
        self.dec.reset()
        self.dec.prefill(ids, embeds=emb, rope=(cos, sin), deepstack=(rows, deep) if len(rows) else None)
        self.dec.set_rope_delta(int(delta))
        return int(delta)

    def prefill(self, input_ids, pixel_values=None, image_grid_thw=None) -> int:
        """The prompt (image tokens included) in one pass: the towers, the scatter, the prefill; leaves the decoder
        ready for its first token step (its logits are the prompt's last; its token the argmax). Returns the rope
        delta. Stage by stage: encode, embed, text_prefill (vlm/stages.py times each)."""
        import cupy
        ids = np.asarray(input_ids, np.int64).reshape(-1)
        if ids.size == 0 or ids.min() < 0 or ids.max() >= self.cfg.vocab:
            raise ValueError(f"input_ids: a non-empty prompt of ids in [0, {self.cfg.vocab})")
        feats, deep = (self.encode(pixel_values, image_grid_thw) if pixel_values is not None
                       else (cupy.zeros((0, self.cfg.hidden), cupy.float16), []))
        emb, rows = self.embed(ids, feats)
        return self.text_prefill(ids, emb, rows, deep, image_grid_thw)

    def generate(self, input_ids, pixel_values=None, image_grid_thw=None, n_new: int = 32) -> list:
        """Greedy: the prompt's prefill, then n_new - 1 token steps (graph replays); the n_new new tokens."""
        n = int(np.asarray(input_ids).size)
        if n + n_new - 1 > self.dec.capacity:
            raise ValueError(f"{n} + {n_new} tokens do not fit the KV cache ({self.dec.capacity})")
        self.prefill(input_ids, pixel_values, image_grid_thw)
        if n_new > 1:
            self.dec.step()                  # the first step eager: every launch's scratch exists before a capture
            run = self.dec.graph()
            for _ in range(n_new - 2):
                run()
        self.dec.host_pos = n + n_new - 1
        return [int(t) for t in self.dec.history[n - 1:n - 1 + n_new].get()]
