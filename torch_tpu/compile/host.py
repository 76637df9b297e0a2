"""The part of a graph that only touches CPU tensors runs on the host, with
PyTorch's own CPU kernels, before the graph's executable is launched.

An optimizer compiled with capturable=False keeps its step counts in CPU
tensors: the graph bumps them and computes the bias corrections from them.
Lowered into the XLA executable, those counts had to cross to the device and
their new values back, so every optimizer step waited for the whole graph to
finish.  On the host, the counts are bumped and written in place as eager
writes them, and the executable receives the new counts packed into one array
per dtype.  Only what those in-place updates (and CPU outputs) need runs on
the host: every CPU op there is a PyTorch dispatch per tensor (the bias
corrections alone were ~200 of them per AdamW step, most of the step's host
time), while inside the executable the rest costs nothing.
"""
import operator

import torch

from .. import dtypes
from . import step_counts

aten = torch.ops.aten


def _vals(node):
    val = node.meta.get("val")
    return list(val) if isinstance(val, (list, tuple)) else [val]


def _on_cpu(node):
    """Whether the node's recorded value is a CPU tensor or a list of them."""
    vals = _vals(node)
    return bool(vals) and all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in vals)


def _ancestors(roots, within):
    """The nodes of ``within`` that ``roots`` are or depend on."""
    found, stack = set(), [r for r in roots if r in within]
    while stack:
        node = stack.pop()
        if node not in found:
            found.add(node)
            stack.extend(i for i in node.all_input_nodes if i in within)
    return found


def _batchable(copies, computed):
    """Whether the copies can run as one ``_foreach_copy_`` after every
    computed node: nothing reads their results, and they come after the
    computed nodes (so no computed node reads an input after its update)."""
    def computed_tensor(value):
        return (isinstance(value, torch.fx.Node) and value.op == "call_function"
                and isinstance(value.meta.get("val"), torch.Tensor))
    if len(copies) < 2 or any(c.users or not computed_tensor(c.args[1]) for c in copies):
        return False
    order = {n: i for i, n in enumerate(copies[0].graph.nodes)}
    return not computed or min(order[c] for c in copies) > max(order[n] for n in computed)


# Out-of-place foreach ops whose in-place form writes the same values
_IN_PLACE = {aten._foreach_add.Scalar: aten._foreach_add_.Scalar}


def _in_place_update(copies, computed):
    """The foreach node of ``computed`` that ``copies`` write back into its own
    list inputs, element for element (AdamW's step counts: ``steps + 1``, then
    a copy into each count), when it may run in place instead: one dispatch
    instead of two, no new tensors.  None otherwise."""
    nodes = [n for n in computed if n.target in _IN_PLACE]
    if len(nodes) != 1 or not copies:
        return None
    node = nodes[0]
    inputs = node.args[0]
    if not isinstance(inputs, (list, tuple)) or len(set(inputs)) != len(inputs) or len(copies) != len(inputs):
        return None
    items = {}  # getitem node -> its index
    for user in node.users:
        if user.target is not operator.getitem or any(u.op == "output" for u in user.users):
            return None  # (an output would be the input itself, not a new tensor)
        items[user] = user.args[1]
    written = {}
    for c in copies:
        k = items.get(c.args[1])
        if k is None or inputs[k] is not c.args[0] or k in written:
            return None
        src, dst = c.args[1].meta.get("val"), c.args[0].meta.get("val")
        if src.dtype != dst.dtype or src.shape != dst.shape:  # copy_ would cast or broadcast
            return None
        written[k] = c
    # the inputs are read by nothing else (the update would reach it earlier than the copies did)
    if any(u is not node and u not in copies for p in inputs for u in p.users):
        return None
    return node


