"""Functional optimizers: ``opt(group, grads) -> new group``.

A ``ParamGroup`` holds the parameters and the optimizer state as dicts of
tensors plus a step count (a 0-d tensor, so one traced step serves every
step); it is a pytree, so ``make_fx`` and ``torch.utils._pytree`` see its
tensors.  The update is written with plain tensor ops and never mutates its
inputs: the same code runs eagerly (any eager mode) and inside the one graph
``SingleTraceTrainer`` compiles.  The math follows ``torch.optim`` (AdamW,
SGD, Muon) so results match PyTorch's optimizers.
"""
import dataclasses
import math

import torch
from torch.utils import _pytree


@dataclasses.dataclass
class ParamGroup:
    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)  # first moments / momentum buffers
    opt_state_v: dict = dataclasses.field(default_factory=dict)  # second moments
    step: torch.Tensor = None  # steps taken (float32, 0-d, on the parameters' device)


_pytree.register_dataclass(ParamGroup)


class Optimizer:
    """Base: ``init_param_group(params)`` makes the state; calling the optimizer
    with a group and a dict of gradients returns the next group."""

    def __init__(self, lr: float = 1e-3, weight_decay: float = 0.0):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        self.lr = lr
        self.weight_decay = weight_decay

    def init_param_group(self, params: dict) -> ParamGroup:
        params = {name: p.detach() for name, p in params.items()}
        device = next(iter(params.values())).device if params else None
        group = ParamGroup(params=params, step=torch.zeros((), dtype=torch.float32, device=device))
        for name, p in params.items():
            self.init_state(group, name, p)
        return group

    def init_state(self, group: ParamGroup, name: str, param: torch.Tensor) -> None:
        """Add ``param``'s state to the group (none by default)."""

    # torch_tpu is on Dynamo's skip list (its kernels call JAX); the update is
    # plain tensor code, which torch.compile should see
    @torch._dynamo.dont_skip_tracing
    def __call__(self, group: ParamGroup, grads: dict) -> ParamGroup:
        step = group.step + 1
        new = ParamGroup(params=dict(group.params), opt_state_m=dict(group.opt_state_m),
                         opt_state_v=dict(group.opt_state_v), step=step)
        for name, p in group.params.items():
            g = grads.get(name)
            if g is None:  # no gradient reached it: unchanged, as torch.optim skips it
                continue
            self.update(new, name, p, g, step)
        return new

    def update(self, group: ParamGroup, name: str, param, grad, step) -> None:
        """Write ``param``'s next value (and state) into ``group``."""
        raise NotImplementedError


class Sgd(Optimizer):
    """``torch.optim.SGD``'s update: weight decay, momentum (a buffer equal to
    the first gradient, then ``momentum * buf + (1 - dampening) * grad``), Nesterov."""

    def __init__(self, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False):
        super().__init__(lr, weight_decay)
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.dampening, self.nesterov, self.maximize = momentum, dampening, nesterov, maximize

    def init_state(self, group, name, param):
        if self.momentum:
            group.opt_state_m[name] = torch.zeros_like(param)

    def update(self, group, name, param, grad, step):
        g = -grad if self.maximize else grad
        if self.weight_decay:
            g = g + self.weight_decay * param
        if self.momentum:
            buf = group.opt_state_m[name]
            buf = torch.where(step == 1, g, self.momentum * buf + (1 - self.dampening) * g)
            group.opt_state_m[name] = buf
            g = g + self.momentum * buf if self.nesterov else buf
        group.params[name] = param - self.lr * g


