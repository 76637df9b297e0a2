"""torch.tpu.ops beyond the Pallas kernels (ragged_dot, optimization_barrier,
splash_sdpa, jagged padding, collectives by dimension), and the other
top-level names of Google's torch_tpu (default_generators, topology_aware_mesh)."""
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
MODES = ["debug", "strict", "fused"]


def _loop_ragged_dot(lhs, rhs, sizes):
    """The reference: one matmul per group of consecutive rows."""
    out = torch.zeros(lhs.shape[0], rhs.shape[2], dtype=lhs.dtype)
    start = 0
    for g, n in enumerate(sizes.tolist()):
        out[start:start + n] = lhs[start:start + n] @ rhs[g]
        start += n
    return out


@pytest.mark.parametrize("mode", MODES)
def test_ragged_dot_matches_a_loop_of_matmuls_with_gradients(mode):
    torch.manual_seed(0)
    lhs, rhs = torch.randn(11, 6, requires_grad=True), torch.randn(4, 6, 5, requires_grad=True)
    sizes = torch.tensor([3, 0, 5, 2])  # an empty group, and one row past the groups
    expected = _loop_ragged_dot(lhs, rhs, sizes)
    weight = torch.randn(11, 5)
    (expected * weight).sum().backward()
    lt, rt = (x.detach().to("tpu").requires_grad_() for x in (lhs, rhs))
    with torch.tpu.set_eager_mode(mode):
        out = torch.tpu.ops.ragged_dot(lt, rt, sizes.to("tpu"))
        (out * weight.to("tpu")).sum().backward()
        weight_grad = torch.tpu.ops.ragged_dot_weight_grad(lt.detach(), weight.to("tpu"), sizes.to("tpu"))
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    assert torch.equal(out.detach().cpu()[10], torch.zeros(5))
    torch.testing.assert_close(lt.grad.cpu(), lhs.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rt.grad.cpu(), rhs.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weight_grad.cpu(), rhs.grad, rtol=1e-5, atol=1e-5)


def test_ragged_dot_under_torch_compile_and_bad_input():
    torch.manual_seed(0)
    lhs, rhs, sizes = torch.randn(8, 4), torch.randn(2, 4, 3), torch.tensor([5, 3])
    f = torch.compile(lambda a, b, s: torch.tpu.ops.ragged_dot(a, b, s).relu(), backend="tpu", fullgraph=True)
    out = f(lhs.to("tpu"), rhs.to("tpu"), sizes.to("tpu"))
    torch.testing.assert_close(out.cpu(), _loop_ragged_dot(lhs, rhs, sizes).relu(), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="one entry per group"):
        torch.tpu.ops.ragged_dot(lhs.to("tpu"), rhs.to("tpu"), torch.tensor([8], device="tpu"))
    with pytest.raises(RuntimeError, match="integers"):
        torch.tpu.ops.ragged_dot(lhs.to("tpu"), rhs.to("tpu"), torch.tensor([5.0, 3.0], device="tpu"))


@pytest.mark.parametrize("mode", MODES)
def test_optimization_barrier(mode):
    x = torch.randn(4, 3, device="tpu", requires_grad=True)
    with torch.tpu.set_eager_mode(mode):
        y = torch.tpu.ops.optimization_barrier(x * 2)
        a, b = torch.tpu.ops.optimization_barrier([x, x + 1])
        (y.sum() + (a * b).sum()).backward()
    torch.testing.assert_close(y.detach().cpu(), x.detach().cpu() * 2)
    torch.testing.assert_close(x.grad.cpu(), 2 + 2 * x.detach().cpu() + 1)


def test_optimization_barrier_in_a_compiled_graph():
    x = torch.randn(4, 3, device="tpu")
    f = torch.compile(lambda t: torch.tpu.ops.optimization_barrier(t.sin(), t.cos()), backend="tpu",
                      fullgraph=True)
    s, c = f(x)
    torch.testing.assert_close(s.cpu(), x.cpu().sin())
    torch.testing.assert_close(c.cpu(), x.cpu().cos())


@pytest.mark.parametrize("mode", MODES)
def test_jagged_padding_round_trip(mode):
    a, b = torch.randn(5, 4, device="tpu"), torch.randn(3, 4, device="tpu")
    nt = torch.nested.nested_tensor([a, b], layout=torch.jagged)
    with torch.tpu.set_eager_mode(mode):
        _check_jagged_round_trip(nt)


