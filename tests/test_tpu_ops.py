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


def test_jagged_padding_round_trip():
    a, b = torch.randn(5, 4, device="tpu"), torch.randn(3, 4, device="tpu")
    nt = torch.nested.nested_tensor([a, b], layout=torch.jagged)
    aligned = torch.tpu.ops.align_jagged_to_multiple(nt, multiple=16, padding_value=-1.0)
    assert aligned.values().shape == (16, 4)
    assert torch.equal(aligned.offsets().cpu(), nt.offsets().cpu())
    assert torch.equal(aligned.values()[8:].cpu(), torch.full((8, 4), -1.0))
    assert torch.equal(aligned.values()[:8].cpu(), nt.values().cpu())
    for stripped in (torch.tpu.ops.strip_jagged_padding(aligned),
                     torch.tpu.ops.strip_jagged_padding(aligned, valid_tokens=8)):
        assert torch.equal(stripped.values().cpu(), nt.values().cpu())
    assert torch.tpu.ops.align_jagged_to_multiple(aligned, multiple=8) is aligned


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


def _worker_all(torch, dist, rank, world):
    ops = torch.tpu.ops
    _worker_by_dim(torch, dist, rank, world)
    # ragged all-to-all: rank r sends r + 1 + j rows to rank j, stacked in sender order
    send_sizes = [rank + 1 + j for j in range(world)]
    recv_sizes = [i + 1 + rank for i in range(world)]
    rows = sum(send_sizes)
    data = (torch.arange(rows, dtype=torch.float32) + 100 * rank).reshape(rows, 1).to("tpu")
    in_off = [sum(send_sizes[:j]) for j in range(world)]
    # where my rows land on rank j: after the rows of lower senders there, plus one row of gap
    out_off = [1 + sum(i + 1 + j for i in range(rank)) for j in range(world)]
    out_rows = 1 + sum(recv_sizes)
    output = torch.full((out_rows, 1), -1.0, device="tpu")
    result = ops.ragged_all_to_all(data, output, in_off, send_sizes, out_off, recv_sizes).cpu()
    expected = torch.full((out_rows, 1), -1.0)
    at = 1
    for i in range(world):
        sizes_i = [i + 1 + j for j in range(world)]
        start = sum(sizes_i[:rank])
        expected[at:at + sizes_i[rank], 0] = torch.arange(start, start + sizes_i[rank], dtype=torch.float32) + 100 * i
        at += sizes_i[rank]
    assert torch.equal(result, expected), (result, expected)
    # point to point, around the ring
    message = torch.full((3,), float(rank), device="tpu")
    into = torch.empty(3, device="tpu")
    if rank % 2 == 0:
        ops.send(message, (rank + 1) % world)
        ops.recv(into, (rank - 1) % world)
    else:
        ops.recv(into, (rank - 1) % world)
        ops.send(message, (rank + 1) % world)
    assert torch.equal(into.cpu(), torch.full((3,), float((rank - 1) % world)))


if __name__ == "__main__":
    import torch.distributed as dist_
    import torch_tpu  # noqa: F401
    dist_.init_process_group("tpu_dist")
    scenario = sys.argv[1]
    {"by_dim": _worker_by_dim, "all": _worker_all}[scenario](torch, dist_, dist_.get_rank(), dist_.get_world_size())
    dist_.destroy_process_group()
    print(f"{scenario} ok")
