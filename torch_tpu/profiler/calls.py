"""Counting the Python work a piece of code costs: calls are deterministic
where a timer on a shared machine is not, so this is how host overhead is
held to budgets (tests/test_overhead.py) and compared between versions
(benchmarks/collective_host_cost.py)."""
import os
import sys

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # torch_tpu itself


def python_calls(fn, prefix=PACKAGE) -> int:
    """The Python function calls and C calls that code under ``prefix``
    (torch_tpu's own by default; PyTorch's and JAX's internals not counted,
    so a count does not depend on their versions; ``""``: every package's)
    makes while ``fn()`` runs on this thread."""
    count = [0]
    own = python_calls.__code__  # (its call of ``fn``, a C function maybe, is not fn's work)

    def profile(frame, event, arg):
        if event in ("call", "c_call") and frame.f_code.co_filename.startswith(prefix) and frame.f_code is not own:
            count[0] += 1
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        calls = count[0]
        sys.setprofile(previous)
    return calls
