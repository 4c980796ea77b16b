"""Lab 09's weights: a Qwen3-VL checkpoint (Qwen3VLForConditionalGeneration's names) split into what the
course's two halves read: the vision tower in lab 06's layout (SimpleNamespace(layers, mergers, patch):
vit_block.reference_tower and vit_block.Tower) and the language model in lab 08's names (decoder.Config,
the model.layers.{i}... dict the decoder and its references read); VLMConfig from a checkpoint's
config.json; load_checkpoint(dir).

The names, transformers' and here (tests/test_vit_block.py's mapping, as functions):
  model.visual.patch_embed.proj.{weight [1152, 3, 2, 16, 16], bias}  -> patch["w"] [1152, 1536], patch["b"]
  model.visual.pos_embed.weight [2304, 1152]                          -> patch["pos"]
  model.visual.blocks.{i}.{norm1, norm2, attn.qkv, attn.proj, mlp.linear_fc1, mlp.linear_fc2}.{weight, bias}
                                                                      -> layers[i][{ln1, ln2, qkv, proj, fc1, fc2}_{w, b}]
  model.visual.merger.{norm, linear_fc1, linear_fc2}.*                -> mergers[0][{ln, fc1, fc2}_{w, b}]
  model.visual.deepstack_merger_list.{j}.*                           -> mergers[1 + j]
  model.language_model.X                                              -> model.X (lab 08's names); lm_head.weight as is
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from .. import vit_block as VB
from ..decoder.config import Config
from ..decoder.weights import read_safetensors, weight_shapes, bf16_to_f32
from .positions import IMAGE_TOKEN_ID, MROPE_SECTION, VISION_END_ID, VISION_START_ID

VISUAL, TEXT = "model.visual.", "model.language_model."
BLOCK_NAMES = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "qkv", "attn.proj": "proj", "mlp.linear_fc1": "fc1",
               "mlp.linear_fc2": "fc2"}
MERGER_NAMES = {"norm": "ln", "linear_fc1": "fc1", "linear_fc2": "fc2"}


@dataclass(frozen=True)
class VLMConfig:
    """A Qwen3-VL model's shape: the language model (a decoder.Config; Qwen3's layer), the vision tower's depth
    and DeepStack blocks (its widths are lab 06's: Qwen3-VL-8B's), the special tokens and the M-RoPE split."""
    text: Config
    vision_depth: int = VB.LAYERS
    deepstack: tuple = VB.DEEPSTACK
    image_token_id: int = IMAGE_TOKEN_ID
    vision_start_id: int = VISION_START_ID
    vision_end_id: int = VISION_END_ID
    mrope_section: tuple = MROPE_SECTION
    merge: int = 2
    patch: int = 16
    temporal: int = 2
    vision: dict = field(default_factory=dict)      # the vision config's widths, as read (checked against lab 06)

    @classmethod
    def from_hf(cls, directory, name=None) -> "VLMConfig":
        """From a checkpoint's config.json (model_type qwen3_vl). The vision tower must have lab 06's widths
        (hidden 1152, 16 heads, MLP 4304, out = the text hidden size 4096, patch 16, 48 x 48 positions):
        anything else is a ValueError naming the difference, before any weight is read."""
        path = Path(directory) / "config.json"
        if not path.exists():
            raise ValueError(f"{path}: no config.json in the checkpoint directory")
        return cls.from_dict(json.loads(path.read_text()), name or Path(directory).name, str(path))

    @classmethod
    def from_dict(cls, c: dict, name="qwen3-vl", where="config") -> "VLMConfig":
        if c.get("model_type", "qwen3_vl") != "qwen3_vl":
            raise ValueError(f"{where}: model_type {c.get('model_type')!r}; lab 09 runs Qwen3-VL (qwen3_vl)")
        t, v = c.get("text_config") or {}, c.get("vision_config") or {}
        rope = t.get("rope_parameters") or t.get("rope_scaling") or {}
        theta = float(t.get("rope_theta") or rope.get("rope_theta") or 5_000_000.0)
        section = tuple(int(s) for s in rope.get("mrope_section", MROPE_SECTION))
        if rope.get("mrope_interleaved") is False:
            raise ValueError(f"{where}: mrope_interleaved is False; Qwen3-VL's M-RoPE is interleaved")
        heads = int(t.get("num_attention_heads", 32))
        text = Config(name=f"{name} (text)", hidden=int(t.get("hidden_size", 4096)), layers=int(t.get("num_hidden_layers", 36)),
                      heads=heads, kv_heads=int(t.get("num_key_value_heads") or heads),
                      head_dim=int(t.get("head_dim") or t.get("hidden_size", 4096) // heads),
                      ffn=int(t.get("intermediate_size", 12288)), vocab=int(t.get("vocab_size", 151936)),
                      eps=float(t.get("rms_norm_eps", 1e-6)), theta=theta,
                      tied=bool(c.get("tie_word_embeddings", t.get("tie_word_embeddings", False))),
                      qkv_bias=bool(t.get("attention_bias", False)), qk_norm=True)
        want = {"hidden_size": VB.HIDDEN, "num_heads": VB.HEADS, "intermediate_size": VB.MLP, "patch_size": 16,
                "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
                "num_position_embeddings": VB.POS_GRID ** 2, "out_hidden_size": text.hidden}
        bad = {k: (v[k], w) for k, w in want.items() if k in v and int(v[k]) != w}
        if text.hidden != VB.MERGE_OUT:
            bad["text hidden_size"] = (text.hidden, VB.MERGE_OUT)
        if v.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            bad["hidden_act"] = (v["hidden_act"], "gelu_pytorch_tanh")
        if bad:
            raise ValueError(f"{where}: the vision tower differs from lab 06's (Qwen3-VL-8B's widths): "
                             + ", ".join(f"{k} {a} (lab 06: {b})" for k, (a, b) in bad.items()))
        depth = int(v.get("depth", VB.LAYERS))
        deep = tuple(int(i) for i in v.get("deepstack_visual_indexes", VB.DEEPSTACK))
        if any(not 0 <= i < depth for i in deep) or len(set(deep)) != len(deep) or list(deep) != sorted(deep):
            raise ValueError(f"{where}: deepstack_visual_indexes {list(deep)} must be increasing blocks of 0 .. {depth - 1}")
        if len(deep) > text.layers:
            raise ValueError(f"{where}: {len(deep)} DeepStack features for {text.layers} decoder layers")
        return cls(text=text, vision_depth=depth, deepstack=deep,
                   image_token_id=int(c.get("image_token_id", IMAGE_TOKEN_ID)),
                   vision_start_id=int(c.get("vision_start_token_id", VISION_START_ID)),
                   vision_end_id=int(c.get("vision_end_token_id", VISION_END_ID)), mrope_section=section,
                   vision={k: v[k] for k in want if k in v})


# ---- lab 06's layout <-> transformers' names -------------------------------------------------------------

def vision_state_dict(W, prefix: str = VISUAL) -> dict:
    """{transformers' name: array} of a tower in lab 06's layout (W.layers, W.mergers: main then DeepStack,
    W.patch); the patch matrix is reshaped to the Conv3d's [1152, 3, 2, 16, 16]."""
    sd = {f"{prefix}patch_embed.proj.weight": W.patch["w"].reshape(VB.HIDDEN, 3, 2, 16, 16),   # NumPy or CuPy
          f"{prefix}patch_embed.proj.bias": W.patch["b"], f"{prefix}pos_embed.weight": W.patch["pos"]}
    for i, L in enumerate(W.layers):
        sd.update({f"{prefix}blocks.{i}.{hf}.{wb}": L[f"{ours}_{wb[0]}"] for hf, ours in BLOCK_NAMES.items()
                   for wb in ("weight", "bias")})
    for j, M in enumerate(W.mergers):
        pre = f"{prefix}merger." if j == 0 else f"{prefix}deepstack_merger_list.{j - 1}."
        sd.update({f"{pre}{hf}.{wb}": M[f"{ours}_{wb[0]}"] for hf, ours in MERGER_NAMES.items() for wb in ("weight", "bias")})
    return sd


def vision_weights(sd: dict, depth: int, n_deepstack: int, prefix: str = VISUAL) -> SimpleNamespace:
    """A tower in lab 06's layout from transformers' names (vision_state_dict's inverse). A missing tensor
    is a ValueError naming it; shapes are checked by lab 06's references and Tower."""
    def get(k):
        if prefix + k not in sd:
            raise ValueError(f"missing tensor {prefix + k!r}")
        return sd[prefix + k]
    w = get("patch_embed.proj.weight")
    patch = {"w": np.asarray(w).reshape(w.shape[0], -1), "b": get("patch_embed.proj.bias"), "pos": get("pos_embed.weight")}
    layers = [{f"{ours}_{wb[0]}": get(f"blocks.{i}.{hf}.{wb}") for hf, ours in BLOCK_NAMES.items()
               for wb in ("weight", "bias")} for i in range(depth)]
    mergers = [{f"{ours}_{wb[0]}": get(f"{pre}{hf}.{wb}") for hf, ours in MERGER_NAMES.items() for wb in ("weight", "bias")}
               for pre in ["merger."] + [f"deepstack_merger_list.{j}." for j in range(n_deepstack)]]
    return SimpleNamespace(layers=layers, mergers=mergers, patch=patch)


def text_weights(sd: dict, cfg: Config) -> dict:
    """The language model's weights in lab 08's names (model.language_model.X -> model.X; lm_head.weight), each
    checked by name and shape against decoder.weight_shapes(cfg)."""
    out = {}
    for name, shape in weight_shapes(cfg).items():
        hf = "lm_head.weight" if name == "lm_head.weight" else TEXT + name.removeprefix("model.")
        if hf not in sd:
            raise ValueError(f"missing tensor {hf!r} (expected {list(shape)})")
        if tuple(sd[hf].shape) != tuple(shape):
            raise ValueError(f"{hf}: expected shape {list(shape)}, got {list(sd[hf].shape)}")
        out[name] = sd[hf]
    return out


def text_state_dict(W: dict) -> dict:
    """text_weights' inverse: lab 08's names -> transformers' Qwen3-VL names."""
    return {(k if k == "lm_head.weight" else TEXT + k.removeprefix("model.")): v for k, v in W.items()}


def random_vision(vcfg: VLMConfig, seed: int = 0, xp=np) -> SimpleNamespace:
    """A tower's weights in Qwen3-VL's drawing (lab 06's laws, fp16) for vcfg's depth and DeepStack blocks
    (xp=cupy: drawn on the GPU)."""
    return VB.weights(layers=vcfg.vision_depth, mergers=1 + len(vcfg.deepstack), seed=seed, model="qwen3-vl", xp=xp)


def load_checkpoint(directory, dtype=np.float16):
    """(VLMConfig, vision weights (lab 06's layout), text weights (lab 08's names)) of a local Qwen3-VL
    checkpoint: config.json and every *.safetensors file. dtype: np.float16 (what the GPU reads; a bf16
    value beyond fp16's range becomes inf and is counted) or None (as stored, bf16 as float32: the float64
    references' exact inputs)."""
    directory = Path(directory)
    vcfg = VLMConfig.from_hf(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory}: no .safetensors files")
    sd = {}
    for f in files:
        for k, a in read_safetensors(f).items():
            if k in sd:
                raise ValueError(f"{k!r} is in two shards ({f.name})")
            sd[k] = a
    overflow = [0]

    def conv(a):
        a = bf16_to_f32(a) if a.dtype == np.uint16 else a
        if dtype is None:
            return a
        with np.errstate(over="ignore"):
            h = np.asarray(a).astype(dtype)
        overflow[0] += int(np.isinf(h).sum() - np.isinf(a).sum())
        return h
    vision = vision_weights(sd, vcfg.vision_depth, len(vcfg.deepstack))
    vision = SimpleNamespace(layers=[{k: conv(a) for k, a in L.items()} for L in vision.layers],
                             mergers=[{k: conv(a) for k, a in M.items()} for M in vision.mergers],
                             patch={k: conv(a) for k, a in vision.patch.items()})
    text = {k: conv(a) for k, a in text_weights(sd, vcfg.text).items()}
    if overflow[0]:
        print(f"load_checkpoint: {overflow[0]} values beyond fp16's range became inf")
    return vcfg, vision, text
