"""torch.compile(model, backend="luminal").

Dynamo hands over the model's FX graph; AOTAutograd lowers it to core ATen ops. The nodes
luminal has a translation for (luminal.aten.TABLE) are grouped into the largest
subgraphs that keep the program's order, and each is compiled by luminal on its first
call; whatever is left runs in PyTorch: a graph break, announced once per op by a
warning, or refused with options={"strict": True}.

Registered under the entry point group `torch_dynamo_backends`, so an installed luminal
needs no import before torch.compile names it.
"""
import functools
import operator
import warnings
import weakref

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import _luminal as lm
from .aten import (DTYPES, SIZE_OPS, SUPPORTED_IF, TABLE, Node, dim_text, expressible_size,
                   missing_outputs, traced)

OPTIONS = {"strict": "raise luminal.Error naming an op without a translation (default: "
                     "run it in PyTorch with a warning)",
           "backend": "for tensors on the CPU, the luminal backend to run on: 'cpu' (default), "
                      "'reference' (the interpreter) or 'cuda_program_reference' (the program "
                      "the CUDA backend would run, on the interpreter: checks its rewrites "
                      "without a GPU)"}
HOST_BACKENDS = {"cpu": lm.cpu, "reference": lm.reference,
                 "cuda_program_reference": lm.cuda_program_reference}
_warned = set()


def luminal_backend(gm, example_inputs, options=None):
    """The Dynamo backend: torch.compile(model, backend="luminal", options={...})."""
    options = dict(options or {})
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise lm.Error(f"torch.compile(backend='luminal'): unknown option(s) {sorted(unknown)}; "
                       f"the options are {OPTIONS}")
    host = options.get("backend", "cpu")
    if host not in HOST_BACKENDS:
        raise lm.Error(f"torch.compile(backend='luminal'): backend {host!r} is not one of "
                       f"{sorted(HOST_BACKENDS)}")
    compiler = functools.partial(_compile, strict=bool(options.get("strict", False)),
                                 host=HOST_BACKENDS[host])
    # Ops the table translates whole are not decomposed (select_scatter stays one op, not
    # a where over an iota).
    decompositions = {op: fn for op, fn in core_aten_decompositions().items() if op not in TABLE}
    return aot_autograd(fw_compiler=compiler, decompositions=decompositions)(gm, example_inputs)


def _compile(gm, example_inputs, strict, host):
    missing = sorted({str(n.target) for n in gm.graph.nodes
                      if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                      and not _supported(n)})
    if missing and strict:
        raise lm.Error("torch.compile(backend='luminal', strict): no translation for " +
                       ", ".join(missing))
    for op in missing:
        if op not in _warned:
            _warned.add(op)
            warnings.warn(f"luminal: no translation for {op}; it runs in PyTorch (graph break)",
                          stacklevel=2)
    # The symbolic sizes' values come from the graph's inputs: a subgraph may see only
    # expressions of them (s0 + s1), never a bare s0.
    binders = {}
    for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        val = n.meta.get("val")
        sizes = [(axis, s) for axis, s in enumerate(val.shape)] if isinstance(
            val, torch.Tensor) else [(None, val)]
        for axis, s in sizes:
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                binders.setdefault(s.node.expr.name, (i, axis))
    dims = {}
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    for n in fused.graph.nodes:
        if n.op == "call_module" and n.target.startswith("fused_"):
            setattr(fused, n.target, LuminalSubgraph(getattr(fused, n.target), dims, host))
    fused.recompile()

    def run(*args):
        for name, (i, axis) in binders.items():
            dims[name] = int(args[i] if axis is None else args[i].shape[axis])
        return fused(*args)
    return make_boxed_func(run)


def _supported(n):
    if n.op != "call_function" or n.target not in TABLE:
        return False
    if n.target is operator.getitem:
        src = n.args[0]
        return _supported(src) and n.args[1] not in missing_outputs(src)
    val = n.meta.get("val")
    if n.target in SIZE_OPS:
        return expressible_size(val)
    missing = missing_outputs(n)
    vals = [v for i, v in enumerate(val) if i not in missing] if isinstance(
        val, (tuple, list)) else [val]
    if not all(isinstance(v, torch.Tensor) and v.dtype in DTYPES for v in vals if v is not None):
        return False
    if any(u.target is operator.getitem and
           u.args[1] in missing for u in n.users):
        return False
    check = SUPPORTED_IF.get(n.target)
    args = torch.fx.node.map_aggregate(n.args, traced)
    kwargs = torch.fx.node.map_aggregate(n.kwargs, traced)
    return check is None or bool(check(*args, **kwargs))


class _Support(OperatorSupport):
    def is_node_supported(self, submodules, node):
        return _supported(node)


