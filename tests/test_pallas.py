"""torch.tpu.pallas.jax_op, to_jax/from_jax, and the built-in Pallas kernels
(run in TPU interpret mode on the CPU), checked against PyTorch's CPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P

import torch_tpu
from torch_tpu.compile import stats
from torch_tpu.pallas import interpret, sdpa

jax_op = torch.tpu.pallas.jax_op


def tpu(x, grad=False):
    return x.detach().to("tpu").requires_grad_(grad)


# ---- ops shared by several tests (a custom op name can be defined once) -------

@jax_op("pallas_test::sin_scale")
def sin_scale(x: jax.Array, y: jax.Array, alpha: float) -> jax.Array:
    return jnp.sin(x) * alpha + y


@jax_op("pallas_test::split_stats")
def split_stats(x: jax.Array, idx: jax.Array, axis: int) -> tuple[jax.Array, jax.Array]:
    return jnp.cumsum(x, axis=axis), x * idx.astype(x.dtype)


def _add_relu_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.maximum(x_ref[...] + y_ref[...], 0)


def _add_relu_bwd(x, y, g):
    mask = (x + y > 0).astype(g.dtype)
    return g * mask, g * mask


@jax_op("pallas_test::add_relu", backward=_add_relu_bwd)
def add_relu(x: jax.Array, y: jax.Array) -> jax.Array:
    # no interpret=True: off a TPU, jax_op runs it in TPU interpret mode
    return pl.pallas_call(_add_relu_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // 8,),
                          in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))] * 2,
                          out_specs=pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)))(x, y)


@jax_op("pallas_test::double")
def double(x: jax.Array) -> jax.Array:
    return x * 2


@double.def_backward
def _double_bwd(x, g):
    return g * 3  # deliberately not 2: shows the user's backward is the one used


# ---- jax_op ------------------------------------------------------------------

def test_forward_backward_matches_cpu():
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    xt, yt = tpu(x, True), tpu(y, True)
    out = sin_scale(xt, yt, 2.5)
    torch.testing.assert_close(out.cpu(), torch.sin(x) * 2.5 + y)
    (out * out).sum().backward()
    ref = torch.sin(x) * 2.5 + y
    torch.testing.assert_close(xt.grad.cpu(), 2 * ref * 2.5 * torch.cos(x))
    torch.testing.assert_close(yt.grad.cpu(), 2 * ref)


def test_schema_and_opcheck():
    assert str(torch.ops.pallas_test.sin_scale.default._schema) == \
        "pallas_test::sin_scale(Tensor x, Tensor y, float alpha) -> Tensor"
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    result = torch.library.opcheck(sin_scale, (tpu(x), tpu(y), 0.5))
    assert set(result.values()) == {"SUCCESS"}, result
    # PyTorch's autograd_registration check only knows cpu/cuda/xpu; the rest run with grads
    result = torch.library.opcheck(sin_scale, (tpu(x, True), tpu(y, True), 0.5),
                                   test_utils=("test_schema", "test_faketensor",
                                               "test_aot_dispatch_dynamic"))
    assert set(result.values()) == {"SUCCESS"}, result
    assert torch._C._dispatch_has_kernel_for_dispatch_key("pallas_test::sin_scale", "Autograd")


def test_tuple_outputs_static_and_integer_inputs():
    x, idx = torch.randn(4, 6), torch.randint(0, 3, (4, 6))
    xt = tpu(x, True)
    a, b = split_stats(xt, tpu(idx), 1)
    torch.testing.assert_close(a.cpu(), torch.cumsum(x, 1))
    torch.testing.assert_close(b.cpu(), x * idx)
    (a.sum() + b.sum()).backward()
    torch.testing.assert_close(xt.grad.cpu(), torch.arange(6, 0, -1.).expand(4, 6) + idx)
    fake = split_stats(torch.empty(4, 6, device="meta"), torch.empty(4, 6, dtype=torch.long,
                                                                      device="meta"), 0)
    assert [t.shape for t in fake] == [torch.Size([4, 6])] * 2 and fake[0].device.type == "meta"
    opres = torch.library.opcheck(split_stats, (tpu(x), tpu(idx), 0))
    assert set(opres.values()) == {"SUCCESS"}, opres


def test_optional_list_keyword_and_default_arguments():
    @jax_op("pallas_test::mixed")
    def mixed(x: jax.Array, b: "jax.Array | None", xs: list[jax.Array], *, k: int = 2
              ) -> list[jax.Array]:
        y = x * k + sum(xs)
        return [y if b is None else y + b, y * y]
    assert str(torch.ops.pallas_test.mixed.default._schema) == (
        "pallas_test::mixed(Tensor x, Tensor? b, Tensor[] xs, *, int k=2) -> Tensor[]")
    x, b = torch.randn(3), torch.randn(3)
    xt, bt = tpu(x, True), tpu(b, True)
    ones = [tpu(torch.ones(3)), tpu(torch.ones(3))]
    mixed(xt, None, ones)[0].sum().backward()
    assert xt.grad.cpu().tolist() == [2.0] * 3
    xt.grad = None
    first, second = mixed(xt, bt, ones, k=3)
    (first.sum() + second.sum()).backward()
    torch.testing.assert_close(xt.grad.cpu(), 3 + 6 * (3 * x + 2))
    assert bt.grad.cpu().tolist() == [1.0] * 3


def test_pallas_kernel_with_user_backward():
    x, y = torch.randn(16, 128), torch.randn(16, 128)
    xt, yt = tpu(x, True), tpu(y, True)
    out = add_relu(xt, yt)
    torch.testing.assert_close(out.cpu(), torch.relu(x + y))
    out.sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), (x + y > 0).float())
    torch.testing.assert_close(yt.grad.cpu(), (x + y > 0).float())


def test_def_backward_decorator():
    xt = tpu(torch.ones(3), True)
    double(xt).sum().backward()
    assert xt.grad.cpu().tolist() == [3.0, 3.0, 3.0]


def test_compile_inlines_without_graph_break():
    def f(a, b):
        return (sin_scale(a, b, 3.0).relu() * add_relu(a, b)).sum()
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    xt, yt = tpu(x, True), tpu(y, True)
    expected = f(xt, yt)
    expected.backward()
    gx = xt.grad.cpu()
    xt.grad = None
    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(xt, yt)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    torch._dynamo.reset()
    before = stats.as_dict()
    out = torch.compile(f, backend="tpu")(xt, yt)
    out.backward()
    after = stats.as_dict()
    assert after["graphs"] - before["graphs"] == 2  # forward and backward, each one XLA graph
    assert after["eager_fallbacks"] == before["eager_fallbacks"]
    torch.testing.assert_close(out.cpu(), expected.cpu())
    torch.testing.assert_close(xt.grad.cpu(), gx)
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["strict", "debug", "fused"])
def test_all_eager_modes(mode):
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    with torch.tpu.set_eager_mode(mode):
        xt = tpu(x, True)
        out = add_relu(xt * 1.0, tpu(y)) + sin_scale(xt, tpu(y), 2.0)
        out.sum().backward()
        got, grad = out.cpu(), xt.grad.cpu()
    torch.testing.assert_close(got, torch.relu(x + y) + torch.sin(x) * 2 + y)
    torch.testing.assert_close(grad, (x + y > 0).float() + 2 * torch.cos(x))


def test_mesh_and_partition_specs():
    mesh = torch.tpu.pallas.get_pallas_mesh(("x",))

    @jax_op("pallas_test::meshed", mesh=mesh, input_partition_specs=(P("x"),),
            output_partition_specs=P("x"))
    def meshed(x: jax.Array) -> jax.Array:
        return x + 1

    assert meshed(tpu(torch.zeros(4))).cpu().tolist() == [1.0] * 4


# ---- errors ------------------------------------------------------------------

def test_missing_annotation():
    with pytest.raises(ValueError, match="needs a type annotation"):
        jax_op("pallas_test::bad1", lambda x: x)

    def f(x: jax.Array, n):
        return x
    with pytest.raises(ValueError, match="'n'"):
        jax_op("pallas_test::bad2")(f)


def test_bad_name():
    with pytest.raises(ValueError, match="namespace::op"):
        jax_op("no_namespace")


def test_output_not_array_pytree():
    @jax_op("pallas_test::returns_str")
    def returns_str(x: jax.Array) -> jax.Array:
        return "oops"
    with pytest.raises(TypeError, match="pallas_test::returns_str.*must return a jax.Array"):
        returns_str(tpu(torch.ones(2)))

    @jax_op("pallas_test::returns_tuple")
    def returns_tuple(x: jax.Array):
        return x, x
    with pytest.raises(TypeError, match="annotate its return type"):
        returns_tuple(tpu(torch.ones(2)))


@pytest.mark.filterwarnings("ignore:ComplexHalf")
def test_dtype_jax_lacks():
    x = torch.empty(3, dtype=torch.complex32, device="meta")
    with pytest.raises(TypeError, match="pallas_test::double.*no JAX equivalent"):
        double(x)


def test_cpu_inputs_name_the_op():
    with pytest.raises(RuntimeError, match="pallas_test::sin_scale.*cpu"):
        sin_scale(torch.ones(2), torch.ones(2), 1.0)


# ---- interop -----------------------------------------------------------------

def test_from_jax_to_jax_zero_copy():
    a = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    t = torch_tpu.from_jax(a)
    assert t.device.type == "tpu" and t.shape == (3, 4) and t.dtype == torch.float32
    assert t.untyped_storage()._tpu_buf is a  # the very array, not a copy
    assert torch_tpu.to_jax(t) is a
    assert torch_tpu.to_jax(t.view(3, 4).detach()) is a
    np.testing.assert_array_equal(np.asarray(torch_tpu.to_jax(t.t()[1:3])), np.asarray(a).T[1:3])
    bf = torch_tpu.from_jax(jnp.ones(2, jnp.bfloat16))
    assert bf.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="tpu device"):
        torch_tpu.to_jax(torch.ones(2))
    with pytest.raises(TypeError):
        torch_tpu.from_jax(np.ones(2))


def test_submodules_and_interpret_switch(monkeypatch):
    import torch.tpu.ops  # noqa: F401
    import torch.tpu.pallas  # noqa: F401
    assert torch.tpu.ops.flash_attention and torch.tpu.pallas.jax_op is jax_op
    assert interpret.enabled()  # CPU platform: Pallas kernels run interpreted
    monkeypatch.setenv("TORCH_TPU_PALLAS_INTERPRET", "0")
    assert not interpret.enabled()
    monkeypatch.setenv("TORCH_TPU_PALLAS_INTERPRET", "1")
    assert interpret.enabled()


# ---- built-in kernels (interpret mode) vs PyTorch's CPU ------------------------

@pytest.mark.parametrize("causal,masked,kv_heads", [(False, True, 2), (True, False, 4)])
def test_flash_attention_matches_cpu_sdpa(causal, masked, kv_heads):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 32, 16, generator=gen)
    k, v = (torch.randn(1, kv_heads, 64, 16, generator=gen) for _ in range(2))
    mask = None
    if masked:
        mask = torch.rand(1, 1, 32, 64, generator=gen) > 0.3
        mask[..., 0] = True
    qt, kt, vt = (tpu(x, True) for x in (q, k, v))
    out = torch.tpu.ops.flash_attention(qt, kt, vt, None if mask is None else tpu(mask), causal,
                                        block_q=16, block_k=16)  # 2x4 tiles: the loops run
    w = torch.linspace(-1, 1, 16)
    (out * tpu(w)).sum().backward()
    qc, kc, vc = (x.clone().requires_grad_() for x in (q, k, v))
    ref = F.scaled_dot_product_attention(qc, kc, vc, mask, is_causal=causal, enable_gqa=True)
    (ref * w).sum().backward()
    torch.testing.assert_close(out.cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    for got, want in ((qt, qc), (kt, kc), (vt, vc)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, atol=1e-4, rtol=1e-4)


def test_rms_norm_matches_cpu():
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 6, 32, generator=gen), torch.randn(32, generator=gen)
    xt, wt = tpu(x, True), tpu(w, True)
    y = torch.tpu.ops.rms_norm(xt, (32,), wt, 1e-5)
    (y * y).sum().backward()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref = F.rms_norm(xc, (32,), wc, 1e-5)
    (ref * ref).sum().backward()
    torch.testing.assert_close(y.cpu(), ref.detach())
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, atol=1e-4, rtol=1e-4)
    no_weight = torch.tpu.ops.rms_norm(tpu(x), (6, 32))
    torch.testing.assert_close(no_weight.cpu(), F.rms_norm(x, (6, 32)))


def test_sdpa_routes_to_flash_only_on_tpu(monkeypatch):
    assert not sdpa.on_tpu()  # here: the composite path
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    calls = []
    import torch_tpu.pallas.ops as tpu_ops
    real = tpu_ops.flash_attention
    monkeypatch.setattr(tpu_ops, "flash_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    monkeypatch.setattr(sdpa, "on_tpu", lambda: True)
    got = F.scaled_dot_product_attention(tpu(q), tpu(k), tpu(v), is_causal=True)
    assert calls == [1]
    torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    F.scaled_dot_product_attention(tpu(q), tpu(k), tpu(v), dropout_p=0.5)  # dropout: not flash
    assert calls == [1]
