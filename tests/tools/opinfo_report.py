"""Summary of the OpInfo conformance sweep.

    python -m tests.tools.opinfo_report            # from the last sweep's results
    python -m tests.tools.opinfo_report --sweep    # run the full sweep first (slow, process-isolated)
    python tests/tools/opinfo_report.py --entries add,sin --sweep   # a few entries only

The results live in tests/tools/opinfo_results.json (written by opinfo_sweep.py or
update_opinfo_expectations.py).
"""
import argparse
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import opinfo_sweep  # noqa: E402

# the checks that repeat the forward check in another dtype (as opinfo_harness.DTYPE_CHECKS)
DTYPE_CHECKS = [c for c in opinfo_sweep.CHECKS if c not in ("forward", "gradient")]


def _packet(name):
    """aten::sin.out -> aten::sin: kernels are registered per functional op and cover .out / _ siblings."""
    base = name.split(".")[0]
    if not base.startswith("aten::"):
        base = "aten::" + base
    return base


def load(path=opinfo_sweep.RESULTS):
    with open(path) as f:
        data = json.load(f)
    return data["meta"], data["results"]


def report(results, meta=None, top=25, out=sys.stdout):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    by = collections.defaultdict(dict)
    for r in results:
        by[r["check"]][r["entry"]] = r

    def count(check):
        rs = list(by[check].values())
        return (sum(r["status"] == "pass" for r in rs), len(rs),
                sum(r["status"] == "skip" for r in rs), sum(r["kind"] == "meta" for r in rs))

    fwd, fwd_n, fwd_skip, fwd_meta = count("forward")
    grad, grad_n, grad_skip, _ = count("gradient")
    if meta:
        p(f"OpInfo sweep of {meta.get('time')} (torch {meta.get('torch')})")
    p(f"{fwd} of {fwd_n} OpInfo entries pass forward float32 without fallback; "
      f"{grad} pass gradients (of {grad_n - grad_skip} entries with comparable autograd)")
    p(f"  forward: {fwd_skip} skipped (no CPU float32 support / no runnable sample), "
      f"{fwd_meta} of the passes compared on shape/dtype only (random or undefined values); "
      f"entries without float32 run in their first integer/bool dtype")
    for check in DTYPE_CHECKS:
        passed, n, skipped, _ = count(check)
        if n:
            p(f"  {check}: {passed} of {n - skipped} entries run pass")

    for check in ("forward", "gradient", *DTYPE_CHECKS):
        fails = [r for r in by[check].values() if r["status"] == "fail"]
        if not fails:
            continue
        kinds = collections.Counter(r["kind"] for r in fails)
        p(f"\n== {check}: {len(fails)} failing -- " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
        blocked = collections.defaultdict(list)
        for r in fails:
            for m in {_packet(m) for m in r["missing"]}:
                blocked[m].append(r)
        if blocked:
            p(f"-- missing kernels, by entries blocked (sole: the only missing kernel of that many) "
              f"[{len(blocked)} ops]")
            rows = sorted(blocked.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            for name, rs in rows[:top if check != "forward" else max(top, 40)]:
                sole = sum(len({_packet(m) for m in r["missing"]}) == 1 for r in rs)
                ents = ", ".join(sorted(r["entry"] for r in rs))
                p(f"  {len(rs):4d} (sole {sole:3d})  {name:40s} {ents[:110]}")
            if len(rows) > top:
                p(f"  ... {len(rows) - top} more")
        for kind, title in (("numeric", "numeric mismatches"), ("error", "errors"),
                            ("crash", "crashes"), ("timeout", "timeouts")):
            rs = sorted((r for r in fails if r["kind"] == kind), key=lambda r: r["entry"])
            if not rs:
                continue
            p(f"-- {title} [{len(rs)}]")
            if kind == "error":
                groups = collections.defaultdict(list)
                for r in rs:
                    groups[r["reason"][:100]].append(r["entry"])
                for reason, ents in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                    p(f"  {len(ents):4d}  {reason}\n        {', '.join(ents)[:200]}")
            else:
                for r in rs:
                    p(f"  {r['entry']:40s} {r['reason'][:200]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="store_true", help="run the sweep first")
    ap.add_argument("--entries", help="with --sweep: only these entries (merged into the results file)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--results", default=opinfo_sweep.RESULTS)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    if args.sweep:
        entries = args.entries.split(",") if args.entries else None
        results = opinfo_sweep.sweep(opinfo_sweep.all_jobs(entries), args.jobs)
        opinfo_sweep.save(results, args.results, merge=entries is not None)
    if not os.path.exists(args.results):
        raise SystemExit(f"no results at {args.results}: run with --sweep (or tests/tools/update_opinfo_expectations.py)")
    meta, results = load(args.results)
    report(results, meta, args.top)


if __name__ == "__main__":
    main()