class HostPart:
    """The host nodes of ``gm`` (``nodes``) and one generated function that
    computes them.

    Host nodes: ``copy_`` of a CPU value computed from CPU inputs into a
    host-only input (an in-place update, done on the host as eager does it;
    an input the device also reads keeps the old route, so it cannot see the
    update too early); the call_function nodes those copies and the graph's
    CPU outputs need (the rest of the CPU-only nodes, AdamW's bias
    corrections say, run in the executable from the exported values); and
    the CPU inputs that only host nodes read.
    ``exports``: host values that device nodes read, in ``unpack`` order.
    """

    def __init__(self, gm):
        graph_nodes = list(gm.graph.nodes)
        placeholders = [n for n in graph_nodes if n.op == "placeholder"]
        cpu_inputs = [n for n in placeholders if _on_cpu(n)]
        candidates = []  # every node the host could compute
        known = set(cpu_inputs)
        for node in graph_nodes:
            if node.op != "call_function" or node.target is aten.copy_.default:
                continue
            if all(i in known for i in node.all_input_nodes) and _on_cpu(node):
                candidates.append(node)
                known.add(node)
        outputs = {n for n in candidates if any(u.op == "output" for u in n.users)}
        computed = candidates
        while True:  # keep the candidates the host updates and outputs need; fewer copies may need fewer
            known = set(cpu_inputs) | set(computed)
            host_only = {p for p in cpu_inputs
                         if all(u in known or (u.target is aten.copy_.default and u.args[0] is p)
                                for u in p.users)}
            copies = [n for n in graph_nodes
                      if n.op == "call_function" and n.target is aten.copy_.default
                      and n.args[0] in host_only and n.args[1] in known]
            needed = _ancestors([c.args[1] for c in copies] + [n for n in computed if n in outputs], set(computed))
            if len(needed) == len(computed):
                break
            computed = [n for n in computed if n in needed]
        self.nodes = set(computed) | host_only | set(copies)
        self.exports = [n for n in computed if any(u not in self.nodes and u.op != "output"
                                                   for u in n.users)]
        self.input_positions = [placeholders.index(p) for p in cpu_inputs]
        self._scalar_dtypes = []  # dtypes of the packed 0-d exports, in pack order
        for node in self.exports:
            for v in _vals(node):
                if v.dim() == 0 and v.dtype not in self._scalar_dtypes:
                    self._scalar_dtypes.append(v.dtype)
        self._outputs = [n for n in (computed + list(host_only)) if any(u.op == "output" for u in n.users)]
        self._fn = self._generate(gm, cpu_inputs, computed, copies) if computed or copies else None
        # the common program (an optimizer's step counts) without FX's generic calls
        self._counts = None if self._fn is None else step_counts.match(
            _in_place_update(copies, computed), computed, self.exports, self._outputs,
            {p: i for i, p in enumerate(placeholders)})

    def __bool__(self):
        return self._fn is not None

    def _generate(self, gm, cpu_inputs, computed, copies):
        """One straight-line function (FX codegen) for the host nodes, returning
        the packed exports, then the other exports, then the host outputs."""
        graph = torch.fx.Graph()
        env = {}
        for p in cpu_inputs:
            env[p] = graph.placeholder(p.name)
        in_place = _in_place_update(copies, computed)
        for node in computed:
            if node is in_place:  # its items are then the updated inputs themselves
                args = torch.fx.map_arg(node.args, lambda n: env[n])
                graph.call_function(_IN_PLACE[node.target], args, dict(node.kwargs))
            elif in_place is not None and node.target is operator.getitem and node.args[0] is in_place:
                env[node] = env[in_place.args[0][node.args[1]]]
            else:
                env[node] = graph.node_copy(node, lambda n: env[n])
        if in_place is not None:
            pass  # it did the copies
        elif _batchable(copies, computed):  # one dispatch for all of them (AdamW: one per parameter)
            graph.call_function(aten._foreach_copy_.default,
                                ([env[c.args[0]] for c in copies], [env[c.args[1]] for c in copies]))
        else:
            for node in copies:
                env[node] = graph.node_copy(node, lambda n: env[n])
        scalars = {d: [] for d in self._scalar_dtypes}
        others = []
        for node in self.exports:
            vals = _vals(node)
            items = ([graph.call_function(operator.getitem, (env[node], i)) for i in range(len(vals))]
                     if isinstance(node.meta.get("val"), (list, tuple)) else [env[node]])
            for v, item in zip(vals, items):
                (scalars[v.dtype] if v.dim() == 0 else others).append(item)
        packs = [graph.call_function(aten.stack.default, (scalars[d],)) for d in self._scalar_dtypes]
        graph.output((tuple(packs), tuple(others), tuple(env[n] for n in self._outputs)))
        return torch.fx.GraphModule(gm, graph)

    def run(self, args):
        """Compute the host nodes from the call's arguments (and apply their
        in-place updates): ``(host outputs {node: tensor}, arrays for the
        executable)``."""
        if self._counts is not None:
            pack = self._counts(args)
            if pack is not None:
                return {}, [pack]
        packs, others, outputs = self._fn(*[args[i] for i in self.input_positions])
        arrays = [dtypes.numpy_from_cpu_tensor(t) for t in (*packs, *others)]
        return dict(zip(self._outputs, outputs)), arrays

    def unpack(self, arrays):
        """``{node: traced value}`` for the exports inside the executable, from
        the arrays ``run`` made (the layout is fixed per graph)."""
        packs = dict(zip(self._scalar_dtypes, arrays))
        others = iter(arrays[len(self._scalar_dtypes):])
        taken = {d: 0 for d in self._scalar_dtypes}
        found = {}
        for node in self.exports:
            items = []
            for v in _vals(node):
                if v.dim() == 0:
                    items.append(packs[v.dtype][taken[v.dtype]])
                    taken[v.dtype] += 1
                else:
                    items.append(next(others))
            found[node] = tuple(items) if isinstance(node.meta.get("val"), (list, tuple)) else items[0]
        return found
