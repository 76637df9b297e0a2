"""Run PyTorch's own device-generic test files against tpu and the CPU.

PyTorch holds a device backend to its ``instantiate_device_type_tests`` suites:
each file grows one test class per device (``TestFooCPU``, and, with torch_tpu
autoloaded, ``TestFooPRIVATEUSE1``).  This tool runs both classes of each file
(PyTorch's test files are never part of this repository: pass the folder that
holds copies of them), then prints a table (tests, CPU passes, tpu passes,
tpu-only failures, wall time of each run) and the tpu-only failures grouped by
cause (exception type and the first line of its message).

    python tests/tools/pytorch_suites.py --tests-dir /work/pytorch_tests \
        test_shape_ops.py test_indexing.py

Each run is one pytest subprocess per file and device, under ``nice``, with a
per-test timeout (in CPU seconds by default, SIGPROF; a test past it fails with SuiteTestTimeout) and an
overall limit per run; results come from pytest's ``--junitxml`` (or, when the
run is cut short, the per-test ``--suite-log``).  A pytest process killed by a
signal (a segfault: e.g. at the kernel's vm.max_map_count, which a process
holding a few thousand XLA:CPU executables reaches) is reported as CRASHED, with
the tests it logged, and fails ``--check``.
``tests/pytorch_suite_expected.py`` lists the tpu-only failures known and why:
``--check`` reports the ones not listed there (and listed ones that pass).

When pytest loads this file as a plugin (``-p pytorch_suites``), it adds the
per-test timeout, and a ``torch.tpu.synchronize()`` at the end of each test's
body: an index check that failed on the device (raised at the next host read,
as CUDA's device-side asserts are) is charged to the test that made it, never
to the next.
"""
import argparse
import collections
import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TPU_CLASS_SUFFIXES = ("PRIVATEUSE1", "TPU")


# ---- plugin side: the per-test timeout -------------------------------------------

def pytest_addoption(parser):
    parser.addoption("--suite-test-timeout", type=float, default=0.0,
                     help="seconds a single test may run (0: no limit)")
    parser.addoption("--suite-timeout-clock", choices=("cpu", "wall"), default="cpu",
                     help="what the per-test timeout counts: the process's CPU seconds (the default: on a "
                          "shared machine the load does not fail a test) or wall seconds")
    parser.addoption("--suite-log", default="",
                     help="append each test's outcome to this file as it ends (kept when a run is cut short)")
    parser.addoption("--suite-select", default="",
                     help="run only the tests named in this file (one per line, the device in the name as DEV)")


_LOG = []  # the --suite-log path, once pytest is configured


def pytest_configure(config):
    _LOG[:] = [config.getoption("--suite-log")]


def pytest_runtest_logreport(report):
    if not (_LOG and _LOG[0]) or (report.when != "call" and report.passed):
        return
    message = ""
    if report.failed and report.longrepr:
        crash = getattr(report.longrepr, "reprcrash", None)  # "TypeError: ...", as the XML's message
        message = crash.message if crash else str(report.longrepr).strip().splitlines()[-1]
    if report.skipped and isinstance(report.longrepr, tuple):
        message = report.longrepr[2].removeprefix("Skipped: ")
    with open(_LOG[0], "a") as f:
        f.write(json.dumps({"id": report.nodeid, "outcome": report.outcome, "message": message}) + "\n")


def device_free(name):
    """A test's name with its device written DEV: the CPU and tpu twins agree."""
    return re.sub(r"_(cpu|tpu|privateuse1)(?=_|$|\[)", "_DEV", name, count=1)


def pytest_collection_modifyitems(config, items):
    """--suite-select: a fixed subset of a file too large to run whole."""
    path = config.getoption("--suite-select")
    if not path:
        return
    with open(path) as f:
        wanted = {line.strip() for line in f if line.strip()}
    keep = [item for item in items if device_free(item.name) in wanted]
    config.hook.pytest_deselected(items=[item for item in items if device_free(item.name) not in wanted])
    items[:] = keep


class SuiteTestTimeout(BaseException):
    """A test past --suite-test-timeout: a BaseException, so no ``except
    Exception`` on the way (an op launch wraps errors as RuntimeError) hides it."""


def _on_alarm(signum, frame):
    raise SuiteTestTimeout("test ran past --suite-test-timeout")


_TIMERS = {"cpu": (signal.ITIMER_PROF, signal.SIGPROF), "wall": (signal.ITIMER_REAL, signal.SIGALRM)}


def pytest_runtest_call(item):
    limit = item.config.getoption("--suite-test-timeout")
    if limit:
        timer, signum = _TIMERS[item.config.getoption("--suite-timeout-clock")]
        signal.signal(signum, _on_alarm)
        signal.setitimer(timer, limit)


