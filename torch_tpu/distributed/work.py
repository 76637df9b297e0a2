"""c10d Work objects for the two transports.

An XLA collective is a future that completes with its result once the
program has run; ``wait`` enforces the group timeout on it, checks the
signatures gathered with it when the call was a checked one (a mismatch
means ranks disagreed on shapes or on which collective to run), and only
then writes the results into the output tensors.
"""
import concurrent.futures
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from . import programs


class CollectiveTimeout(RuntimeError):
    pass


class CollectiveMismatch(RuntimeError):
    pass


def _seconds(timeout, default):
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    return default if not timeout or timeout <= 0 else float(timeout)


def _late(what, seconds):
    return (f"tpu_dist: {what} did not complete within {seconds:g}s: a peer rank has not "
            "reached this collective (it may have exited, hung, or issued collectives in a "
            "different order, or with tensors unlike the other ranks')")


class XlaWork(dist.Work):
    """Pending XLA collectives: (future of (result, signatures), writer) pairs."""

    def __init__(self, what, timeout_s, pending, result=None, after=None):
        super().__init__()
        self._what = what
        self._timeout_s = timeout_s
        self._pending = pending
        self._result = result
        self._after = after
        self._done = False
        self._error = None
        self.outputs = []

    def _finish(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        done = []
        for fut, writer in self._pending:
            try:  # the future completes when the program has (programs.submit)
                out, sigs = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                raise CollectiveTimeout(_late(self._what, timeout_s)) from None
            done.append((out, sigs, writer))
        for _, sigs, _ in done:
            if sigs is not None and not programs.agrees(sigs):
                rows = np.asarray(sigs).reshape(-1, programs.SIG_LEN)
                detail = "; ".join(f"rank {i}: {programs.describe(r)}" for i, r in enumerate(rows))
                raise CollectiveMismatch(
                    f"tpu_dist: {self._what}: ranks called it with mismatched tensors or "
                    f"arguments ({detail})")
        for out, _, writer in done:
            self.outputs.append(out)
            if writer is not None:
                writer(out)
        if self._after is not None:
            self._after()

    def wait(self, timeout=timedelta(0)):
        if not self._done:
            self._done = True
            try:
                self._finish(_seconds(timeout, self._timeout_s))
            except Exception as e:
                self._error = e
            self._pending = []
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        if self._done:
            return True
        return all(f.done() for f, _ in self._pending)

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def get_future(self):
        fut = torch.futures.Future()
        try:
            self.wait()
            fut.set_result(self._result)
        except Exception as e:  # surfaced to the future's consumer
            fut.set_exception(e)
        return fut

    def result(self):
        return self._result or []


class CopyBackWork(dist.Work):
    """A Gloo work on CPU copies; ``wait`` copies outputs back to the device."""

    def __init__(self, inner, copies, result=None):
        super().__init__()
        self._inner = inner
        self._copies = copies  # [(device tensor, cpu tensor)]
        self._result = result
        self._done = False

    def wait(self, timeout=timedelta(0)):
        if not self._done:
            if self._inner is not None:
                self._inner.wait(timeout) if timeout else self._inner.wait()
            with torch.no_grad():
                for dst, src in self._copies:
                    dst.copy_(src)
            self._done = True
        return True

    def is_completed(self):
        return self._done or self._inner is None or self._inner.is_completed()

    def is_success(self):
        return self._done

    def exception(self):
        return None

    def get_future(self):
        fut = torch.futures.Future()
        self.wait()
        fut.set_result(self._result)
        return fut

    def result(self):
        return self._result or []
