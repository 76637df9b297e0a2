"""Run OpInfo checks in worker subprocesses, so one kernel that crashes the
interpreter (segfault, abort, XLA fatal error) or hangs costs one entry, not the sweep.

A worker runs its jobs in order and appends one JSON line per event to a
results file: ``{"start": [check, entry]}`` before a job, ``{"result": {...}}``
after it.  When a worker dies, the job it had started is recorded as a crash
(with the exit signal) and a new worker picks up the remaining jobs; a job
making no progress for ``timeout`` seconds is killed and recorded as a timeout.

    python tests/tools/opinfo_sweep.py [--entries a,b] [--checks forward,gradient,bfloat16] [--jobs 1]

writes the results to ``tests/tools/opinfo_results.json`` (see opinfo_report.py).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "opinfo_results.json")
CHECKS = ("forward", "gradient", "bfloat16", "float16", "complex64", "float64")


def all_jobs(entries=None, checks=CHECKS):
    """[(check, entry)] in op_db order, each check where it applies (``H.applies``)."""
    sys.path.insert(0, HERE)
    import opinfo_harness as H
    names = list(H.ops()) if entries is None else list(entries)
    unknown = [n for n in names if n not in H.ops()]
    if unknown:
        raise SystemExit(f"unknown OpInfo entries: {unknown}")
    jobs = []
    for n in names:
        for c in checks:
            if H.applies(c, n):
                jobs.append((c, n))
    return jobs


def _worker(job_file, out_file):
    sys.path.insert(0, HERE)
    import torch
    torch.set_num_threads(1)
    import opinfo_harness as H
    with open(job_file) as f:
        jobs = json.load(f)
    with open(out_file, "a", buffering=1) as out:
        for check, entry in jobs:
            out.write(json.dumps({"start": [check, entry]}) + "\n")
            out.flush()
            if entry == "__crash_test__":  # lets the tests exercise crash recovery
                os.kill(os.getpid(), signal.SIGSEGV)
            r = H.run_check(check, entry)
            out.write(json.dumps({"result": r.to_json()}, default=str) + "\n")
            out.flush()


def _read(path):
    started, results = None, []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            if "start" in rec:
                started = tuple(rec["start"])
            else:
                results.append(rec["result"])
                started = None
    return started, results


def _dead(check, entry, kind, reason):
    return {"entry": entry, "dtype": "" if check in ("forward", "gradient") else check, "check": check,
            "status": "fail", "kind": kind, "reason": reason, "missing": [], "samples": 0, "seconds": 0.0}


class _Runner:
    """One worker over a queue of jobs, restarted after a crash."""

    def __init__(self, jobs, tmp, idx, timeout):
        self.queue = list(jobs)
        self.tmp, self.idx, self.timeout = tmp, idx, timeout
        self.results = []
        self.proc = None
        self.gen = 0
        self._start()

    def _start(self):
        self.gen += 1
        self.job_file = os.path.join(self.tmp, f"jobs{self.idx}_{self.gen}.json")
        self.out_file = os.path.join(self.tmp, f"out{self.idx}_{self.gen}.jsonl")
        with open(self.job_file, "w") as f:
            json.dump(self.queue, f)
        open(self.out_file, "w").close()
        self.last_size, self.last_change = 0, time.time()
        self.shown = self.shown_size = 0
        env = dict(os.environ)
        env.setdefault("PYTHONWARNINGS", "ignore")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", self.job_file,
                                      self.out_file], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.tmp, f"err{self.idx}_{self.gen}.txt"), "w"),
                                     start_new_session=True)

    def poll(self):
        """True while work remains."""
        if self.proc is None:
            return False
        rc = self.proc.poll()
        size = os.path.getsize(self.out_file)
        if size != self.last_size:
            self.last_size, self.last_change = size, time.time()
        if rc is None and time.time() - self.last_change > self.timeout:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own process group
            self.proc.wait()
            rc = "timeout"
        if rc is None:
            if size != self.shown_size:  # live progress
                self.shown_size = size
                for r in _read(self.out_file)[1][self.shown:]:
                    _progress(r)
                    self.shown += 1
            return True
        started, results = _read(self.out_file)
        self.results.extend(results)
        done = {(r["check"], r["entry"]) for r in results}
        self.queue = [j for j in self.queue if tuple(j) not in done]
        if started is not None and self.queue and tuple(self.queue[0]) == started:
            check, entry = started
            if rc == "timeout":
                rec = _dead(check, entry, "timeout", f"timeout: no result after {self.timeout}s")
            else:
                sig = f"signal {-rc} ({signal.Signals(-rc).name})" if isinstance(rc, int) and rc < 0 else f"exit {rc}"
                err = open(os.path.join(self.tmp, f"err{self.idx}_{self.gen}.txt")).read().strip().splitlines()
                tail = f": {err[-1][:160]}" if err and not (isinstance(rc, int) and rc < 0) else ""
                rec = _dead(check, entry, "crash", f"crash: the process died ({sig}){tail}")
            results.append(rec)
            self.results.append(rec)
            self.queue.pop(0)
        elif rc != 0 and self.queue and not results:
            # Died before starting any job (import error?): give up rather than loop.
            err = open(os.path.join(self.tmp, f"err{self.idx}_{self.gen}.txt")).read()[-2000:]
            raise RuntimeError(f"opinfo worker failed before running a job (rc={rc}):\n{err}")
        for r in results[self.shown:]:
            _progress(r)
        if self.queue:
            self._start()
            return True
        self.proc = None
        return False


_VERBOSE = True


def _progress(r):
    if _VERBOSE:
        mark = {"pass": ".", "fail": "F", "skip": "s"}[r["status"]]
        print(f"{mark} {r['check']:9s} {r['entry']:45s} {r['kind']:14s} {r['reason'][:90]}", flush=True)


def sweep(jobs, n_workers=1, timeout=600, verbose=True):
    """Results (dicts) of ``jobs`` [(check, entry)], each worker in its own process."""
    global _VERBOSE
    _VERBOSE = verbose
    chunks = [jobs[i::n_workers] for i in range(n_workers)] if n_workers > 1 else [jobs]
    with tempfile.TemporaryDirectory(prefix="opinfo_sweep_") as tmp:
        runners = [_Runner(c, tmp, i, timeout) for i, c in enumerate(chunks) if c]
        try:
            while any([r.poll() for r in runners]):
                time.sleep(0.5)
        finally:
            for r in runners:
                if r.proc is not None and r.proc.poll() is None:
                    os.killpg(r.proc.pid, signal.SIGKILL)
        return [res for r in runners for res in r.results]


def save(results, path=RESULTS, merge=True):
    """Write results, replacing those of the same (check, entry) in an existing file."""
    old = []
    if merge and os.path.exists(path):
        with open(path) as f:
            old = json.load(f)["results"]
    new_keys = {(r["check"], r["entry"]) for r in results}
    merged = [r for r in old if (r["check"], r["entry"]) not in new_keys] + list(results)
    import torch
    meta = {"torch": torch.__version__, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": merged}, f, indent=0)
    return merged


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", help="comma-separated entry names (default: all of op_db)")
    ap.add_argument("--checks", default=",".join(CHECKS))
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--timeout", type=int, default=600, help="seconds without progress before a job is killed")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(*args.worker)
    entries = args.entries.split(",") if args.entries else None
    jobs = all_jobs(entries, tuple(args.checks.split(",")))
    t0 = time.time()
    results = sweep(jobs, args.jobs, args.timeout)
    save(results, args.out, merge=entries is not None)
    print(f"{len(results)} results in {time.time() - t0:.0f}s -> {args.out}")


if __name__ == "__main__":
    main()
