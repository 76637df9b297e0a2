"""Timing helpers shared by the benchmarks: best-of-N wall time per call."""
import time


def best_time(fn, sync=lambda: None, repeat=5, number=200, warmup=20):
    """Seconds per call: the best of ``repeat`` runs of ``number`` calls each."""
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = " | ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "-|-".join("-" * w for w in widths)]
    out += [" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def launch_local_workers(script, nproc, argv, env=None):
    """Run ``script --worker *argv`` as ranks 0..nproc-1 of a local
    torch.distributed world (what torchrun would set up); exit with the
    worst return code.  Only rank 0's stderr is shown."""
    import os
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(script)))
    procs = []
    for rank in range(nproc):
        # OMP_NUM_THREADS=1 unless set, as torchrun does for several processes
        # a machine: each rank's PyTorch CPU threads would otherwise share the cores
        full = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                    LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                    PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    **{"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})})
        cmd = [sys.executable, os.path.abspath(script), "--worker", *argv]
        procs.append(subprocess.Popen(cmd, env=full, stderr=subprocess.DEVNULL if rank else None))
    sys.exit(max(p.wait() for p in procs))
