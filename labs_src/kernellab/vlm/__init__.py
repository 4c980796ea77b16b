"""Lab 09: Qwen3-VL end to end, an image and a question in, an answer out. The CPU foundations:

preprocess.py  an image to patches, as transformers' image processor (PIL bicubic): smart_resize, resize
               (PIL; resize_numpy: PIL's fixed-point resample in NumPy), normalize, patchify, preprocess ->
               pixel_values [N, 1536] (merge-window order) and image_grid_thw
positions.py   M-RoPE: get_rope_index (3-D positions, the rope delta), the interleaved section rule,
               mrope_table (the per-token cos/sin table lab 07's rope_prefill reads), shifted_table (decode)
weights.py     VLMConfig (a checkpoint's config.json), transformers' names <-> lab 06's tower layout and lab
               08's decoder names, load_checkpoint
engine.py      the GPU pipeline (VLM): lab 06's tower per image, lab 05's scatter, lab 08's prefill and token step
stages.py      the stage table's measurement (make bench: vlm_stages.csv), ours beside transformers, same weights
report.py      the stage table, its sentences and targets (STAGES_FAMILY), the Orin on paper
text.py        an image and a question in, the streamed answer out (a local checkpoint's tokenizer)
reference.py   float64: the tower image by image (lab 06), the scatter (lab 05), the text decoder with
               per-token M-RoPE and DeepStack (lab 08's layer), logits; greedy generation

docs/lab09_plan.md: how the pieces fit."""
from __future__ import annotations

from .preprocess import (  # noqa: F401
    FACTOR, IMAGE_MEAN, IMAGE_STD, MAX_PIXELS, MERGE, MIN_PIXELS, PATCH, PATCH_DIM, PRECISION_BITS, RESCALE, TEMPORAL,
    image_tokens, load_image, normalize, patchify, preprocess, resample_coeffs, resize, resize_numpy, smart_resize,
    split_patches, unpatchify)
from .positions import (  # noqa: F401
    HEAD_DIM, IMAGE_TOKEN_ID, MROPE_SECTION, THETA, VISION_END_ID, VISION_START_ID, decode_positions, get_rope_index,
    image_runs, mrope_angles, mrope_table, rope_delta, section_axes, shifted_table)
from .weights import (  # noqa: F401
    BLOCK_NAMES, MERGER_NAMES, TEXT, VISUAL, VLMConfig, load_checkpoint, random_vision, text_state_dict, text_weights,
    vision_state_dict, vision_weights)
from .reference import (  # noqa: F401
    fp16_bound, image_rows, ref_mrope, reference_generate, reference_layer, reference_text, reference_vision, reference_vlm,
    scatter_image_features)
from .engine import VLM, check_fits, need  # noqa: E402,F401  (the GPU pipeline: lab 06's tower, lab 05's scatter, lab 08's prefill and steps)
from .stages import CASE, HF, LAB08, NEW, OURS, QUESTION, QWEN3_VL_8B, ROOF, STAGES, measure_stages, stage_rows  # noqa: E402,F401
from .report import FAMILIES, STAGES_FAMILY, TARGETS, orin_on_paper, say_stages, stage_table  # noqa: E402,F401
from .text import answer, chat_ids, open_vlm  # noqa: E402,F401
