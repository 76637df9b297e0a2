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
