"""Text in, text out: a checkpoint's tokenizer (the `tokenizers` library, tokenizer.json), Qwen's chat format,
and generate(): the prompt in (prefill where the decoder has it, else fed token by token), then token steps
(graph replays) with the token drawn on the GPU (decoder_06_sample: greedy, or seeded temperature / top-k /
top-p), streaming the text as it is decoded and stopping at the model's end-of-sequence ids.

No checkpoint at hand: demo_tokenizer() trains a small byte-level BPE in memory, so the lab runs text in and
out on random weights (the text is then noise; the wiring is what it shows). CHECKPOINT_NOTE says how to get
a real one."""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from .sample import Sampling

CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHECKPOINT_NOTE = (
    "No checkpoint: this runs on random weights with a small tokenizer trained here, so the text is noise. For a "
    "real model, download one (2.4 GB of bf16 for Qwen3-0.6B; any Qwen3 or Qwen2.5 dense checkpoint works):\n"
    "    pip install -U huggingface_hub\n"
    "    huggingface-cli download Qwen/Qwen3-0.6B --local-dir ~/models/Qwen3-0.6B\n"
    "then set KERNELLAB_CHECKPOINT=~/models/Qwen3-0.6B (or pass the directory) and run this cell again.")


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError("text in and out needs the `tokenizers` library: pip install tokenizers "
                          "(it is in the lab and test extras)") from None
    return tokenizers


# ---- tokenizer and end-of-sequence ids ---------------------------------------------------------------------------

def load_tokenizer(directory):
    """The checkpoint directory's tokenizer.json as a tokenizers.Tokenizer."""
    path = Path(directory).expanduser() / "tokenizer.json"
    if not path.exists():
        raise ValueError(f"{path}: no tokenizer.json (a Hugging Face checkpoint directory has one)")
    return _tokenizers().Tokenizer.from_file(str(path))


