"""An image and a question in, the answer out, streamed: Qwen3-VL's chat prompt (the question's text through the
checkpoint's tokenizer, the image's tokens spliced in by id), VLM.prefill, then lab 08's token steps read one step
late (decoder.text's streaming), stopping at the model's end-of-sequence ids.

    vlm, tok, eos = open_vlm("~/models/Qwen3-VL-8B-Instruct")
    answer(vlm, tok, "cat.jpg", "What is in the picture?", stream=print, eos_ids=eos)

The chat format (Qwen3-VL's template for one user turn with images first):
    <|im_start|>user\\n <|vision_start|> <|image_pad|> x n <|vision_end|> ... question <|im_end|>\\n<|im_start|>assistant\\n"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..decoder.text import default_eos, eos_ids, load_tokenizer, stream_text
from .preprocess import image_tokens, preprocess


def chat_ids(tokenizer, vcfg, question: str, grids, chat: bool = True) -> list:
    """The prompt's ids: per image <|vision_start|>, its image tokens, <|vision_end|>, then the question
    (chat=True: inside Qwen's user turn, the assistant's turn opened)."""
    if not isinstance(question, str):
        raise ValueError(f"question: expected a str, got {type(question).__name__}")
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False).ids if s else []      # noqa: E731
    ids = enc("<|im_start|>user\n") if chat else []
    for n in (image_tokens(grids) if grids is not None else []):
        ids += [vcfg.vision_start_id] + [vcfg.image_token_id] * int(n) + [vcfg.vision_end_id]
    ids += enc(question) + (enc("<|im_end|>\n<|im_start|>assistant\n") if chat else [])
    return ids


def answer(vlm, tokenizer, images, question: str, max_new_tokens: int = 128, stream=None, eos_ids=None,
           chat: bool = True):
    """Greedy answer to `question` about `images` (paths, PIL images or uint8 arrays; one or a list; None: text
    only). Returns decoder.text.Generation(text, ids, finish). stream: print or a callable gets the text as it
    is decoded."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    imgs = [] if images is None else list(images) if isinstance(images, (list, tuple)) else [images]
    pv, grid = preprocess(imgs) if imgs else (None, None)
    ids = chat_ids(tokenizer, vlm.vcfg, question, grid, chat)
    if max(ids) >= vlm.cfg.vocab:
        raise ValueError(f"the tokenizer gives id {max(ids)}, past the model's vocabulary ({vlm.cfg.vocab})")
    if len(ids) + max_new_tokens - 1 > vlm.dec.capacity:
        raise ValueError(f"{len(ids)} prompt + {max_new_tokens} new tokens do not fit the KV cache ({vlm.dec.capacity})")
    eos = set(default_eos(tokenizer) if eos_ids is None else (int(i) for i in eos_ids))
    vlm.prefill(ids, pv, grid)
    return stream_text(vlm.dec, tokenizer, max_new_tokens, eos, stream)


def open_vlm(directory, capacity: int = 4096):
    """(VLM, tokenizer, eos ids) of a local Qwen3-VL checkpoint directory (config.json, *.safetensors,
    tokenizer.json, generation_config.json), fp16 on the GPU."""
    from .engine import VLM
    from .weights import load_checkpoint
    d = Path(directory).expanduser()
    vcfg, vision, text = load_checkpoint(d)
    tok = load_tokenizer(d)
    return VLM(vcfg, vision, text, capacity=capacity), tok, eos_ids(d, tok)