def _check_jagged_round_trip(nt):
    aligned = torch.tpu.ops.align_jagged_to_multiple(nt, multiple=16, padding_value=-1.0)
    assert aligned.values().shape == (16, 4)
    assert torch.equal(aligned.offsets().cpu(), nt.offsets().cpu())
    assert torch.equal(aligned.values()[8:].cpu(), torch.full((8, 4), -1.0))
    assert torch.equal(aligned.values()[:8].cpu(), nt.values().cpu())
    for stripped in (torch.tpu.ops.strip_jagged_padding(aligned),
                     torch.tpu.ops.strip_jagged_padding(aligned, valid_tokens=8)):
        assert torch.equal(stripped.values().cpu(), nt.values().cpu())
    assert torch.tpu.ops.align_jagged_to_multiple(aligned, multiple=8) is aligned


def test_jagged_padding_and_ragged_dot_weight_grad_in_compiled_graphs():
    from torch_tpu.compile import backend
    fallbacks = backend.stats.eager_fallbacks
    nt = torch.nested.nested_tensor([torch.randn(5, 4), torch.randn(3, 4)], layout=torch.jagged).to("tpu")

    def pad_scale_strip(nt):  # valid_tokens given: stripping needs no host read
        aligned = torch.tpu.ops.align_jagged_to_multiple(nt, multiple=16, padding_value=-1.0)
        return aligned, torch.tpu.ops.strip_jagged_padding(aligned * 2, valid_tokens=8)
    aligned, stripped = torch.compile(pad_scale_strip, backend="tpu", fullgraph=True)(nt)
    assert aligned.values().shape == (16, 4) and torch.equal(aligned.values()[8:].cpu(), torch.full((8, 4), -1.0))
    assert torch.equal(stripped.values().cpu(), 2 * nt.values().cpu())
    torch.manual_seed(0)
    lhs, grad, sizes = torch.randn(8, 4), torch.randn(8, 3), torch.tensor([5, 3])
    f = torch.compile(torch.tpu.ops.ragged_dot_weight_grad, backend="tpu", fullgraph=True)
    expected = torch.stack([lhs[:5].T @ grad[:5], lhs[5:].T @ grad[5:]])
    torch.testing.assert_close(f(lhs.to("tpu"), grad.to("tpu"), sizes.to("tpu")).cpu(), expected,
                               rtol=1e-5, atol=1e-5)
    assert backend.stats.eager_fallbacks == fallbacks  # really compiled


# ---- splash attention (interpreted off TPU: slow, so small) -----------------------------

def _qkv(heads=1, kv_heads=1, length=256, dim=32):
    torch.manual_seed(0)
    return (torch.randn(1, heads, length, dim), torch.randn(1, kv_heads, length, dim),
            torch.randn(1, kv_heads, length, dim))


def test_splash_sdpa_causal_matches_sdpa():
    q, k, v = _qkv()
    out = torch.tpu.ops.splash_sdpa(*(x.to("tpu") for x in (q, k, v)), is_causal=True,
                                    block_q=128, block_kv=128, block_dkv=128)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="multiple of 128"):
        torch.tpu.ops.splash_sdpa(*(x[:, :, :100].to("tpu") for x in (q, k, v)))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["debug", "fused"])  # strict: the test above
def test_splash_sdpa_in_the_other_eager_modes(mode):
    q, k, v = _qkv()
    with torch.tpu.set_eager_mode(mode):
        out = torch.tpu.ops.splash_sdpa(*(x.to("tpu") for x in (q, k, v)), is_causal=True,
                                        block_q=128, block_kv=128, block_dkv=128)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_splash_sdpa_local_window_gqa_gradients_and_compile():
    q, k, v = _qkv(heads=2, kv_heads=1)
    window = 40
    i = torch.arange(q.shape[2])
    mask = (i[None, :] <= i[:, None]) & (i[None, :] >= i[:, None] - window)
    qc, kc, vc = (x.clone().requires_grad_() for x in (q, k, v))
    expected = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, enable_gqa=True)
    expected.sum().backward()
    qt, kt, vt = (x.to("tpu").requires_grad_() for x in (q, k, v))
    out = torch.tpu.ops.splash_sdpa(qt, kt, vt, is_causal=True, local_window_size=window, enable_gqa=True,
                                    block_q=128, block_kv=128, block_dkv=128)
    out.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    for mine, ref in ((qt, qc), (kt, kc), (vt, vc)):
        torch.testing.assert_close(mine.grad.cpu(), ref.grad, rtol=1e-4, atol=1e-4)
    f = torch.compile(lambda a, b, c: torch.tpu.ops.splash_sdpa(a, b, c, is_causal=False, block_q=128,
                                                                block_kv=128), backend="tpu", fullgraph=True)
    q1, k1, v1 = _qkv()
    torch.testing.assert_close(f(q1.to("tpu"), k1.to("tpu"), v1.to("tpu")).cpu(),
                               F.scaled_dot_product_attention(q1, k1, v1), rtol=1e-5, atol=1e-5)


