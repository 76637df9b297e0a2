"""Predicting each collective's signature, so a repeated pattern (DDP's
buckets, a training loop's all_reduces) runs as ONE collective per call.

A checked program (programs.Plan) exchanges every rank's signature before
its payload: two rendezvous for a payload larger than the folded size.  The
transport must never see ranks disagree on a buffer's size (Gloo aborts the
process), so the payload's collective may skip that exchange only when every
rank knows in advance what the others will call.

Each group's stream (keyed by its devices) records which agreed signature
followed which.  Every input to that record is agreed by all ranks, so every
rank predicts the same next call and launches the same FastPlan for it (a
FastBlocks for an all_gather or reduce_scatter: programs.fast): a wrong
guess costs a wasted round, never mismatched buffers.

- A call that matches the prediction runs the FastPlan with its payload.
- A call that does not runs the same FastPlan with zeros and a "missed"
  mark, then waits for it: if every rank missed, all of them run the checked
  program for what they really called (the pattern changed); if only some
  did, the ranks called different things and every rank raises the
  mismatch (a rank that matched learns it from the missed marks).
- What a checked call agreed on is learned at the next launch, when all
  ranks wait for it at the same point of their streams.  A timed-out call
  ends prediction for the stream: its ranks may be out of step.
"""
import collections
import concurrent.futures
import threading

from . import programs


MAX_MISSES = 2


class _Stream:
    def __init__(self):
        self.lock = threading.Lock()  # DDP launches from autograd's thread
        self.follows = {}  # agreed signature -> the agreed one that came next
        self.misses = {}  # agreed signature -> how often every rank missed after it
        self.last = None  # the previous call's agreed signature, when known
        self.unsettled = None  # (Launched, previous signature, its signature)
        self.running = collections.deque()  # launched, not yet seen done: a timeout among them breaks the stream
        self.broken = False

    def check_timeouts(self):
        """Broken if a collective still running was given up on.  (Asking
        each whether it is done costs a call into XLA per running collective:
        only the oldest are asked, to drop them, unless one timed out.)"""
        running = self.running
        while running and running[0].done():
            running.popleft()
        if any(one.timed_out for one in running):
            self.running = running = collections.deque(one for one in running if not one.done())
            if any(one.timed_out for one in running):
                self.broken = True

    def settle(self, timeout_s):
        """Learn what the last checked call agreed on (all ranks do this at
        the same point of the stream, so they learn the same)."""
        if self.unsettled is None:
            return
        launched, before, sig = self.unsettled
        self.unsettled = None
        self.last = None
        if launched.timed_out:
            self.broken = True
            return
        try:
            sigs = launched.result(timeout_s)[-1]  # (a deferred work keeps only its check there)
            agreed = programs.agrees(sigs)
        except concurrent.futures.TimeoutError:
            launched.timed_out = True
            self.broken = True
            return
        except Exception:  # noqa: BLE001 -- the program failed; its work reports it
            self.broken = True
            return
        if agreed:
            if before is not None and self.misses.get(before, 0) < MAX_MISSES:
                self.follows[before] = sig
            self.last = sig

    def predicted(self):
        if self.broken or self.last is None:
            return None
        return self.follows.get(self.last)


_streams = {}
_streams_lock = threading.Lock()


def _stream(devices):
    s = _streams.get(devices)
    if s is None:
        with _streams_lock:
            s = _streams.setdefault(devices, _Stream())
    return s


def submit(kind, static, devices, x, block=None, out_shape=None, timeout_s=None):
    """Launch collective ``kind`` on this rank's block ``x`` (the arguments
    of programs.submit); a ``Launched``."""
    sig = (kind, static, tuple(x.shape), str(x.dtype),
           None if block is None else tuple(block), None if out_shape is None else tuple(out_shape))
    s = _stream(devices)
    with s.lock:
        s.check_timeouts()
        s.settle(timeout_s)
        launched = _launch(s, sig, kind, static, devices, x, block, out_shape, timeout_s)
        s.running.append(launched)
        return launched


def _launch(s, sig, kind, static, devices, x, block, out_shape, timeout_s):
    before, guess = s.last, s.predicted()
    if guess is not None:
        s.last = guess  # every rank steps along the same prediction
        programs.counts["launches"] += 1
        if guess == sig:
            programs.counts["fast"] += 1
            p = programs.fast(sig, devices)
            return programs.Launched(p.launch(x), _verdict(guess, None, devices, x), predicted=True)
        launched = _missed(s, guess, sig, devices, x, timeout_s)
        if launched is not None:
            return launched
        # every rank missed: the pattern changed (after MAX_MISSES changes,
        # calls after ``before`` stop being predicted: each miss costs a round)
        del s.follows[before]
        s.misses[before] = s.misses.get(before, 0) + 1
    launched = programs.submit(kind, static, devices, x, block, out_shape)
    s.last = None
    if programs.fast_capable(kind, static, block, out_shape):
        s.unsettled = (launched, before, sig)  # settled at the next launch
    return launched


def _missed(s, guess, sig, devices, x, timeout_s):
    """Run the predicted FastPlan with zeros, marked missed, and wait: its
    Launched if some rank did call ``guess`` (the verdict raises the
    mismatch), None if every rank missed (the caller runs the checked one)."""
    # XLA:CPU starts a program once its inputs are ready: zeros, ready at
    # once, could overtake this rank's earlier collectives (waiting on their
    # inputs) and meet a peer's other collective.  So the earlier ones first.
    try:
        for one in s.running:
            one.result(timeout_s)
    except concurrent.futures.TimeoutError:
        s.broken = True
    except Exception:  # noqa: BLE001 -- a failed program; its work reports it
        s.broken = True
    p = programs.fast(guess, devices)
    launched = programs.Launched(p.launch(p.missed_payload(_device(x)), missed=True),
                                 _verdict(guess, sig, devices, x))
    try:
        _, check = launched.result(timeout_s)
    except concurrent.futures.TimeoutError:
        launched.timed_out = s.broken = True
        return launched
    except Exception:  # noqa: BLE001 -- the program failed; its work reports it
        s.broken = True
        return launched
    if len(programs.missed_ranks(check)) < len(devices):
        return launched
    return None


def _device(x):
    return next(iter(x.devices()))


def _describe(sig):
    kind, static, shape, dtype = sig[:4]
    return f"{kind} {programs.describe(programs.signature(kind, static, shape, dtype))}"


def _verdict(guess, mine, devices, x):
    """A FastPlan's check: None if no rank missed the prediction ``guess``;
    else every rank's call as far as this rank knows it (``mine``: what
    this rank called when it missed)."""
    me = devices.index(_device(x))  # (not x: the check may outlive the payload by long)

    def mismatch(check):
        missed = programs.missed_ranks(check)
        if not missed:
            return None
        rows = []
        for i in range(len(devices)):
            if i not in missed:
                rows.append(f"rank {i}: {_describe(guess)}")
            elif i == me and mine is not None:
                rows.append(f"rank {i}: {_describe(mine)}")
            else:
                rows.append(f"rank {i}: another call than {_describe(guess)}")
        return "; ".join(rows)
    return mismatch