class AdamW(Optimizer):
    """``torch.optim.AdamW``'s update.  ``use_bfloat16_moments`` keeps both
    moments in bfloat16 (half the optimizer memory); each step computes in
    the parameter's dtype and rounds the stored moments."""

    def __init__(self, lr: float = 1e-3, weight_decay: float = 1e-2, beta1: float = 0.9,
                 beta2: float = 0.999, eps: float = 1e-8, use_bfloat16_moments: bool = True,
                 maximize: bool = False):
        super().__init__(lr, weight_decay)
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid {name} parameter: {beta}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.use_bfloat16_moments, self.maximize = use_bfloat16_moments, maximize

    def init_state(self, group, name, param):
        dtype = torch.bfloat16 if self.use_bfloat16_moments and param.is_floating_point() else param.dtype
        group.opt_state_m[name] = torch.zeros_like(param, dtype=dtype)
        group.opt_state_v[name] = torch.zeros_like(param, dtype=dtype)

    def update(self, group, name, param, grad, step):
        g = -grad if self.maximize else grad
        m, v = group.opt_state_m[name], group.opt_state_v[name]
        stored = m.dtype
        m, v = m.to(param.dtype), v.to(param.dtype)
        m = torch.lerp(m, g, 1 - self.beta1)
        v = v * self.beta2 + (1 - self.beta2) * g * g
        p = param * (1 - self.lr * self.weight_decay) if self.weight_decay else param
        bias1 = 1 - torch.pow(self.beta1, step)
        bias2_sqrt = torch.sqrt(1 - torch.pow(self.beta2, step))
        denom = torch.sqrt(v) / bias2_sqrt + self.eps
        group.params[name] = p - (self.lr / bias1) * m / denom
        group.opt_state_m[name], group.opt_state_v[name] = m.to(stored), v.to(stored)


def newton_schulz(update: torch.Tensor, coefficients=(3.4445, -4.775, 2.0315), steps: int = 5,
                  eps: float = 1e-7) -> torch.Tensor:
    """The quintic Newton–Schulz iteration that ``torch.optim.Muon`` uses to
    orthogonalise a 2-D update (in bfloat16, as there)."""
    a, b, c = coefficients
    x = update.bfloat16()
    tall = update.shape[0] > update.shape[1]
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, poly, x, beta=a)
    return x.T if tall else x


class Muon(Optimizer):
    """Muon for the 2-D weights (momentum, Nesterov, Newton–Schulz
    orthogonalised update, learning rate scaled by ``sqrt(max(1, rows/cols))``,
    as ``torch.optim.Muon``), and ``adamw`` (an ``AdamW``) for every other
    parameter.  ``use_muon(name, param)`` picks the Muon ones (default: 2-D)."""

    def __init__(self, lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_coefficients=(3.4445, -4.775, 2.0315), eps: float = 1e-7,
                 ns_steps: int = 5, adjust_lr_fn=None, adamw: AdamW = None, use_muon=None):
        super().__init__(lr, weight_decay)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if ns_steps >= 100:
            raise ValueError("Number of steps must be less than 100 for computational efficiency")
        self.momentum, self.nesterov = momentum, nesterov
        self.ns_coefficients, self.eps, self.ns_steps = tuple(ns_coefficients), eps, ns_steps
        self.adjust_lr_fn = adjust_lr_fn
        self.adamw = adamw if adamw is not None else AdamW(lr=lr, weight_decay=weight_decay,
                                                           use_bfloat16_moments=False)
        self.use_muon = use_muon or (lambda name, p: p.dim() == 2)
        self._muon_names = set()

    def init_state(self, group, name, param):
        if self.use_muon(name, param):
            if param.dim() != 2:
                raise ValueError(f"Muon: parameter {name} is {param.dim()}-D; Muon updates 2-D weights only")
            self._muon_names.add(name)
            group.opt_state_m[name] = torch.zeros_like(param)
        else:
            self.adamw.init_state(group, name, param)

    def _adjusted_lr(self, shape):
        rows, cols = shape[:2]
        if self.adjust_lr_fn is None or self.adjust_lr_fn == "original":
            return self.lr * math.sqrt(max(1, rows / cols))
        if self.adjust_lr_fn == "match_rms_adamw":
            return self.lr * 0.2 * math.sqrt(max(rows, cols))
        return self.lr

    def update(self, group, name, param, grad, step):
        if name not in self._muon_names:
            self.adamw.update(group, name, param, grad, step)
            return
        buf = torch.lerp(group.opt_state_m[name], grad, 1 - self.momentum)
        group.opt_state_m[name] = buf
        direction = torch.lerp(grad, buf, self.momentum) if self.nesterov else buf
        ortho = newton_schulz(direction, self.ns_coefficients, self.ns_steps, self.eps)
        p = param * (1 - self.lr * self.weight_decay)
        group.params[name] = p - self._adjusted_lr(param.shape) * ortho.to(param.dtype)