def pytest_runtest_teardown(item):
    if item.config.getoption("--suite-test-timeout"):
        signal.setitimer(_TIMERS[item.config.getoption("--suite-timeout-clock")][0], 0)


def pytest_runtest_setup(item):
    """Test isolation for deferred device checks (an index out of range raises
    at the next host read, like CUDA's device-side asserts): after the test
    body, ``torch.tpu.synchronize()`` raises a check that failed in this test,
    charged to this test; after a failed body, pending checks are dropped."""
    body = item.runtest

    def runtest():
        try:
            body()
        except BaseException:
            _drain_device_checks()
            raise
        if "torch_tpu" in sys.modules:
            import torch
            torch.tpu.synchronize()
    item.runtest = runtest


def _drain_device_checks():
    if "torch_tpu" in sys.modules:
        import torch
        with contextlib.suppress(Exception):  # already failing: the first error is the one reported
            torch.tpu.synchronize()


# ---- driver side ------------------------------------------------------------------

def _python():
    return sys.executable


# PyTorch's hook for an out-of-tree device's test base (common_device_type reads it
# at import): tpu's classes then skip the tests of features tpu does not support.
TEST_BASE = os.path.join(REPO, "torch_tpu", "testing", "device_type.py")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, HERE, env.get("PYTHONPATH")) if p)
    env.setdefault("TORCH_TEST_DEVICES", TEST_BASE)
    return env


