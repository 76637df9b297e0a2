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
  mismatch (a rank that matched learns it from the missed marks).  A rank
  that misses also says so in the group's c10d store, under the stream's
  count of launches, before launching: a predicted reduce_scatter of
  floats carries no marks (programs.FastBlocks), and a rank whose chunk
  starts with a NaN looks there.
- What a checked call agreed on is learned at the next launch, when all
  ranks wait for it at the same point of their streams.  A timed-out call
  ends prediction for the stream: its ranks may be out of step.
- After MAX_MISSES changes of what follows a call, the calls after it are
  no longer predicted (a pattern that alternates would miss every time),
  until the same call has followed it STABLE times running: one barrier or
  logging all_reduce in a loop of all_reduces must not leave the loop
  checked for good.
"""
import collections
import concurrent.futures
import threading

from . import programs


MAX_MISSES = 2
STABLE = 8


class _Stream:
    def __init__(self):
        self.lock = threading.Lock()  # DDP launches from autograd's thread
        self.follows = {}  # agreed signature -> the agreed one that came next
        self.misses = {}  # agreed signature -> how often every rank missed after it
        self.runs = {}  # agreed signature no longer predicted after -> (what followed it, how often running)
        self.last = None  # the previous call's agreed signature, when known
        self.unsettled = None  # (Launched, previous signature, its signature)
        self.running = collections.deque()  # launched, not yet seen done: a timeout among them breaks the stream
        self.broken = False
        self.seq = 0  # programs launched on the stream: the same count on every rank
        self.me = None  # this rank's index in the stream's devices (a process drives one device)
        self.given_up = 0  # len(programs.GIVEN_UP) when check_timeouts last looked
        # store keys of this rank's misses that every rank missed too: no
        # verdict reads them once the checked call after them has run on all
        # ranks (deleted when it settles; a miss of some ranks only keeps its
        # key: a peer's verdict may read it long after)
        self.said = []

    def check_timeouts(self):
        """Broken if a collective still running was given up on.  (Asking
        each whether it is done costs a call into XLA per running collective:
        only the oldest are asked, to drop them, unless one timed out; and
        they are looked through for one only when some collective anywhere
        was given up on since the last look: dozens run ahead of the host.)"""
        running = self.running
        while running and running[0].done():
            running.popleft()
        given_up = len(programs.GIVEN_UP)
        if given_up == self.given_up:
            return
        self.given_up = given_up
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
            self._forget_said()
            agreed = programs.agrees(sigs)
        except concurrent.futures.TimeoutError:
            launched.timed_out = True
            self.broken = True
            return
        except Exception:  # noqa: BLE001 -- the program failed; its work reports it
            self.broken = True
            return
        if agreed:
            if before is not None:
                self._learn(before, sig)
            self.last = sig

    def _forget_said(self):
        """Delete this rank's store keys of misses every rank had: each rank
        read them before the checked call that just ran on all of them."""
        if self.said:
            store = _store()
            for key in self.said:
                try:
                    store.delete_key(key)
                except (RuntimeError, NotImplementedError):  # (a store that cannot delete keeps them)
                    pass
            self.said.clear()

    def _learn(self, before, sig):
        """``sig`` (agreed) followed ``before``: predict it next time, unless
        what follows ``before`` changed MAX_MISSES times; then again once it
        has followed ``before`` STABLE times running."""
        if self.misses.get(before, 0) < MAX_MISSES:
            self.follows[before] = sig
            return
        run = self.runs.get(before)
        count = run[1] + 1 if run is not None and run[0] == sig else 1
        if count < STABLE:
            self.runs[before] = (sig, count)
            return
        del self.runs[before], self.misses[before]
        self.follows[before] = sig

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
    of programs.submit); a ``Launched``.  (Every collective call passes here:
    the common one, a predicted call, makes as few Python calls as it can,
    each about 1 us of the host's time per collective.)"""
    aval = x.aval  # (jax's x.shape and x.dtype are Python properties reading it)
    sig = (kind, static, aval.shape, aval.dtype,  # (the dtype itself: str() costs 4 us)
           None if block is None else tuple(block), None if out_shape is None else tuple(out_shape))
    s = _streams.get(devices) or _stream(devices)
    with s.lock:
        s.check_timeouts()
        if s.unsettled is not None:
            s.settle(timeout_s)
        launched = _launch(s, sig, kind, static, devices, x, block, out_shape, timeout_s)
        s.running.append(launched)
        return launched


