"""c10d Work objects for the two transports.

An XLA collective is a future that completes with its result once the
program has run; ``wait`` enforces the group timeout on it, checks the
signatures gathered with it when the call was a checked one (a mismatch
means ranks disagreed on shapes or on which collective to run), and only
then writes the results into the output tensors.

A predicted all_reduce (stream.py), an all_gather_into_tensor and a
reduce_scatter_tensor are the exception, and wait for nothing,
as a CUDA collective is only queued on its stream: its results go into the
output tensors while still computing, and its checks (a rank that called
something else, a peer that never joins, within the group timeout) are
looked at with the index checks, at the next host wait (``eager.checks``).
The host then never stalls between issuing a collective and what follows it:
DDP's optimizer step is queued while its last buckets still reduce.  Debug
mode waits at the call, to raise there.
"""
import concurrent.futures
import functools
import heapq
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ..eager import checks, modes
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


class _Deadlines:
    """One daemon thread that calls ``fn`` for each entry whose deadline
    passes uncancelled: the group timeout of a work's future.  (A
    ``threading.Timer`` per future starts a thread each time: about 60 us of
    CPU for every bucket DDP reduces.)  The thread is woken only for a
    deadline earlier than the one it sleeps until; cancelled entries are
    dropped when they reach the top, or all at once when they pile up."""

    def __init__(self):
        self._heap = []  # (deadline, sequence number, entry); entry[0]: fn, or None once cancelled
        self._live = 0
        self._seq = 0
        self._cv = threading.Condition()
        self._thread = None

    def add(self, seconds, fn):
        """Call ``fn()`` after ``seconds`` unless ``cancel(handle)`` first."""
        entry = [fn]
        with self._cv:
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + seconds, self._seq, entry))
            self._live += 1
            if len(self._heap) > 2 * self._live + 1024:
                self._heap = [e for e in self._heap if e[2][0] is not None]
                heapq.heapify(self._heap)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tpu_dist deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is entry:
                self._cv.notify()
        return entry

    def cancel(self, entry):
        with self._cv:
            if entry[0] is not None:
                entry[0] = None
                self._live -= 1

    def _run(self):
        with self._cv:
            while True:
                while self._heap and self._heap[0][2][0] is None:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cv.wait()
                    continue
                left = self._heap[0][0] - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                entry = heapq.heappop(self._heap)[2]
                fn, entry[0] = entry[0], None
                self._live -= 1
                self._cv.release()
                try:
                    fn()
                except Exception:  # noqa: BLE001 -- fn fails a future; nothing else listens here
                    pass
                finally:
                    self._cv.acquire()


_deadlines = _Deadlines()


def _gave_up(pending):
    """Mark launched collectives a timeout gave up on: their group's stream
    stops predicting (stream.py), as its ranks may now be out of step."""
    for fut, _ in pending:
        fut.timed_out = True


def _mismatch_error(what, mismatch, sigs):
    """The error for a collective's check output ``sigs``, or None."""
    detail = None if sigs is None else mismatch(sigs)
    if detail is None:
        return None
    return CollectiveMismatch(f"tpu_dist: {what}: ranks called it with mismatched "
                              f"tensors or arguments ({detail})")


def _wait_deferred(what, timeout_s, fut):
    """Wait for a deferred collective ``fut`` within the group timeout."""
    try:
        if fut.timed_out:
            raise concurrent.futures.TimeoutError
        fut.result(timeout_s)
    except concurrent.futures.TimeoutError:
        fut.timed_out = True  # its stream stops predicting
        raise CollectiveTimeout(_late(what, timeout_s)) from None