# ---- default generators, topology_aware_mesh -----------------------------------------------

def test_default_generators_are_the_default_stream():
    gen = torch.tpu.default_generators[0]
    assert isinstance(gen, torch.Generator) and gen.device == torch.device("tpu", 0)
    gen.manual_seed(5)
    a = torch.randn(4, device="tpu")
    torch.tpu.manual_seed(5)
    assert gen.initial_seed() == 5
    assert torch.equal(a.cpu(), torch.randn(4, device="tpu").cpu())
    state = gen.get_state()
    b = torch.randn(4, device="tpu")
    gen.set_state(state)
    assert torch.equal(b.cpu(), torch.randn(4, device="tpu", generator=gen).cpu())


def test_topology_aware_mesh_at_top_level():
    assert torch.tpu.topology_aware_mesh is torch.tpu.distributed.topology_aware_mesh
    assert torch.tpu.topology_aware_mesh((1,)).tolist() == [0]


def test_compiled_graphs_are_cut_at_collectives_in_program_order():
    # The split of compile/collectives.py, on a graph built by hand (no group needed):
    # computation no collective separates shares a piece, a collective and its wait
    # share one, and collectives keep the program's order (point-to-point relies on it).
    from torch_tpu.compile import collectives
    c10d, aten, tpu = torch.ops._c10d_functional, torch.ops.aten, torch.ops.tpu_ops
    g = torch.fx.Graph()
    x, into = g.placeholder("x"), g.placeholder("into")
    got = g.call_function(tpu.recv.default, (into, 0, 0, "0"))
    doubled = g.call_function(aten.mul.Tensor, (got, 2))
    sent = g.call_function(tpu.send.default, (doubled, 1, 0, "0"))
    early = g.call_function(aten.add.Tensor, (x, x))  # needs no collective
    late_send = g.call_function(tpu.send.default, (early, 1, 0, "0"))  # after `sent` in the program
    start = g.call_function(c10d.all_gather_into_tensor.default, (early, 2, "0"))
    done = g.call_function(c10d.wait_tensor.default, (start,))
    out = g.call_function(aten.add.Tensor, (done, done))
    g.output((doubled, out))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    assert collectives.present(gm)
    part = collectives._partitions(gm)
    assert part[got] == 1 and part[doubled] == 2 and part[sent] == 3
    assert part[early] == 0  # runs in the first piece, before any collective
    assert part[late_send] == 3 and part[start] == part[done] == 3  # not moved before `sent`
    assert part[out] == 4
    assert not collectives.present(torch.fx.symbolic_trace(lambda t: t * 2))


# ---- collectives: worker processes ----------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra):
    env = dict(os.environ)
    env.update(PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               TORCH_TPU_PLATFORM="cpu", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1", **extra)
    return env


def _run(procs, timeout=180):
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("workers hung") from None
        assert p.returncode == 0, out[-6000:]
        outs.append(out)
    return outs


def test_collectives_by_dim_two_processes():
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, HERE, "by_dim"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=_env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                        "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                        "MASTER_PORT": str(port)}))
             for r in range(2)]
    assert all("by_dim ok" in out for out in _run(procs))


@pytest.mark.slow
def test_all_collective_ops_torchrun():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", HERE, "all"]
    out, = _run([subprocess.Popen(cmd, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=_env({}))])
    assert out.count("all ok") == 2


def _gather_scatter_step(torch, x, m):
    """all_gather_dim then reduce_scatter_dim around a matmul: a loss whose
    backward runs both again (each is the other's gradient)."""
    ops = torch.tpu.ops
    gathered = ops.all_gather_dim(x, dim=1)
    scattered = ops.reduce_scatter_dim((gathered @ m).tanh(), dim=0)
    return (scattered * 3).sum()