class LuminalSubgraph(torch.nn.Module):
    """A subgraph of core ATen ops compiled by luminal on its first call, for the device of
    its inputs; symbolic sizes become luminal's symbolic dims, bound on every call."""

    def __init__(self, gm, dims, host=lm.cpu):
        super().__init__()
        self.gm = gm
        self.dims = dims  # the symbolic sizes' values for this call, by name
        self.host = host  # the backend for inputs on the CPU
        self.graph = None

    def forward(self, *args):
        if self.graph is None:
            self._build(args)
        for name, value in self.dims.items():
            self.graph.set_dim(name, value)
        if not self.compiled:
            self.graph.compile(lm.cuda() if self.on_gpu else self.host())
            self.compiled = True
        for i, t in self.inputs:
            self._set(i, t, args[i])
        if self.on_gpu:
            # Each output is computed into a tensor of torch's (no copy), the run in order
            # with torch's stream, neither waiting on the host.
            outs = [self._destination(o, args) for o in self.outputs]
            self.graph.execute_on_stream(torch.cuda.current_stream(self.device).cuda_stream)
            outs = [outs[o[1]].view(o[2].bound_shape).clone() if o[0] == "same" else r
                    for o, r in zip(self.outputs, outs)]
        else:
            self.graph.execute()
            outs = [self._host_output(o, args) for o in self.outputs]
        return tuple(outs) if self.tuple_out else outs[0]

    def _set(self, i, tensor, value):
        # An input whose tensor object and version are those set last time (a parameter,
        # a buffer) still holds its data in luminal: set again only what changed.
        seen = self.last_set.get(i)
        key = (value._version, value.data_ptr())
        if seen is not None and seen[0]() is value and seen[1] == key:
            return
        # On the GPU luminal reads the tensor where it lies; on the CPU it keeps a copy.
        # (Contiguous first: torch copies a strided tensor faster than luminal's reader.)
        tensor.set(value.detach().contiguous())
        self.last_set[i] = (weakref.ref(value), key)

    def _destination(self, out, args):
        kind, what, dtype = out
        if kind in ("input", "size"):
            return self._host_output(out, args)
        if kind == "same":  # filled from that output after the run
            return None
        t = torch.empty(what.bound_shape, dtype=dtype, device=self.device)
        what.write_into(t)
        return t

    def _host_output(self, out, args):
        kind, what, dtype = out
        if kind == "input":
            return args[what]
        if kind == "size":  # a traced size, under this call's sizes
            if isinstance(what, int):
                return what
            expr = what.node.expr
            return int(expr.subs({s: self.dims[s.name] for s in expr.free_symbols}))
        return torch.from_numpy(what.numpy()).to(dtype=dtype)

    def _build(self, args):
        self.graph = lm.Graph()
        self.inputs, self.outputs, self.last_set = [], [], {}
        self.compiled = False
        # On the GPU where any input is there (a buffer left on the CPU, moved by the graph
        # with .to(device), is copied over as it is set).
        devices = [a.device for a in args if isinstance(a, torch.Tensor)]
        self.device = next((d for d in devices if d.type == "cuda"), torch.device("cpu"))
        self.on_gpu = self.device.type == "cuda"
        env = {}
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for i, n in enumerate(placeholders):
            val = n.meta.get("val", args[i])
            if isinstance(val, torch.Tensor):
                shape = tuple(dim_text(s) for s in val.shape)
                env[n] = self.graph.tensor(shape, DTYPES[val.dtype], name=n.name)
                self.inputs.append((i, env[n]))
            else:
                env[n] = dim_text(val)
        for n in self.gm.graph.nodes:
            if n.op == "call_function":
                env[n] = self._translate(n, env)
            elif n.op == "output":
                index = {p: i for i, p in enumerate(placeholders)}
                self.tuple_out = isinstance(n.args[0], (tuple, list))
                written = {}  # on the GPU: the output each value is written into, by node
                for o in n.args[0] if self.tuple_out else [n.args[0]]:
                    if o in index:
                        self.outputs.append(("input", index[o], None))
                        continue
                    out = env[o]
                    if not isinstance(out, lm.Tensor):  # a size another subgraph reads
                        self.outputs.append(("size", o.meta["val"], None))
                        continue
                    if not self.on_gpu:
                        self.outputs.append(("tensor", out.retrieve(), o.meta["val"].dtype))
                        continue
                    out = out.contiguous().retrieve()  # (written as it lies: no view)
                    if out.node in written:  # a value two outputs name: the second a copy
                        self.outputs.append(("same", written[out.node], out))
                        continue
                    written[out.node] = len(self.outputs)
                    self.outputs.append(("tensor", out, o.meta["val"].dtype))

    def _translate(self, n, env):
        args = torch.fx.node.map_arg(n.args, env.__getitem__)
        # Where a result lives is the subgraph's business, not the op's.
        kwargs = {k: v for k, v in torch.fx.node.map_arg(n.kwargs, env.__getitem__).items()
                  if k not in ("device", "layout", "pin_memory", "memory_format")}
        try:
            out = TABLE[n.target](Node(self.graph, n, env), *args, **kwargs)
        except lm.Error as e:
            raise lm.Error(f"{n.target} ({n.name}): {e}") from e
        val = n.meta.get("val")
        if isinstance(out, lm.Tensor) and isinstance(val, torch.Tensor):
            want = DTYPES[val.dtype]
            if out.dtype != want:
                out = out.cast(want)
            if len(out.shape) != val.dim():
                raise lm.Error(f"{n.target} ({n.name}): translated to rank {len(out.shape)}, "
                               f"PyTorch's result has rank {val.dim()}")
        return out