def default_eos(tokenizer) -> list:
    """The ids of <|im_end|> and <|endoftext|> where the tokenizer has them (Qwen's end-of-turn and end-of-text)."""
    return [i for i in (tokenizer.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>")) if i is not None]


def eos_ids(directory, tokenizer=None) -> list:
    """The model's end-of-sequence ids: generation_config.json's eos_token_id (an int or a list), else
    config.json's, else default_eos(tokenizer) (empty without one)."""
    d = Path(directory).expanduser()
    for name in ("generation_config.json", "config.json"):
        f = d / name
        if f.exists():
            e = json.loads(f.read_text()).get("eos_token_id")
            if e is not None:
                return [int(i) for i in (e if isinstance(e, list) else [e])]
    return default_eos(tokenizer) if tokenizer is not None else []


def has_chat(tokenizer) -> bool:
    return all(tokenizer.token_to_id(t) is not None for t in CHAT_TOKENS)


def chat_prompt(text: str) -> str:
    """Qwen's chat format for one user turn, the assistant's turn opened."""
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def encode(tokenizer, text: str, chat: bool = False) -> list:
    """The prompt's ids (no special tokens added; with chat=True and the tokenizer's <|im_start|> /
    <|im_end|>, the text wrapped in Qwen's chat format first)."""
    if chat:
        if not has_chat(tokenizer):
            raise ValueError("chat=True: this tokenizer has no <|im_start|> / <|im_end|> tokens")
        text = chat_prompt(text)
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


# ---- streaming ----------------------------------------------------------------------------------------------------

class TextStream:
    """Text from a growing list of ids, a piece at a time: each push decodes every id so far and passes the
    new suffix to `emit`, but only once the text no longer ends in U+FFFD (a UTF-8 character whose bytes
    are split over tokens waits for its last byte). finish() emits what is left, a dangling U+FFFD included.
    Decoding the whole list each time is quadratic in the length, a few ms at a few thousand tokens."""

    def __init__(self, tokenizer, emit: Callable | None = None):
        self.tokenizer, self.emit, self.ids, self.text = tokenizer, emit, [], ""

    def _decoded(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def _out(self, text: str) -> str:
        new = text[len(self.text):] if text.startswith(self.text) else ""
        if new:
            self.text += new
            if self.emit is not None:
                self.emit(new)
        return new

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        text = self._decoded()
        return "" if text.endswith("\ufffd") else self._out(text)

    def finish(self) -> str:
        return self._out(self._decoded())


def _emit(stream):
    """stream: None, a print-like callable (called with end="" and flush=True when it takes them: print
    itself), or any callable of one string."""
    if stream is None:
        return None
    if stream is print:
        return lambda s: print(s, end="", flush=True)
    return stream


# ---- generate -----------------------------------------------------------------------------------------------------

class Generation(NamedTuple):
    text: str           # the generated text (no prompt, no end-of-sequence token)
    ids: list           # the generated ids (the end-of-sequence id left out)
    finish: str         # "eos" or "length"


@contextmanager
def sampling(decoder, how: Sampling):
    """The decoder's token step with `how` in place of the argmax (the GPU kernel, or its NumPy reference on an
    emulated decoder); its CUDA graph is captured again inside and dropped after, so the next greedy run
    captures its own. Greedy leaves the decoder as it is."""
    ops = decoder.ops
    if how.greedy:
        yield
        return
    own = "argmax" in vars(ops)
    old, old_graph = ops.argmax, decoder._graph
    ops.argmax = how.numpy_step() if decoder.emulate else how.gpu_step()
    decoder._graph = None
    try:
        yield
    finally:
        if own:
            ops.argmax = old
        else:
            del ops.argmax
        decoder._graph = old_graph          # captured with the argmax: still right


def _prompt_in(decoder, ids: list) -> None:
    """The prompt through the decoder: one prefill where it has one and can run it, else token by token."""
    decoder.reset()
    pre = getattr(decoder, "prefill", None)
    if pre is not None and len(ids) > 1:
        try:
            from .prefill import why_not
            ok = why_not(decoder) is None
        except ImportError:
            ok = not decoder.emulate
        if ok:
            pre(ids)
            return
    for t in ids:
        decoder.feed(t)


def _tokens(decoder, n_more: int, use_graph: bool):
    """The first token (left by the prompt), then one per step for n_more steps. On the GPU each step's token
    is copied to pinned memory behind the step and read one step late: the host waits for token i while
    step i + 1 runs, so the GPU never waits on the host (a stop at end-of-sequence runs one step more)."""
    if decoder.emulate:
        yield int(decoder.token[0])
        for _ in range(n_more):
            decoder.step()
            decoder.host_pos += 1
            yield int(decoder.token[0])
        return
    import cupy
    import cupyx
    rt, s = cupy.cuda.runtime, cupy.cuda.get_current_stream()
    host = cupyx.empty_pinned((n_more + 1,), np.int32)
    run = decoder.step                   # the first step eager: the sampler's scratch exists before a capture

    def copy(i):
        rt.memcpyAsync(host.ctypes.data + 4 * i, decoder.token.data.ptr, 4, rt.memcpyDeviceToHost, s.ptr)
        ev = cupy.cuda.Event(disable_timing=True)
        ev.record(s)
        return ev

    pending = copy(0)
    for i in range(1, n_more + 1):
        run()
        if use_graph and run == decoder.step:
            run = decoder.graph()
        decoder.host_pos += 1
        nxt = copy(i)
        pending.synchronize()
        yield int(host[i - 1])
        pending = nxt
    pending.synchronize()
    yield int(host[n_more])


def generate(decoder, tokenizer, prompt: str, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, seed: int = 0, stream=None, eos_ids=None, chat: bool = False,
             use_graph: bool = True) -> Generation:
    """Text from a prompt: encoded (chat=True: Qwen's chat format), run through the decoder, then up to
    max_new_tokens tokens drawn on the GPU (temperature 0 or top_k 1: greedy; else seeded temperature /
    top-k / top-p, reproducible: the draw is a hash of (seed, position)), each step a CUDA graph replay.
    Stops at an end-of-sequence id (eos_ids; None: the tokenizer's <|im_end|> and <|endoftext|>; [] never).
    stream: print, or a callable of one string, gets the text as it is decoded (whole UTF-8 characters).

    One int32 is read back per token: that is what streaming and stopping at end-of-sequence cost, and it is
    hidden by reading each token one step late (see _tokens). The price to measure is readback_cost():
    graph replays back to back, against the same with the per-token read. Returns Generation(text, ids, finish)."""
    how = Sampling(temperature, top_k, top_p, seed)           # checks before anything runs
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    if not isinstance(prompt, str):
        raise ValueError(f"prompt: expected a str, got {type(prompt).__name__}")
    ids = encode(tokenizer, prompt, chat)
    if not ids:
        raise ValueError("prompt: encodes to no tokens")
    if max(ids) >= decoder.cfg.vocab:
        raise ValueError(f"the tokenizer gives id {max(ids)}, past the model's vocabulary ({decoder.cfg.vocab})")
    if len(ids) + max_new_tokens - 1 > decoder.capacity:
        raise ValueError(f"{len(ids)} prompt + {max_new_tokens} new tokens do not fit the KV cache ({decoder.capacity})")
    eos = set(default_eos(tokenizer) if eos_ids is None else (int(i) for i in eos_ids))
    with sampling(decoder, how):
        _prompt_in(decoder, ids)
        return stream_text(decoder, tokenizer, max_new_tokens, eos, stream, use_graph and not decoder.emulate)


def stream_text(decoder, tokenizer, max_new_tokens: int, eos, stream=None, use_graph: bool = True) -> Generation:
    """After the prompt: the first token (the prompt's) and up to max_new_tokens - 1 more, decoded as they come
    (stream), stopping at an id in eos. Generation(text, ids, finish)."""
    out, finish = TextStream(tokenizer, _emit(stream)), "length"
    for t in _tokens(decoder, max_new_tokens - 1, use_graph):
        if t in eos:
            finish = "eos"
            break
        out.push(t)
    out.finish()
    return Generation(out.text, out.ids, finish)


def readback_cost(decoder, n: int = 64, temperature: float = 0.0) -> dict:
    """Measured on the GPU: ms per token of n graph replays back to back (tokens read once, at the end), and
    the same with each token read back as generate() reads it (one step late, pinned memory); their ratio is
    the streaming design's cost. None without a GPU."""
    if decoder.emulate:
        return None
    import cupy
    how = Sampling(temperature, 0, 1.0, 0)
    with sampling(decoder, how):
        _prompt_in(decoder, [0])
        run = decoder.graph()
        out = {}
        for what in ("back to back", "read per token"):
            decoder.at(1)
            cupy.cuda.get_current_stream().synchronize()
            t0 = time.perf_counter()
            if what == "back to back":
                for _ in range(n):
                    run()
                decoder.history[:n].get()
            else:
                for _ in _tokens(decoder, n, True):
                    pass
            out[what] = (time.perf_counter() - t0) * 1e3 / n
    decoder.reset()
    out["ratio"] = out["read per token"] / out["back to back"]
    return out


# ---- without a checkpoint ------------------------------------------------------------------------------------------

DEMO_TEXT = (
    "The kernel reads the weights once per token, and the token step is bound by memory bandwidth. "
    "A warp of thirty-two threads shuffles values between its lanes without shared memory. "
    "Softmax subtracts the maximum before the exponent, so large logits never overflow. "
    "RMSNorm divides each row by the root of its mean square, then scales it by a weight. "
    "The attention of one new token reads every key and value in the cache: decode is a matrix-vector product. "
    "Temperature flattens or sharpens the distribution; top-k and top-p cut its tail before the draw. "
    "Hello, world! Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Unicode: café, naïve, Grüße, 你好, 🙂. "
    "Qwen3 is a decoder-only transformer with grouped-query attention and rotary position embeddings. ")


def demo_tokenizer(vocab_size: int = 512):
    """A byte-level BPE trained here on DEMO_TEXT (every byte is a token, so any text encodes), with
    <|endoftext|>, <|im_start|>, <|im_end|> as special tokens; vocab_size >= 259 (the 256 bytes and the 3
    special tokens), at most that many ids (few merges are learnt from so short a text)."""
    tk = _tokenizers()
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size: a byte-level BPE needs >= {256 + len(SPECIAL_TOKENS)} ids, got {vocab_size}")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([DEMO_TEXT] * 4, trainer=trainer)
    return tok


def open_model(directory, path: str = "float16", capacity: int = 4096):
    """(Decoder, tokenizer, eos ids) of a local checkpoint directory (config.json, *.safetensors,
    tokenizer.json, generation_config.json)."""
    from .engine import Decoder
    from .weights import load_checkpoint
    d = Path(directory).expanduser()
    cfg, W = load_checkpoint(d)
    tok = load_tokenizer(d)
    return Decoder(cfg, W, path=path, capacity=capacity), tok, eos_ids(d, tok)