class XlaWork(dist.Work):
    """Pending XLA collectives: (future of (result, signatures), writer) pairs."""

    def __init__(self, what, timeout_s, pending, result=None, after=None, may_defer=False,
                 checked_too=False):
        super().__init__()
        # only a collective whose results reach the user only through its
        # output tensors (a barrier must synchronize; an internal size exchange
        # reads its result directly, after the checks)
        self._may_defer = may_defer
        # a checked program (not predicted) may defer too: its payload's
        # collective runs only when every rank's signature agrees, so ranks
        # that disagree stay in step on the transport and raise at their next
        # host wait.  (A checked all_reduce need not: the stream waits for it
        # at the next launch to learn the pattern, stream.py.)
        self._checked_too = checked_too
        self._what = what
        self._timeout_s = timeout_s
        self._pending = pending
        self._result = result
        self._after = after
        self._done = False
        self._error = None
        self._lock = threading.Lock()  # the waiter thread may finish it (get_future)
        self.outputs = []

    def _collect(self, timeout_s):
        """Wait (without the lock) for every program: [(out, sigs, writer)]."""
        deadline = time.monotonic() + timeout_s
        done = []
        for fut, writer in self._pending:
            try:  # the future completes when the program has (programs.submit)
                if fut.timed_out:  # given up on before (stream.py waits for a missed guess)
                    raise concurrent.futures.TimeoutError
                out, sigs = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                _gave_up(self._pending)
                raise CollectiveTimeout(_late(self._what, timeout_s)) from None
            done.append((out, sigs, writer, fut.mismatch))
        return done

    def _mismatch(self, sigs, mismatch):
        return _mismatch_error(self._what, mismatch, sigs)

    def _finish(self, done):
        for _, sigs, _, mismatch in done:
            error = self._mismatch(sigs, mismatch)
            if error is not None:
                raise error
        self._write([(out, writer) for out, _, writer, _ in done])

    def _write(self, results):
        """Give each (result, writer) pair's result to its output tensors."""
        for out, writer in results:
            self.outputs.append(out)
            if writer is not None:
                writer(out)
        if self._after is not None:
            self._after()

    def _deferrable(self):
        if not (self._may_defer and self._pending) or modes.current() is modes.EagerMode.DEBUG:
            return False
        for f, _ in self._pending:  # (a loop: a generator's frame costs a call per step)
            if not (f.predicted or (self._checked_too and f.checked)):
                return False
        return True

    def _finish_deferred(self):
        """Write the still-running results; their checks wait for the next host wait."""
        results = []
        for fut, writer in self._pending:
            out, check = fut.value
            fut.value = (check,)  # what is left to wait for: the output is the tensor's now
            # The checks hold neither this work nor its outputs: each result
            # goes once its tensor moves on.  (Kept to the next host wait, the
            # results of calls issued back to back all stayed alive, and the
            # allocator gave every later call fresh pages to fault in.)
            checks.defer_launch(check, functools.partial(_mismatch_error, self._what, fut.mismatch),
                                functools.partial(_wait_deferred, self._what, self._timeout_s, fut))
            results.append((out, writer))
        self._write(results)

    def wait(self, timeout=timedelta(0)):
        if not self._done and self._deferrable():
            with self._lock:
                if not self._done:
                    self._done = True
                    self._finish_deferred()
                    self._pending = []
        if not self._done:
            # Waiting happens outside the lock: the waiter thread may be the
            # one finishing this work (get_future) and must not queue behind us.
            try:
                done, error = self._collect(_seconds(timeout, self._timeout_s)), None
            except Exception as e:
                done, error = None, e
            with self._lock:
                if not self._done:
                    self._done = True
                    try:
                        if error is not None:
                            raise error
                        self._finish(done)
                    except Exception as e:
                        self._error = e
                    self._pending = []
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        if self._done:  # (a deferred one: done once its results are, as CUDA's event says)
            return all(o.is_ready() for o in self.outputs if hasattr(o, "is_ready"))
        return all(f.done() for f, _ in self._pending)

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def get_future(self):
        """A future completed once the collectives are done, without waiting
        for them here: DDP's reducer takes it right after launching a bucket's
        all_reduce and keeps computing gradients meanwhile.  A deadline fails it
        with the group timeout if they never finish."""
        fut = torch.futures.Future()
        if self._done or self._deferrable() or self.is_completed():
            self._complete(fut)
            return fut
        deadline = _deadlines.add(self._timeout_s, lambda: self._give_up(fut))
        programs.when_done([f for f, _ in self._pending], lambda: self._complete(fut, deadline))
        return fut

    def _complete(self, fut, deadline=None):
        if deadline is not None:
            _deadlines.cancel(deadline)
        try:
            self.wait()
            outcome = None
        except Exception as e:  # surfaced to the future's consumer
            outcome = e
        with self._lock:  # the deadline may have failed it already
            if fut.done():
                return
            if outcome is None:
                fut.set_result(self._result)
            else:
                fut.set_exception(outcome)

    def _give_up(self, fut):
        _gave_up(self._pending)
        with self._lock:
            if not fut.done():
                fut.set_exception(CollectiveTimeout(_late(self._what, self._timeout_s)))

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
