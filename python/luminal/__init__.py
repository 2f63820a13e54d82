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
from ._luminal import Model, __version__, _load  # noqa: F401


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


def generate(model, prompt, max_tokens=128, **sampling):
    """Yields the text `model` (a Model, or a path that luminal.load opens on the CPU)
    generates after `prompt`, piece by piece; keyword arguments as Model.generate."""
    m = model if isinstance(model, Model) else load(model)
    yield from m.generate(prompt, max_tokens, **sampling)
