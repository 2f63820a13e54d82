"""Shared helpers: build a graph, run it on a backend, compare with NumPy."""
import numpy as np
import pytest

import luminal


def run(build, *arrays, backend=None, dims=None):
    """Builds a graph whose inputs have the arrays' shapes and dtypes (`build(g, *inputs)`
    returns the output tensor or a tuple of them), compiles it for `backend` (the CPU's by
    default), sets the inputs, executes and returns the outputs as NumPy arrays."""
    g = luminal.Graph()
    types = {np.dtype(np.float32): luminal.float32, np.dtype(np.float64): luminal.float64,
             np.dtype(np.float16): luminal.float16, np.dtype(np.int32): luminal.int32,
             np.dtype(np.int64): luminal.int64, np.dtype(np.bool_): luminal.bool_}
    inputs = [g.tensor(a.shape, types[a.dtype]) for a in arrays]
    out = build(g, *inputs)
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        o.retrieve()
    for name, value in (dims or {}).items():
        g.set_dim(name, value)
    g.compile(backend or luminal.cpu())
    for t, a in zip(inputs, arrays):
        t.set(a)
    g.execute()
    got = tuple(o.numpy() for o in outs)
    return got if isinstance(out, tuple) else got[0]


@pytest.fixture
def rng():
    return np.random.default_rng(7)
