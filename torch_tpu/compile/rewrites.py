"""Rewrites of ATen graphs before lowering, where an equivalent form avoids a
data-dependent size or a higher-order op (either would send the whole graph
to the eager kernels)."""
import importlib
import logging
import operator

import torch
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten
log = logging.getLogger("torch_tpu.compile")


def _fake_mode(gm):
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    return torch._guards.detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])


def _add(gm, fake_mode, target, args, kwargs=None):
    """A new node before the current insertion point, with its fake value."""
    node = gm.graph.call_function(target, args, kwargs or {})
    vals = torch.fx.node.map_arg((args, kwargs or {}), lambda n: n.meta["val"])
    with fake_mode:
        node.meta["val"] = target(*vals[0], **vals[1])
    return node


def _sums_of_selection(node):
    """The users of ``x[mask]`` (one boolean mask, the only index) if every one
    sums it over the selected elements (dim 0, no dtype), else None."""
    x, indices = node.args
    if len(indices) != 1 or not isinstance(indices[0], torch.fx.Node):
        return None
    if getattr(indices[0].meta.get("val"), "dtype", None) != torch.bool:
        return None
    users = list(node.users)
    if not users or any(u.target is not aten.sum.dim_IntList or list(u.args[1]) != [0] or u.kwargs.get("dtype")
                        for u in users):
        return None
    return users


def masked_sums(gm: torch.fx.GraphModule) -> None:
    """``x[mask].sum(0)`` as ``where(mask, x, 0).sum(mask's dims)``: the same
    values with static shapes.  The backward of ``x[mask] = v`` (one v for every
    selected element; wav2vec2's time masking) has this form."""
    fake_mode = _fake_mode(gm)
    if fake_mode is None:
        return
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.index.Tensor:
            continue
        users = _sums_of_selection(node)
        if users is None:
            continue
        x, (mask,) = node.args
        x_val, m = x.meta["val"], mask.meta["val"].dim()
        for user in users:
            keepdim = user.args[2] if len(user.args) > 2 else user.kwargs.get("keepdim", False)
            with gm.graph.inserting_before(user):
                spread = _add(gm, fake_mode, aten.view.default,
                              (mask, list(mask.meta["val"].shape) + [1] * (x_val.dim() - m)))
                zero = _add(gm, fake_mode, aten.scalar_tensor.default, (0,),
                            {"dtype": x_val.dtype, "device": x_val.device})
                kept = _add(gm, fake_mode, aten.where.self, (spread, x, zero))
                total = _add(gm, fake_mode, aten.sum.dim_IntList, (kept, list(range(m))))
                if keepdim:
                    total = _add(gm, fake_mode, aten.unsqueeze.default, (total, 0))
            user.replace_all_uses_with(total)
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def _dense_hops():
    """Higher-order ops that lower as PyTorch's own dense (math) implementation:
    {hop: that implementation}.  FlexAttention's score_mod/mask_mod subgraphs
    are plain ATen code, so its dense form lowers like any other ATen ops."""
    # (the package exports the op under the module's name, so import the module by path)
    flex = importlib.import_module("torch._higher_order_ops.flex_attention")
    return {flex.flex_attention: flex.sdpa_dense,
            flex.flex_attention_backward: flex.sdpa_dense_backward}


def inline_dense_hops(gm: torch.fx.GraphModule) -> None:
    """Replace each FlexAttention node with the ATen ops its dense
    implementation runs (traced functionally with the node's fake values), so
    the graph lowers whole instead of running on the eager kernels."""
    dense = _dense_hops()
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in dense]
    fake_mode = _fake_mode(gm) if nodes else None
    if fake_mode is None:
        return
    for node in nodes:
        try:
            traced = _trace_dense(gm, node, dense[node.target], fake_mode)
        except Exception as e:  # left in place: the graph then runs on the eager kernels
            log.warning("torch_tpu: could not inline %s (%s: %s)", node.target, type(e).__name__, e)
            continue
        _inline(gm, node, traced)
    gm.graph.lint()
    gm.recompile()


def _trace_dense(gm, node, impl, fake_mode):
    """(ATen graph of ``impl`` on the node's arguments, the parent nodes that
    feed its placeholders, in order)."""
    def value(a):  # a subgraph argument is the GraphModule itself
        return getattr(gm, a.target) if a.op == "get_attr" else a.meta["val"]

    sources, spec = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    inputs = [i for i, a in enumerate(sources) if isinstance(a, torch.fx.Node) and a.op != "get_attr"]
    leaves = [value(a) if isinstance(a, torch.fx.Node) else a for a in sources]

    def run(*tensors):
        for i, t in zip(inputs, tensors):
            leaves[i] = t
        args, kwargs = torch.utils._pytree.tree_unflatten(leaves, spec)
        return impl(*args, **kwargs)

    with fake_mode:
        sub = make_fx(torch.func.functionalize(run, remove="mutations"))(
            *[leaves[i] for i in inputs])
    return sub, [sources[i] for i in inputs]


def _inline(gm, node, traced):
    """Copy the traced graph in before ``node`` and route each
    ``getitem(node, i)`` (possibly nested) to the matching traced output."""
    sub, feeds = traced
    env = {}
    feeds = iter(feeds)
    with gm.graph.inserting_before(node):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                env[n] = next(feeds)
            elif n.op == "get_attr":  # a constant of the dense code (e.g. -inf)
                name = f"_dense_{node.name}_{n.target}"
                gm.register_buffer(name, getattr(sub, n.target), persistent=False)
                env[n] = gm.graph.get_attr(name)
                env[n].meta.update(n.meta)
            elif n.op == "output":
                results = torch.fx.node.map_arg(n.args[0], lambda a: env[a])
            else:
                env[n] = gm.graph.node_copy(n, lambda a: env[a])
    _route(node, results)
    subgraphs = [a for a in node.all_input_nodes if a.op == "get_attr"]
    gm.graph.erase_node(node)
    for a in subgraphs:
        if not a.users:
            gm.graph.erase_node(a)


def _route(node, value):
    if isinstance(value, torch.fx.Node):
        node.replace_all_uses_with(value)
        return
    for user in list(node.users):
        if user.target is not operator.getitem:
            raise AssertionError(f"unexpected use of a FlexAttention result: {user}")
        _route(user, value[user.args[1]])
        user.graph.erase_node(user)
