"""luminal: a deep-learning compiler and runtime.

Build a lazy tensor graph, compile it for a backend, set inputs, execute, read outputs:

    import numpy as np, luminal
    g = luminal.Graph()
    x = g.tensor((2, "n"))
    y = (x.exp() * 2).sum(axis=1).retrieve()
    g.set_dim("n", 3); g.compile(luminal.cpu())
    x.set(np.ones((2, 3), np.float32)); g.execute(); print(y.numpy())

Or run a language model (a GGUF file or a Hugging Face folder):

    for piece in luminal.generate("model.gguf", "The capital of France is", max_tokens=32):
        print(piece, end="", flush=True)
"""
import codecs
import os
import queue
import threading

from ._luminal import *  # noqa: F401,F403
from ._luminal import Model, Tensor, __version__, _load  # noqa: F401


def load(path, device="cpu", kv_cache="f32"):
    """Loads a language model (a GGUF file, or a Hugging Face folder with config.json,
    safetensors weights and tokenizer.json) and compiles it for `device` ("cpu" or
    "cuda"). `kv_cache`: the KV cache's element type, "f32" or "f16". The Model can
    generate many times."""
    return _load(os.fspath(path), device, kv_cache)


def _generate(self, prompt, max_tokens=128, *, temperature=0.0, top_k=0, top_p=1.0, seed=0,
              ignore_eos=False):
    """Yields the text after `prompt` piece by piece as it is generated: greedy where
    `temperature` is 0, else sampled (restricted to the `top_k` most likely tokens and the
    `top_p` nucleus, from `seed`). Stops after `max_tokens` or at the end-of-sequence
    token (unless `ignore_eos`). An error raises luminal.Error from the iteration."""
    pieces = queue.Queue()
    done = object()
    failure = []

    def work():
        try:
            self._generate(prompt, max_tokens, temperature, top_k, top_p, seed, ignore_eos,
                           pieces.put)
        except BaseException as e:  # raised to the caller from the iteration
            failure.append(e)
        finally:
            pieces.put(done)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    # A token may end inside a character: text is yielded once its bytes are whole.
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while (piece := pieces.get()) is not done:
            if out := text.decode(piece):
                yield out
        if out := text.decode(b"", final=True):
            yield out
    finally:
        # Stopped early or not, the model is used by nothing else until the worker ends.
        worker.join()
    if failure:
        raise failure[0]


Model.generate = _generate


def _getitem(self, key):
    """Basic indexing as NumPy's: ints (dropping their axis), slices of step 1, None (a
    new axis) and one Ellipsis. A symbolic axis takes slices whose ends are given, or
    none; negative positions need a numeric size."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        used = sum(k is not None for k in key) - 1
        key = key[:at] + (slice(None),) * (self.ndim - used) + key[at + 1:]
    if sum(k is not None for k in key) > self.ndim:
        raise IndexError(f"too many indices for a tensor of {self.ndim} dims")
    out, axis = self, 0
    for k in key:
        if k is None:
            out, axis = out.unsqueeze(axis), axis + 1
            continue
        size = out.shape[axis]
        numeric = isinstance(size, int)

        def position(i, what):
            if isinstance(i, str) or i >= 0:  # (a dim's name is a position too)
                return i
            if not numeric:
                raise IndexError(f"a negative {what} on the symbolic axis {axis} ({size})")
            return i + size

        if isinstance(k, int):
            i = position(k, "index")
            if numeric and not 0 <= i < size:
                raise IndexError(f"index {k} is out of bounds for axis {axis} of size {size}")
            out = out.slice(axis, i, i + 1).squeeze(axis)
        elif isinstance(k, slice):
            if k.step not in (None, 1):
                raise IndexError("slices with a step are not supported yet")
            if k.start is None and k.stop is None:
                axis += 1
                continue
            start = 0 if k.start is None else position(k.start, "start")
            if k.stop is None and not numeric:
                raise IndexError(f"a slice of the symbolic axis {axis} ({size}) needs its end")
            stop = size if k.stop is None else position(k.stop, "end")
            if numeric and isinstance(start, int) and isinstance(stop, int):
                start, stop = min(start, size), min(max(stop, start), size)
            out, axis = out.slice(axis, start, stop), axis + 1
        else:
            raise IndexError(f"indices are ints, slices, None or ..., not {type(k).__name__}")
    return out


Tensor.__getitem__ = _getitem


def generate(model, prompt, max_tokens=128, **sampling):
    """Yields the text `model` (a Model, or a path that luminal.load opens on the CPU)
    generates after `prompt`, piece by piece; keyword arguments as Model.generate."""
    m = model if isinstance(model, Model) else load(model)
    yield from m.generate(prompt, max_tokens, **sampling)
