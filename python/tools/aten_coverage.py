"""Prints the list of ATen ops torch.compile(backend="luminal") translates, and how many
of PyTorch's core ATen ops that covers, as docs/torch_compile.md's last section has it:

    PYTHONPATH=build/python python3 python/tools/aten_coverage.py
"""
import torch
from torch._decomp import core_aten_decompositions

from luminal.aten import TABLE


def core_aten_ops():
    out = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            out += [op for op in (getattr(packet, o) for o in packet.overloads())
                    if torch.Tag.core in op.tags]
    return out


def main():
    ops = sorted(str(op) for op in TABLE if isinstance(op, torch._ops.OpOverload))
    core = core_aten_ops()
    covered = sum(op in TABLE for op in core)
    print(f"{len(ops)} ops: {covered} of the {len(core)} core ATen ops of torch "
          f"{torch.__version__.split('+')[0]}, and the ops below marked (not core) that "
          "AOTAutograd leaves in graphs.\n")
    for name in ops:
        op = eval(name, {"aten": torch.ops.aten, "prims": torch.ops.prims})
        print(f"- `{name}`" + ("" if torch.Tag.core in op.tags else " (not core)"))
    decompositions = core_aten_decompositions()
    missing = [op for op in core if op not in TABLE]
    lowered = sorted(str(op) for op in missing if op in decompositions or op._can_decompose())
    left = sorted(str(op) for op in missing if str(op) not in lowered)
    print(f"\nNot translated whole ({len(missing)}). Lowered by PyTorch into other ops, which "
          f"run in luminal where the table has them ({len(lowered)}; padding by reflection and "
          f"replication and nearest and bilinear upsampling are tested so): " +
          ", ".join(f"`{m}`" for m in lowered) +
          f". Run in PyTorch ({len(left)}): " + ", ".join(f"`{m}`" for m in left) + ".")


if __name__ == "__main__":
    main()