def _launch(s, sig, kind, static, devices, x, block, out_shape, timeout_s):
    before = s.last
    guess = None if s.broken or before is None else s.follows.get(before)  # (predicted())
    if guess is not None:
        s.last = guess  # every rank steps along the same prediction
        programs.counts["launches"] += 1
        if guess == sig:
            programs.counts["fast"] += 1
            p = programs.fast(sig, devices)
            s.seq += 1
            verdict = _Verdict(p, s.seq, guess, None, devices, s.me) if s.me is not None else \
                _verdict(s, p, guess, None, devices, x)
            return programs.Launched(p.launch(x), verdict, predicted=True, small=p.small)
        launched = _missed(s, guess, sig, devices, x, timeout_s)
        if launched is not None:
            return launched
        # every rank missed: the pattern changed (after MAX_MISSES changes,
        # calls after ``before`` stop being predicted: each miss costs a round)
        del s.follows[before]
        s.misses[before] = s.misses.get(before, 0) + 1
    s.seq += 1
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
    s.seq += 1
    me = devices.index(_device(x))
    _say_missed(devices, s.seq, me)  # before the launch
    verdict = _verdict(s, p, guess, sig, devices, x)
    launched = programs.Launched(p.launch(p.missed_payload(_device(x)), missed=True), verdict)
    try:
        _, check = launched.result(timeout_s)
    except concurrent.futures.TimeoutError:
        launched.timed_out = s.broken = True
        return launched
    except Exception:  # noqa: BLE001 -- the program failed; its work reports it
        s.broken = True
        return launched
    if len(verdict.missed(check)) < len(devices):
        return launched
    s.said.append(_missed_key(devices, s.seq, me))
    return None


def _store():
    from . import bootstrap
    return bootstrap.store()


def _say_missed(devices, seq, rank):
    """Write in the store that rank ``rank`` missed the ``seq``-th launch's
    prediction, and return once the store holds it.  (``add``, not ``set``:
    TCPStore answers an add but not a set, so a set could still be on its
    way when a peer, its program done, asks the store and is answered
    first; that peer would then take this rank for one that hit.)"""
    _store().add(_missed_key(devices, seq, rank), 1)


def _missed_key(devices, seq, rank):
    """Where rank ``rank`` of the group on ``devices`` says it missed the
    prediction of its stream's ``seq``-th launch."""
    return f"tpu_dist/missed/{'.'.join(str(d.id) for d in devices)}/{seq}/{rank}"


def _device(x):
    return next(iter(x.devices()))


def _describe(sig):
    kind, static, shape, dtype = sig[:4]
    return f"{kind} {programs.describe(programs.signature(kind, static, shape, dtype))}"


class _Verdict:
    """A predicted program's check: ``missed(check)`` the ranks that called
    something else; called, None if no rank missed the prediction ``guess``
    (launched as the stream's ``seq``-th program), else every rank's call as
    far as this rank knows it (``mine``: what this rank called when it
    missed)."""
    __slots__ = ("plan", "seq", "guess", "mine", "devices", "me")

    def __init__(self, plan, seq, guess, mine, devices, me):
        self.plan, self.seq, self.guess, self.mine, self.devices, self.me = \
            plan, seq, guess, mine, devices, me

    def asked(self, rank):
        return _store().check([_missed_key(self.devices, self.seq, rank)])

    def missed(self, check):
        return self.plan.missed(check, self.asked)

    def __call__(self, check):
        guess, mine, devices, me = self.guess, self.mine, self.devices, self.me
        missed = self.missed(check)
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


def _verdict(s, plan, guess, mine, devices, x):
    # (x's device, not x: the check may outlive the payload by long)
    if s.me is None:
        s.me = devices.index(_device(x))
    return _Verdict(plan, s.seq, guess, mine, devices, s.me)