def collect_classes(path):
    """The device classes of a test file: {"cpu": [...], "tpu": [...]}."""
    cmd = ["nice", "-n", "10", _python(), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", path]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, env=_env(), cwd=os.path.dirname(path))
    classes = collections.OrderedDict()
    for line in res.stdout.splitlines():
        parts = line.split("::")
        if len(parts) >= 3:
            classes[parts[1]] = True
    found = {"cpu": [c for c in classes if c.endswith("CPU")],
             "tpu": [c for c in classes if c.endswith(TPU_CLASS_SUFFIXES)]}
    if not found["cpu"] and not found["tpu"]:
        sys.stderr.write(res.stdout[-2000:] + res.stderr[-2000:])
    return found


def run_classes(path, classes, xml, test_timeout, limit, extra, clock="cpu"):
    """pytest on ``path::C`` for each class; (wall seconds, CPU seconds, timed
    out, the signal that killed pytest or 0).  CPU seconds (user + system of the
    pytest process) are the fairer measure on a shared machine, where wall time
    depends on the load.  pytest's own output goes to ``xml + ".out"`` (a
    crash's traceback: faulthandler is on)."""
    for stale in (xml, xml + ".log", xml + ".out"):
        if os.path.exists(stale):
            os.remove(stale)
    name = os.path.basename(path)
    cmd = (["nice", "-n", "10", _python(), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytorch_suites",
            f"--suite-test-timeout={test_timeout}", f"--suite-timeout-clock={clock}", f"--junitxml={xml}",
            f"--suite-log={xml}.log"]
           + [f"{name}::{c}" for c in classes] + list(extra))
    start, used = time.monotonic(), _children_cpu()
    died = 0
    try:
        with open(xml + ".out", "w") as out:
            res = subprocess.run(cmd, check=False, env=_env(), cwd=os.path.dirname(path), timeout=limit,
                                 stdout=out, stderr=subprocess.STDOUT)
        died = -res.returncode if res.returncode < 0 else 0
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    return time.monotonic() - start, _children_cpu() - used, timed_out, died


def _children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def read_junit(xml):
    """{(class, test name): (status, message)}; status: pass, fail, skip."""
    results = {}
    if not os.path.exists(xml):
        return read_log(xml + ".log")
    for case in ET.parse(xml).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        status, message = "pass", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, message = "fail", child.get("message") or ""
                break
            if child.tag == "skipped":
                status, message = "skip", child.get("message", "")
        results[(cls, case.get("name"))] = (status, message)
    return results


def read_log(path):
    """read_junit's answer from a --suite-log (a run cut short writes no XML)."""
    results = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                _, cls, name = entry["id"].split("::")[:3]
                status = {"passed": "pass", "failed": "fail", "skipped": "skip"}[entry["outcome"]]
                if results.get((cls, name), ("pass",))[0] != "fail":  # a failed teardown after a pass is a failure
                    results[(cls, name)] = (status, entry["message"])
    return results


def cpu_twin(cls, name):
    """The CPU test matching a tpu test: class suffix and the device in the name."""
    for suffix in TPU_CLASS_SUFFIXES:
        if cls.endswith(suffix):
            cls = cls[: -len(suffix)] + "CPU"
            break
    return cls, re.sub(r"_(tpu|privateuse1)(?=_|$|\[)", "_cpu", name, count=1)


def cause(message):
    """A failure's cause: its first line, numbers and addresses blurred."""
    first = (message or "").strip().splitlines()[0] if (message or "").strip() else "(no message)"
    first = re.sub(r"0x[0-9a-f]+", "0x…", first)
    return first[:160]


# torch_tpu/testing/device_type.py's SKIP_REASON_PREFIX (not imported: the driver stays free of torch)
UNSUPPORTED_SKIP = "not supported on tpu: "


def compare(cpu, tpu):
    """Per tpu test: its CPU twin's status; the tpu-only failures; and the
    tests tpu's test base skipped as unsupported features whose twin passes."""
    rows = {"tests": len(tpu), "cpu_pass": 0, "tpu_pass": 0, "tpu_only": {}, "tpu_skip_cpu_pass": 0,
            "unsupported": {}, "passed": set()}
    for (cls, name), (status, message) in tpu.items():
        twin = cpu.get(cpu_twin(cls, name), ("missing", ""))[0]
        if status == "skip" and message.startswith("Only runs on cpu"):  # @onlyCPU: not counted
            rows["tests"] -= 1
            continue
        if twin == "pass":
            rows["cpu_pass"] += 1
        if status == "pass":
            rows["tpu_pass"] += 1
            rows["passed"].add(f"{cls}::{name}")
        elif status == "fail" and twin == "pass":
            rows["tpu_only"][f"{cls}::{name}"] = message
        elif status == "skip" and twin == "pass" and message.startswith(UNSUPPORTED_SKIP):
            rows["unsupported"][f"{cls}::{name}"] = message
        elif status == "skip" and twin == "pass":
            rows["tpu_skip_cpu_pass"] += 1
    return rows


def _expected():
    """tests/pytorch_suite_expected.py's (EXPECTED_FAILURES, EXPECTED_UNSUPPORTED_SKIPS)."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from pytorch_suite_expected import EXPECTED_FAILURES, EXPECTED_UNSUPPORTED_SKIPS
    return EXPECTED_FAILURES, EXPECTED_UNSUPPORTED_SKIPS


def _times(seconds):
    cpu, tpu = seconds.get("cpu"), seconds.get("tpu")
    if not isinstance(cpu, float) or not isinstance(tpu, float) or not cpu:
        return "-"
    return f"{tpu / cpu:.1f}x"


def _ratio(part, whole):
    return f"{100 * part / whole:.1f}%" if whole else "-"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="test files in --tests-dir (default: every test_*.py there)")
    ap.add_argument("--tests-dir", required=True)
    ap.add_argument("--test-timeout", type=float, default=120.0, help="seconds per test")
    ap.add_argument("--timeout-clock", choices=("cpu", "wall"), default="cpu",
                    help="--test-timeout in CPU seconds of the test process (default) or wall seconds")
    ap.add_argument("--limit", type=float, default=3600.0, help="seconds per file and device")
    ap.add_argument("--xml-dir", default="/tmp/pytorch_suites")
    ap.add_argument("--tpu-only", action="store_true", help="reuse the CPU results in --xml-dir")
    ap.add_argument("--cpu-only", action="store_true", help="run the CPU classes only (for a later --tpu-only)")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: print the table from the CPU and tpu results already in --xml-dir")
    ap.add_argument("--check", action="store_true",
                    help="compare the tpu-only failures with tests/pytorch_suite_expected.py")
    ap.add_argument("-k", default=None, help="passed to pytest")
    ap.add_argument("--select", default=None,
                    help="a file of test names (device written DEV) to run instead of the whole file")
    args = ap.parse_args(argv)
    os.makedirs(args.xml_dir, exist_ok=True)
    files = args.files or sorted(f for f in os.listdir(args.tests_dir) if f.startswith("test_") and f.endswith(".py"))
    extra = ["-k", args.k] if args.k else []
    if args.select:
        extra.append(f"--suite-select={os.path.abspath(args.select)}")
    table, failures, skips, passes = [], {}, {}, {}
    crashes = collections.defaultdict(list)
    for f in files:
        path = os.path.abspath(os.path.join(args.tests_dir, f))
        classes = {"cpu": [], "tpu": []} if args.report_only else collect_classes(path)
        stem = os.path.splitext(f)[0]
        walls, cpus = {}, {}
        results = {}
        for dev in ("cpu",) if args.cpu_only else ("cpu", "tpu"):
            xml = os.path.join(args.xml_dir, f"{stem}.{dev}.xml")
            times = xml[:-len(".xml")] + ".times.json"  # the run's wall and CPU seconds, for --tpu-only
            reuse = args.report_only or (dev == "cpu" and args.tpu_only)
            if reuse and (os.path.exists(xml) or os.path.exists(xml + ".log")):
                walls[dev] = cpus[dev] = None
                if os.path.exists(times):
                    with open(times) as fh:
                        walls[dev], cpus[dev] = json.load(fh)
            elif classes[dev]:
                walls[dev], cpus[dev], timed_out, died = run_classes(path, classes[dev], xml, args.test_timeout,
                                                                     args.limit, extra, args.timeout_clock)
                if died:  # the tests after the one it died in did not run: say so, never a silently short table
                    crashes[f].append(f"the {dev} pytest process died of {signal.Signals(died).name} after "
                                      f"{len(read_log(xml + '.log'))} tests (the rest did not run; its output: "
                                      f"{xml}.out)")
                with open(times, "w") as fh:
                    json.dump([walls[dev], cpus[dev]], fh)
                if timed_out:
                    walls[dev] = f">{args.limit:.0f}"
            results[dev] = read_junit(xml)
        rows = compare(results.get("cpu", {}), results.get("tpu", {}))
        failures[f], skips[f], passes[f] = rows["tpu_only"], rows["unsupported"], rows["passed"]
        table.append((f, rows, walls, cpus))
        print(f"done {f}", file=sys.stderr, flush=True)

    expected, expected_skips = _expected()
    print("tests: the file's tpu tests, less @onlyCPU ones; CPU passes: those whose CPU twin passes; "
          "unsupported: of those, skipped on tpu by torch_tpu's test base (quantized, sparse COO, complex32), "
          "not counted, as a test PyTorch's skip decorators skip; tpu / CPU: the share of the other CPU passes "
          "that pass on tpu too (the goal: >= 99%); plain: the same with the unsupported counted as misses; "
          "time ratios: tpu run / CPU run (wall time depends on the machine's load, CPU time less)")
    print("| file | tests | CPU passes | unsupported | tpu passes | tpu / CPU | plain | tpu-only failures "
          "| other tpu skips (CPU passes) | wall CPU / tpu | CPU time CPU / tpu | wall ratio | CPU time ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for f, rows, walls, cpus in table:
        wall = " / ".join("-" if walls.get(d) is None else (walls[d] if isinstance(walls[d], str) else f"{walls[d]:.0f} s")
                          for d in ("cpu", "tpu"))
        cpu = " / ".join("-" if cpus.get(d) is None else f"{cpus[d]:.0f} s" for d in ("cpu", "tpu"))
        unsupported = len(rows["unsupported"])
        both = rows["cpu_pass"] - len(rows["tpu_only"]) - rows["tpu_skip_cpu_pass"] - unsupported  # pass on both
        print(f"| {f} | {rows['tests']} | {rows['cpu_pass']} | {unsupported} | {rows['tpu_pass']} "
              f"| {_ratio(both, rows['cpu_pass'] - unsupported)} | {_ratio(both, rows['cpu_pass'])} "
              f"| {len(rows['tpu_only'])} | {rows['tpu_skip_cpu_pass']} | {wall} | {cpu} "
              f"| {_times(walls)} | {_times(cpus)} |")
    for f, fails in failures.items():
        if not fails:
            continue
        print(f"\n## {f}: tpu-only failures by cause")
        groups = collections.defaultdict(list)
        for test, message in fails.items():
            groups[cause(message)].append(test.split("::", 1)[1])
        for c, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"- {len(tests)} x {c}")
            for t in sorted(tests):
                print(f"    - {t}")
    for f, skipped in skips.items():
        if skipped:
            print(f"\n## {f}: {len(skipped)} skipped on tpu as unsupported (their CPU twins pass)")
            for c, n in collections.Counter(cause(m) for m in skipped.values()).most_common():
                print(f"- {n} x {c}")
    for f, lines in crashes.items():
        for line in lines:
            print(f"CRASHED {f}: {line}")
    if args.check:
        status = 1 if crashes else 0
        for f, fails in failures.items():
            known = expected.get(f, {})
            new = sorted(set(fails) - set(known))
            fixed = sorted(set(known) & passes[f])  # (an entry deselected or cut by --limit did not run)
            for t in new:
                print(f"NEW FAILURE {f}::{t}: {cause(fails[t])}")
                status = 1
            for t in fixed:
                print(f"now passes (remove from the expected list): {f}::{t}")
            skipped, known_skips = skips[f], expected_skips.get(f, {})
            for t in sorted(set(skipped) - set(known_skips)):
                print(f"NEW UNSUPPORTED SKIP {f}::{t}: {cause(skipped[t])}")
                status = 1
            for t in sorted(set(known_skips) - set(skipped)):
                print(f"no longer skipped as unsupported (remove from the expected skips): {f}::{t}")
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