def _gather_scatter_grads(torch, fn, rank):
    x = (torch.arange(8.0).reshape(4, 2) / 7 + rank).to("tpu").requires_grad_()
    m = (torch.arange(12.0).reshape(4, 3) / 11).to("tpu").requires_grad_()
    loss = fn(torch, x, m)
    loss.backward()
    return loss.detach().cpu(), x.grad.cpu(), m.grad.cpu()


def _check_compiled_gather_scatter(torch, rank):
    """fullgraph=True fails on any graph break; the collectives must run
    between compiled pieces (no eager fallback), forward and backward."""
    from torch_tpu.compile import backend, collectives
    eager = _gather_scatter_grads(torch, _gather_scatter_step, rank)
    rounds, fallbacks = collectives.counts["collective_rounds"], backend.stats.eager_fallbacks
    compiled = _gather_scatter_grads(torch, torch.compile(_gather_scatter_step, backend="tpu", fullgraph=True), rank)
    for a, b in zip(eager, compiled):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6), (a, b)
    assert collectives.counts["collective_rounds"] - rounds == 4, collectives.counts  # 2 forward, 2 backward
    assert backend.stats.eager_fallbacks == fallbacks and collectives.counts["eager_pieces"] == 0


def _worker_by_dim(torch, dist, rank, world):
    ops = torch.tpu.ops
    x = (torch.arange(6.0).reshape(2, 3) + 10 * rank).to("tpu").requires_grad_()
    gathered = ops.all_gather_dim(x, dim=1)
    expected = torch.cat([torch.arange(6.0).reshape(2, 3) + 10 * r for r in range(world)], dim=1)
    assert torch.equal(gathered.detach().cpu(), expected), gathered
    (gathered * (rank + 1)).sum().backward()  # the gradient: reduce-scattered upstream gradients
    assert torch.equal(x.grad.cpu(), torch.full((2, 3), float(sum(range(1, world + 1))))), x.grad
    full = torch.arange(4.0 * world).reshape(2, 2 * world).to("tpu") * (rank + 1)
    scattered = ops.reduce_scatter_dim(full, dim=-1)
    total = torch.arange(4.0 * world).reshape(2, 2 * world) * sum(range(1, world + 1))
    assert torch.equal(scattered.cpu(), total[:, 2 * rank:2 * rank + 2]), scattered
    _check_compiled_gather_scatter(torch, rank)


def _ragged_sizes(rank, world):
    """rank r sends r + 1 + j rows to rank j; they land in sender order after one row of gap."""
    send_sizes = [rank + 1 + j for j in range(world)]
    recv_sizes = [i + 1 + rank for i in range(world)]
    in_off = [sum(send_sizes[:j]) for j in range(world)]
    out_off = [1 + sum(i + 1 + j for i in range(rank)) for j in range(world)]
    return in_off, send_sizes, out_off, recv_sizes


def _ragged(torch, rank, world, data, output):
    return torch.tpu.ops.ragged_all_to_all(data, output, *_ragged_sizes(rank, world))


def _ragged_device_sizes(torch, data, output, *sizes):
    return torch.tpu.ops.ragged_all_to_all(data, output, *sizes)


def _ragged_case(torch, rank, world):
    rows = sum(rank + 1 + j for j in range(world))
    data = (torch.arange(rows, dtype=torch.float32) + 100 * rank).reshape(rows, 1)
    out_rows = 1 + sum(i + 1 + rank for i in range(world))
    expected = torch.full((out_rows, 1), -1.0)
    at = 1
    for i in range(world):
        sizes_i = [i + 1 + j for j in range(world)]
        start = sum(sizes_i[:rank])
        expected[at:at + sizes_i[rank], 0] = torch.arange(start, start + sizes_i[rank], dtype=torch.float32) + 100 * i
        at += sizes_i[rank]
    return data, expected


def _ring(torch, rank, world, message, into):
    """Point to point around the ring (even ranks send first); returns a value computed from what came."""
    ops = torch.tpu.ops
    if rank % 2 == 0:
        ops.send(message * 2, (rank + 1) % world)
        ops.recv(into, (rank - 1) % world)
    else:
        ops.recv(into, (rank - 1) % world)
        ops.send(message * 2, (rank + 1) % world)
    return into + 1


