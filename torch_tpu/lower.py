"""``python -m torch_tpu.lower``: the TPU lowering check from the command line.

    python -m torch_tpu.lower train.py:make_step --chips v5e,v6e
    python -m torch_tpu.lower my_pkg.checks:make_step
    python -m torch_tpu.lower --kernels            # the built-in Pallas kernels

``make_step()`` returns ``(fn, example_inputs)`` or ``(fn, example_inputs,
example_kwargs)``, with tpu tensors; ``fn`` is checked as
``torch.tpu.lowering_check(fn, *example_inputs, **example_kwargs)`` would.
Exits 0 when every graph lowered for every chip, 1 otherwise.
"""
import argparse
import importlib
import importlib.util
import os
import sys


def _load(spec: str):
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise SystemExit(f"torch_tpu.lower: expected FILE.py:FUNCTION or MODULE:FUNCTION, got {spec!r}")
    if where.endswith(".py") or os.sep in where:
        module_spec = importlib.util.spec_from_file_location("_lowering_target", where)
        if module_spec is None or not os.path.exists(where):
            raise SystemExit(f"torch_tpu.lower: no such file {where!r}")
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"torch_tpu.lower: {where} has no {attr!r}") from None


def _check_target(spec, chips, execute, stablehlo_dir):
    import torch_tpu  # noqa: F401  (registers the device)
    from .lowering_check import lowering_check
    made = _load(spec)()
    fn, args, kwargs = (tuple(made) + ({},))[:3]
    return [lowering_check(fn, *args, chips=chips, execute=execute,
                           keep_stablehlo=bool(stablehlo_dir), **kwargs)]


def _check_kernels(chips, full):
    from .lowering_check import Report, lower_jax, kernels
    cases = kernels.all_cases() if full else kernels.representative_cases()
    return [Report(chips, [g for c in cases for g in lower_jax(c.fn, *c.specs, chips=chips, name=c.name).graphs])]


def _write_stablehlo(reports, directory):
    os.makedirs(directory, exist_ok=True)
    for report in reports:
        for g in report.graphs:
            for chip, text in g.stablehlo.items():
                path = os.path.join(directory, f"{g.graph.replace(' ', '_')}.{chip}.mlir")
                with open(path, "w") as f:
                    f.write(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_tpu.lower",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("target", nargs="?", help="FILE.py:FUNCTION or MODULE:FUNCTION returning (fn, inputs)")
    parser.add_argument("--chips", default=None, help="comma-separated TPU generations (default v4,v5e,v5p,v6e)")
    parser.add_argument("--kernels", action="store_true", help="check the built-in Pallas kernels")
    parser.add_argument("--all", action="store_true", help="with --kernels: every option combination")
    parser.add_argument("--no-run", action="store_true",
                        help="lower without running the graphs here (faster; values become zeros)")
    parser.add_argument("--stablehlo", metavar="DIR", help="write each lowered program's StableHLO to DIR")
    parser.add_argument("--markdown", action="store_true", help="print the report as a markdown table")
    args = parser.parse_args(argv)
    if bool(args.target) == args.kernels:
        parser.error("give either a TARGET or --kernels")
    from .lowering_check import chips as chip_table
    chips = tuple(c.strip() for c in args.chips.split(",")) if args.chips else chip_table.DEFAULT_CHIPS
    try:
        chips = tuple(chip_table.chip(c).name for c in chips)
    except ValueError as e:
        parser.error(str(e))
    if args.kernels:
        reports = _check_kernels(chips, args.all)
    else:
        reports = _check_target(args.target, chips, not args.no_run, args.stablehlo)
    if args.stablehlo:
        _write_stablehlo(reports, args.stablehlo)
    for r in reports:
        print(r.markdown() if args.markdown else r)
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
