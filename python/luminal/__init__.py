"""luminal: a deep-learning compiler and runtime.

Build a lazy tensor graph, compile it for a backend, set inputs, execute, read outputs:

    import numpy as np, luminal
    g = luminal.Graph()
    x = g.tensor((2, "n"))
    y = (x.exp() * 2).sum(axis=1).retrieve()
    g.set_dim("n", 3); g.compile(luminal.cpu())
    x.set(np.ones((2, 3), np.float32)); g.execute(); print(y.numpy())
"""
from ._luminal import *  # noqa: F401,F403
from ._luminal import __version__  # noqa: F401