def _worker_all(torch, dist, rank, world):
    from torch_tpu.compile import backend, collectives
    ops = torch.tpu.ops
    _worker_by_dim(torch, dist, rank, world)
    data, expected = _ragged_case(torch, rank, world)
    came = torch.full((3,), 2.0 * ((rank - 1) % world))
    reference = _gather_scatter_grads(torch, _gather_scatter_step, rank)
    for mode in ("debug", "strict", "fused"):  # eager, every mode
        with torch.tpu.set_eager_mode(mode):
            got = _gather_scatter_grads(torch, _gather_scatter_step, rank)
            for a, b in zip(reference, got):
                assert torch.allclose(a, b, rtol=1e-6, atol=1e-6), (mode, a, b)
            output = torch.full(expected.shape, -1.0, device="tpu")
            result = _ragged(torch, rank, world, data.to("tpu"), output).cpu()
            assert torch.equal(result, expected), (mode, result, expected)
            assert torch.equal(output.cpu(), torch.full(expected.shape, -1.0))  # returns a copy
            into = torch.empty(3, device="tpu")
            out = _ring(torch, rank, world, torch.full((3,), float(rank), device="tpu"), into)
            assert torch.equal(into.cpu(), came) and torch.equal(out.cpu(), came + 1), (mode, into, out)
            maxed = ops.reduce_scatter_dim(torch.arange(2.0 * world, device="tpu") * (1 - 2 * rank),
                                           op=dist.ReduceOp.MAX)
            want = (torch.arange(2.0 * world) * torch.tensor([1 - 2 * r for r in range(world)])[:, None]).amax(0)
            assert torch.equal(maxed.cpu(), want[2 * rank:2 * rank + 2]), (mode, maxed)
    # compiled, no graph break: ragged all-to-all (sizes as Python ints) with its gradient, and point to point
    fallbacks = backend.stats.eager_fallbacks
    ragged = torch.compile(lambda d, o: _ragged(torch, rank, world, d, o), backend="tpu", fullgraph=True)
    d = data.to("tpu").requires_grad_()
    result = ragged(d, torch.full(expected.shape, -1.0, device="tpu"))
    assert torch.equal(result.detach().cpu(), expected), result
    (result * torch.arange(1.0, 1.0 + expected.shape[0], device="tpu")[:, None]).sum().backward()
    d_eager = data.to("tpu").requires_grad_()
    weights = torch.arange(1.0, 1.0 + expected.shape[0], device="tpu")[:, None]
    (_ragged(torch, rank, world, d_eager, torch.full(expected.shape, -1.0, device="tpu")) * weights).sum().backward()
    assert torch.equal(d.grad.cpu(), d_eager.grad.cpu()), (d.grad, d_eager.grad)
    # sizes as device tensors (computed by the model, as in mixture-of-experts routing): padded blocks
    sizes = [torch.tensor(v, device="tpu") for v in _ragged_sizes(rank, world)]
    padded = torch.compile(lambda *a: _ragged_device_sizes(torch, *a), backend="tpu", fullgraph=True)
    d2 = data.to("tpu").requires_grad_()
    result = padded(d2, torch.full(expected.shape, -1.0, device="tpu"), *sizes)
    assert torch.equal(result.detach().cpu(), expected), result
    (result * weights).sum().backward()
    assert torch.equal(d2.grad.cpu(), d_eager.grad.cpu()), (d2.grad, d_eager.grad)
    ring = torch.compile(lambda m, i: _ring(torch, rank, world, m, i), backend="tpu", fullgraph=True)
    into = torch.zeros(3, device="tpu")
    out = ring(torch.full((3,), float(rank), device="tpu"), into)
    assert torch.equal(into.cpu(), came) and torch.equal(out.cpu(), came + 1), (into, out)
    # PyTorch's functional collectives written by hand take the same route
    import torch.distributed._functional_collectives as fc
    reduced = torch.compile(lambda t: fc.all_reduce(t * 2, "sum", dist.group.WORLD) + 1, backend="tpu",
                            fullgraph=True)(torch.full((2,), float(rank + 1), device="tpu"))
    assert torch.equal(reduced.cpu(), torch.full((2,), 2.0 * sum(range(1, world + 1)) + 1)), reduced
    assert backend.stats.eager_fallbacks == fallbacks and collectives.counts["eager_pieces"] == 0


if __name__ == "__main__":
    import torch.distributed as dist_
    import torch_tpu  # noqa: F401
    dist_.init_process_group("tpu_dist")
    scenario = sys.argv[1]
    {"by_dim": _worker_by_dim, "all": _worker_all}[scenario](torch, dist_, dist_.get_rank(), dist_.get_world_size())
    dist_.destroy_process_group()
    print(f"{scenario} ok")
