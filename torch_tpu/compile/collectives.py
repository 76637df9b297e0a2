"""Compiled graphs that contain collectives (``torch.distributed``'s
functional collectives, the ``_c10d_functional`` ops Dynamo traces into the
graph; ``torch.tpu.ops.all_gather_dim`` and friends are built on them).

The graph is cut at its collectives: the pieces between them run as compiled
graphs (one XLA executable each), and the collectives run as the ops
themselves, which c10d hands to the group's backend (``tpu_dist``'s XLA
collective programs, or any other).  Every rank traces the same graph, so
every rank issues the same collectives in the same order.

Pieces are cut by depth, not by position: a piece holds all the computation
that depends on the same number of collective rounds, so work that no
collective separates stays in one executable.
"""
import operator

import warnings

import torch

from . import lowering

# the op namespaces whose ops talk to the other ranks
_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd", "c10d_functional"})


def _namespace(target):
    return getattr(target, "namespace", None)


_OPS = set()  # other ops that talk to the other ranks (register)


def register(op) -> None:
    """Run ``op`` (an OpOverload) between the compiled pieces, like a collective."""
    _OPS.add(op)


def _is_collective(target):
    return _namespace(target) in _NAMESPACES or target in _OPS


def _is_comm(node, comm):
    if node.op != "call_function":
        return False
    if _is_collective(node.target):
        return True
    # an element of a coalesced collective's list result stays with it
    return node.target is operator.getitem and node.args[0] in comm


def present(gm: torch.fx.GraphModule) -> bool:
    return any(n.op == "call_function" and _is_collective(n.target) for n in gm.graph.nodes)


def _partitions(gm):
    """{node: partition}: computation at collective depth d goes to partition
    2d, a collective (with its wait) whose inputs are at depth d to 2d + 1.
    Partitions only read lower-numbered ones, so running them in order works.
    Collectives never move before an earlier one: their order is the
    program's (point-to-point pairs between ranks rely on it)."""
    depth, part, comm = {}, {}, set()
    last = 0  # the depth of the latest collective
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            depth[n] = 0
            continue
        if n.op == "output":
            continue
        if _is_comm(n, comm):
            comm.add(n)
            # a collective's own result (the wait of its start, say) is a round deeper already
            d = max([depth[m] - (m in comm) for m in n.all_input_nodes] + [last])
            part[n], depth[n], last = 2 * d + 1, d + 1, d
        else:
            d = max((depth[m] for m in n.all_input_nodes), default=0)
            part[n], depth[n] = 2 * d, d
    return part


def _in_partition_order(gm, part):
    """A copy of ``gm`` whose nodes are sorted (stably) by partition, and the
    partitions of its nodes: the split graph then runs the pieces in that order."""
    graph, env = torch.fx.Graph(), {}
    nodes = list(gm.graph.nodes)
    head = [n for n in nodes if n.op in ("placeholder", "get_attr")]
    body = sorted((n for n in nodes if n in part), key=part.__getitem__)
    for n in [*head, *body, *(n for n in nodes if n.op == "output")]:
        env[n] = graph.node_copy(n, env.__getitem__)
    return torch.fx.GraphModule(gm, graph), {env[n]: p for n, p in part.items()}


class _Piece(torch.nn.Module):
    """A compiled piece called the way the split graph calls its submodules."""

    def __init__(self, compiled):
        super().__init__()
        self.compiled = compiled

    def forward(self, *args):
        return tuple(self.compiled(list(args)))


def compile_split(gm: torch.fx.GraphModule, name: str, compile_piece):
    """A boxed callable running ``gm``: its computation as compiled pieces
    (``compile_piece(piece_gm, name)``, e.g. CompiledGraph) and its
    collectives as ops in between."""
    from torch.fx.passes.split_module import split_module
    gm, part = _in_partition_order(gm, _partitions(gm))
    split = split_module(gm, gm, part.__getitem__, keep_original_order=True, tuple_return=True)
    comm_parts = {p for n, p in part.items() if p % 2}
    pieces = 0
    for child_name, child in list(split.named_children()):
        index = int(child_name.rpartition("_")[2])
        if index in comm_parts:
            continue  # collectives run as the ops themselves
        try:
            piece = _Piece(compile_piece(child, f"{name} piece {index // 2}"))
        except lowering.LoweringError as e:
            warnings.warn(f"torch_tpu: torch.compile: {e}; this piece of a {name} graph runs through "
                          "the eager tpu kernels instead", stacklevel=2)
            counts["eager_pieces"] += 1
            continue
        delattr(split, child_name)
        setattr(split, child_name, piece)
        pieces += 1
    counts["pieces"] += pieces
    counts["collective_rounds"] += len(comm_parts)

    def run(args):
        out = split(*args)
        args.clear()  # boxed calling convention: let inputs die early
        return list(out) if isinstance(out, (list, tuple)) else [out]
    run._boxed_call = True
    run.split = split
    return run


counts = {"pieces": 0, "collective_rounds": 0, "eager_pieces": 0}  # deterministic, for tests
