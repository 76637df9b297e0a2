"""Rewrites of ATen graphs before lowering, where an equivalent form avoids a
data-dependent size (which would send the whole graph to the eager kernels)."""
import torch

aten = torch.ops.aten


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
