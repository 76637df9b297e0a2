"""``SingleTraceTrainer``: a whole training step (forward, loss, backward,
optimizer update) traced with ``make_fx`` into one ATen graph and run as one
XLA executable per step.

The step is written functionally (``torch.func.grad_and_value`` over
``functional_call``, a functional optimizer) and then writes the new
parameters, optimizer state and buffers back into the tensors it was given;
``functionalize`` turns those writes into ``copy_`` nodes on the graph's
inputs, which the tpu graph executor stores straight into the inputs'
storages.  The default executor donates those inputs' buffers to the
executable, so XLA updates parameters and state in place.  The model's own
parameters share storage with the trainer's, so the model sees each update.
"""
import torch
from torch.func import functional_call, functionalize, grad_and_value
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree

from .functional import Optimizer, ParamGroup


def default_loss(outputs, targets=None):
    """The loss: ``mse_loss(outputs, targets)`` when targets are given; else the
    output's ``loss`` (attribute or key), or the output itself if it is one
    number, or the mean of its first tensor."""
    if targets is not None:
        return torch.nn.functional.mse_loss(outputs, targets)
    loss = getattr(outputs, "loss", None)
    if loss is None and isinstance(outputs, dict):
        loss = outputs.get("loss")
    if loss is not None:
        return loss
    for leaf in _pytree.tree_leaves(outputs):
        if isinstance(leaf, torch.Tensor):
            return leaf if leaf.numel() == 1 else leaf.mean()
    raise TypeError(f"SingleTraceTrainer: cannot find a loss in a model output of type {type(outputs).__name__}")


def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """``native_batch_norm`` updates the running statistics without saying so in
    its schema, so functionalization cannot see the writes: trace the
    functional form and write the new statistics back explicitly."""
    aten = torch.ops.aten
    if not training:
        return aten._native_batch_norm_legit_no_training.default(input, weight, bias, running_mean,
                                                                 running_var, momentum, eps)
    if running_mean is None:
        return aten._native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
    out, mean, rstd, new_mean, new_var = aten._native_batch_norm_legit_functional.default(
        input, weight, bias, running_mean, running_var, training, momentum, eps)
    running_mean.copy_(new_mean)
    running_var.copy_(new_var)
    return out, mean, rstd


def _call_args(inputs):
    if isinstance(inputs, dict):
        return (), inputs
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def default_compile(gm: torch.fx.GraphModule, example_inputs):
    """The tpu graph executor, donating the buffers of the inputs the step rewrites."""
    from ..compile import backend
    graph = backend.CompiledGraph(gm, "train step", donate_mutated=True)

    def run(*flat):
        return graph(list(flat))
    run.graph = graph
    return run


class SingleTraceTrainer:
    """Train ``model`` one compiled step at a time.

    ``optimizer``: a ``torch.tpu.optimizers.Optimizer``; None computes the loss
    and the gradients only, storing the gradients in each parameter's ``.grad``.
    ``compile_fn(graph_module, example_inputs) -> callable(*flat_inputs)``:
    runs the traced step (default: one tpu XLA executable, inputs donated).
    ``compute_loss_fn(outputs, targets)``: the loss (default ``default_loss``).

    ``make_compiled_train_step(example_inputs, example_targets=None)`` traces
    and compiles, returning ``train_step(inputs, targets=None) -> loss``;
    ``step(inputs, targets=None)`` does the same lazily, once per input
    structure."""

    def __init__(self, model: torch.nn.Module, optimizer: Optimizer = None, compile_fn=None,
                 compute_loss_fn=None):
        self.model = model
        self.optimizer = optimizer
        self.compile_fn = compile_fn or default_compile
        self.compute_loss_fn = compute_loss_fn or default_loss
        params, seen = {}, set()
        for name, p in model.named_parameters():  # tied weights: once, under their first name
            if id(p) not in seen and p.requires_grad:
                seen.add(id(p))
                params[name] = p
        self._param_objects = params
        self.buffers = {name: b.detach() for name, b in model.named_buffers()}
        if optimizer is None:
            self.param_group = ParamGroup(params={n: p.detach() for n, p in params.items()})
        else:
            self.param_group = optimizer.init_param_group(params)
        self._steps = {}

    @property
    def params(self) -> dict:
        return self.param_group.params

    def _state(self, inputs, targets):
        with_targets = (targets,) if targets is not None else ()
        return (self.param_group, self.buffers, inputs) + with_targets

    def make_compiled_train_step(self, example_inputs, example_targets=None):
        flat, spec = _pytree.tree_flatten(self._state(example_inputs, example_targets))
        has_targets = example_targets is not None
        model, optimizer, loss_fn = self.model, self.optimizer, self.compute_loss_fn

        def step(*flat_args):
            state = _pytree.tree_unflatten(list(flat_args), spec)
            group, buffers, inputs = state[:3]
            targets = state[3] if has_targets else None
            args, kwargs = _call_args(inputs)

            def loss_of(params, buffers):  # buffers as an argument: the model may update them
                outputs = functional_call(model, {**params, **buffers}, args, kwargs)
                loss = loss_fn(outputs, targets)
                return loss, loss

            grads, loss = grad_and_value(loss_of, argnums=0, has_aux=True)(group.params, buffers)
            loss = loss[1] if isinstance(loss, tuple) else loss
            if optimizer is None:
                return (loss.detach(), *grads.values())
            new = optimizer(group, grads)
            for old, value in zip(_pytree.tree_leaves(group), _pytree.tree_leaves(new)):
                if value is not old:
                    old.copy_(value)  # becomes the graph's write into its input
            return (loss.detach(),)

        from ..compile import backend
        table = {**backend._decompositions(), torch.ops.aten.native_batch_norm.default: _batch_norm}
        gm = make_fx(functionalize(step, remove="mutations"), tracing_mode="fake",
                     decomposition_table=table)(*flat)
        compiled = self.compile_fn(gm, flat)
        self.graph = gm

        def train_step(inputs, targets=None):
            if (targets is None) != (not has_targets):
                raise ValueError("SingleTraceTrainer: pass targets to the step exactly when the "
                                 "example passed them to make_compiled_train_step")
            current, current_spec = _pytree.tree_flatten(self._state(inputs, targets))
            if current_spec != spec:
                raise ValueError("SingleTraceTrainer: the inputs' structure differs from the example's; "
                                 "make a new train step for it")
            outputs = compiled(*current)
            if optimizer is None:
                for p, g in zip(self._param_objects.values(), outputs[1:]):
                    p.grad = g
            return outputs[0]
        train_step.compiled = compiled
        return train_step

    def step(self, inputs, targets=None):
        """One training step; traces and compiles on the first call with an input structure."""
        _, spec = _pytree.tree_flatten(self._state(inputs, targets))
        key = (str(spec), tuple((tuple(t.shape), t.dtype) for t in _pytree.tree_leaves((inputs, targets))
                                if isinstance(t, torch.Tensor)))
        train_step = self._steps.get(key)
        if train_step is None:
            train_step = self._steps[key] = self.make_compiled_train_step(inputs, targets)
        return train_step(inputs, targets)

    __call__ = step
