"""Pointwise ops on tpu against PyTorch's CPU results."""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same, to_tpu

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]

# values that exercise the edges: signed zeros, infinities, NaN, halves (rounding)
_SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, -3.0,
            1e-30, -7.25, 100.0]


def floats(dtype=torch.float32, shape=(6, 7), seed=0, scale=2.0, special=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    if special:
        flat = x.view(-1)
        n = min(len(_SPECIAL), flat.numel())
        flat[:n] = torch.tensor(_SPECIAL[:n], dtype=torch.float64)
    return x.to(dtype)


def unit(dtype=torch.float32, shape=(6, 7), seed=0):
    """Values in (0, 1), plus the ends."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64)
    x.view(-1)[:2] = torch.tensor([0.0, 1.0], dtype=torch.float64)
    return x.to(dtype)


def ints(dtype=torch.int64, shape=(6, 7), seed=0, low=-20, high=20, nonzero=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        low = max(low, 0)
    x = torch.randint(low, high, shape, generator=g, dtype=torch.int64)
    if nonzero:
        x[x == 0] = 3
    return x.to(dtype)


def bools(shape=(6, 7), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) > 0.5


def check(fn, *args, exact=False, **tol):
    """fn on CPU and on tpu; skip when PyTorch's CPU kernel lacks the dtype."""
    try:
        cpu = fn(*args)
    except (RuntimeError, NotImplementedError) as e:
        if "not implemented for" in str(e):
            pytest.skip(f"CPU: {e}")
        with pytest.raises(type(e)):  # PyTorch's own error (from the meta kernel)
            fn(*to_tpu(list(args)))
        return None, None
    tpu = fn(*to_tpu(list(args)))
    if tol:
        assert_same(tpu, cpu, **tol)
    else:
        assert_same(tpu, cpu, exact=exact)
    return tpu, cpu


def _tol(dtype, rtol=None, atol=None):
    """Tolerances for transcendental ops: a few ulps in float32; defaults otherwise."""
    if dtype == torch.float32 and rtol is not None:
        return {"rtol": rtol, "atol": atol if atol is not None else 1e-6}
    return {}


# ---- unary float math -------------------------------------------------------------------

UNARY = {
    "sqrt": (torch.sqrt, None), "rsqrt": (torch.rsqrt, None), "exp": (torch.exp, 2e-6),
    "exp2": (torch.exp2, 2e-6), "expm1": (torch.expm1, 2e-6), "log": (torch.log, None),
    "log2": (torch.log2, None), "log10": (torch.log10, None), "log1p": (torch.log1p, None),
    "sin": (torch.sin, 2e-6), "cos": (torch.cos, 2e-6), "tan": (torch.tan, 1e-5),
    "asin": (torch.asin, None), "acos": (torch.acos, None), "atan": (torch.atan, None),
    "sinh": (torch.sinh, 2e-6), "cosh": (torch.cosh, 2e-6), "tanh": (torch.tanh, 2e-6),
    "asinh": (torch.asinh, 2e-6), "acosh": (torch.acosh, 2e-6), "atanh": (torch.atanh, 2e-6),
    "erf": (torch.erf, 2e-6), "erfc": (torch.erfc, 1e-5), "lgamma": (torch.lgamma, 1e-5),
    "digamma": (torch.digamma, 1e-5), "sigmoid": (torch.sigmoid, 2e-6), "sinc": (torch.sinc, 1e-5),
    "deg2rad": (torch.deg2rad, None), "rad2deg": (torch.rad2deg, None),
    "reciprocal": (torch.reciprocal, None), "neg": (torch.neg, None), "abs": (torch.abs, None),
    "sign": (torch.sign, None), "sgn": (torch.sgn, None), "floor": (torch.floor, None),
    "ceil": (torch.ceil, None), "trunc": (torch.trunc, None), "round": (torch.round, None),
    "frac": (torch.frac, None), "square": (torch.square, None), "relu": (torch.relu, None),
    "angle": (torch.angle, None), "i0": (torch.i0, 1e-5),
    "special_i0e": (torch.special.i0e, 1e-5), "special_i1": (torch.special.i1, 1e-5),
    "special_i1e": (torch.special.i1e, 1e-5), "special_entr": (torch.special.entr, 1e-5),
    "special_log_ndtr": (torch.special.log_ndtr, 1e-5),
    "nan_to_num": (torch.nan_to_num, None), "expit": (torch.special.expit, 2e-6),
}
EXACT_UNARY = {"neg", "abs", "sign", "sgn", "floor", "ceil", "trunc", "round", "frac", "square", "relu",
               "nan_to_num", "reciprocal"}  # not sqrt: PyTorch's vectorized sqrt is off by an ulp at times


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(name, dtype):
    fn, rtol = UNARY[name]
    exact = name in EXACT_UNARY and dtype in (torch.float32, torch.float64)
    if exact:
        check(fn, floats(dtype), exact=True)
    elif dtype == torch.float16 and rtol is not None:  # an f16 ulp apart after rounding
        check(fn, floats(dtype), rtol=2e-3, atol=1e-5)
    else:
        check(fn, floats(dtype), **_tol(dtype, rtol))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", ["erfinv", "logit", "special_ndtri"])
def test_unary_unit_interval(name, dtype):
    fn = {"erfinv": lambda x: torch.erfinv(2 * x - 1), "logit": torch.logit,
          "special_ndtri": torch.special.ndtri}[name]
    check(fn, unit(dtype), **_tol(dtype, 1e-5))


def test_logit_eps():
    check(lambda x: torch.logit(x, eps=1e-3), unit(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
@pytest.mark.parametrize("name", ["sqrt", "exp", "log1p", "sin", "sigmoid", "neg", "abs", "sign", "floor",
                                  "round", "trunc", "square", "reciprocal", "deg2rad", "nan_to_num", "relu"])
def test_unary_int(name, dtype):
    x = bools() if dtype == torch.bool else ints(dtype)
    check(UNARY[name][0], x, **_tol(torch.float32, 2e-6))  # bool neg / relu: PyTorch's error


def test_int_overflow_wraps():
    x = torch.tensor([127, -128, 100, 5], dtype=torch.int8)
    check(lambda a: a + a, x, exact=True)
    check(lambda a: a * 3, x, exact=True)
    check(torch.neg, x, exact=True)
    check(torch.abs, x, exact=True)
    check(lambda a: a - 1, torch.tensor([0, 255, 3], dtype=torch.uint8), exact=True)


def test_round_decimals():
    x = floats() * 37
    for d in (0, 1, 2, 3, -1, -2):
        check(lambda a: torch.round(a, decimals=d), x, exact=True)
    check(lambda a: torch.round(a, decimals=1), floats(torch.bfloat16))


def test_round_half_to_even():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 1e8 + 0.5], dtype=torch.float64)
    check(torch.round, x, exact=True)
    check(torch.round, x.float(), exact=True)


def test_signed_zero_results():
    x = torch.tensor([-0.0, 0.0, -0.25, 0.25, -1e-30])
    for fn in (torch.sign, torch.round, torch.trunc, torch.ceil, torch.floor, torch.frac):
        tpu, cpu = check(fn, x, exact=True)
        assert torch.equal(torch.signbit(tpu.cpu()), torch.signbit(cpu)), fn


def test_nan_to_num_args():
    for dtype in FLOATS:
        x = floats(dtype)
        check(lambda a: torch.nan_to_num(a, nan=1.5, posinf=7.0, neginf=-9.0), x, exact=True)
        check(lambda a: torch.nan_to_num(a, posinf=1e10), x, exact=True)


def test_polygamma():
    x = floats(special=False).abs() + 0.1
    check(lambda a: torch.polygamma(0, a), x, rtol=1e-5, atol=1e-5)
    check(lambda a: torch.polygamma(1, a), x, rtol=1e-4, atol=1e-4)
    check(lambda a: torch.polygamma(2, a), x.double(), rtol=1e-6, atol=1e-6)


def test_digamma_poles():
    x = torch.tensor([0.0, -0.0, -1.0, -2.0, 1.0, 0.5])
    check(torch.digamma, x, rtol=1e-6, atol=1e-6)
    check(torch.lgamma, x, rtol=1e-6, atol=1e-6)


def test_classification():
    for dtype in FLOATS:
        x = floats(dtype)
        for fn in (torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf, torch.signbit):
            check(fn, x, exact=True)
    x = torch.tensor([-0.0, math.nan, -math.nan])
    check(torch.signbit, x, exact=True)
    for dtype in INTS + [torch.bool]:
        x = bools() if dtype == torch.bool else ints(dtype)
        for fn in (torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf, torch.signbit):
            check(fn, x, exact=True)


# ---- binary arithmetic --------------------------------------------------------------------

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "true_divide": torch.true_divide, "rsub": torch.rsub,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2), "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "rsub_alpha": lambda a, b: torch.rsub(a, b, alpha=2),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide, "remainder": torch.remainder, "fmod": torch.fmod,
    "pow": torch.pow, "minimum": torch.minimum, "maximum": torch.maximum,
    "fmin": torch.fmin, "fmax": torch.fmax, "hypot": torch.hypot, "atan2": torch.atan2,
    "copysign": torch.copysign, "nextafter": torch.nextafter, "logaddexp": torch.logaddexp,
    "logaddexp2": torch.logaddexp2, "xlogy": torch.xlogy, "xlog1py": torch.special.xlog1py,
    "heaviside": torch.heaviside,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "clamp_min": torch.clamp_min, "clamp_max": torch.clamp_max,
}
TRANSCENDENTAL = {"pow", "atan2", "logaddexp", "logaddexp2", "xlogy", "xlog1py", "hypot"}
# exact in half dtypes too: one rounding of the float result (trunc division rounds
# the quotient to the half dtype before truncating, as the CPU does)
HALF_EXACT = {"add", "sub", "mul", "div", "div_trunc", "minimum", "maximum"}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float(name, dtype):
    a, b = floats(dtype, seed=1), floats(dtype, seed=2, special=False)
    b.view(-1)[-len(_SPECIAL):] = torch.tensor(_SPECIAL).to(dtype)  # specials meet both randoms and specials
    fn = BINARY[name]
    if name in TRANSCENDENTAL:
        check(fn, a, b, **_tol(dtype, 1e-5, 1e-5))
    else:
        check(fn, a, b, exact=dtype in (torch.float32, torch.float64) or name in HALF_EXACT)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_trunc_division_rounds_the_quotient_first(dtype):
    # -39.5 / -0.574 = 68.79, which rounds to 69 in bfloat16 before truncation
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(4096, generator=g) * 20).to(dtype), torch.randn(4096, generator=g).to(dtype)
    check(lambda a, b: torch.div(a, b, rounding_mode="trunc"), a, b, exact=True)


INT_BINARY = ["add", "sub", "mul", "div", "rsub", "add_alpha", "sub_alpha", "div_trunc", "div_floor",
              "floor_divide", "remainder", "fmod", "pow", "minimum", "maximum", "fmin", "fmax",
              "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "atan2",
              "copysign", "xlogy", "clamp_min", "clamp_max", "heaviside"]


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("name", INT_BINARY)
def test_binary_int(name, dtype):
    a = ints(dtype, seed=1)
    b = ints(dtype, seed=2, nonzero=True, low=-5 if name == "pow" else -20, high=6 if name == "pow" else 20)
    check(BINARY[name], a, b, **_tol(torch.float32, 2e-6))


@pytest.mark.parametrize("name", ["add", "mul", "maximum", "minimum", "eq", "lt", "logical_xor",
                                  "fmax", "pow", "heaviside"])
def test_binary_bool(name):
    check(BINARY[name], bools(seed=1), bools(seed=2), exact=True)


def test_int_pow_large_and_negative():
    base = torch.tensor([2, -2, 3, 1, -1, 0, 7, -1, 1, 5], dtype=torch.int64)
    exp = torch.tensor([62, 63, 40, -3, -3, 5, 30, -4, 0, -1], dtype=torch.int64)
    check(torch.pow, base, exp, exact=True)
    check(torch.pow, base.int(), exp.int().clamp(0), exact=True)


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 0.5, -0.5, -1, -2, 1.7, -3.3, 4, True])
def test_pow_scalar_exponent(exponent):
    for dtype in FLOATS:
        x = floats(dtype)
        exact = dtype == torch.float32 and exponent in (0, 1, 2, 3, -1, -2, 4, True)
        tol = _tol(dtype, 1e-5, 1e-5) if dtype != torch.float16 else {"rtol": 2e-3, "atol": 1e-5}
        check(lambda a: torch.pow(a, exponent), x, **({"exact": True} if exact else tol))
    if isinstance(exponent, int) and exponent >= 0:
        check(lambda a: a ** exponent, ints(), exact=True)


def test_pow_int_negative_scalar_raises():
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.pow(torch.arange(3, device="tpu"), -1)


def test_pow_scalar_base():
    check(lambda e: torch.pow(2.0, e), floats(special=False), rtol=1e-5, atol=1e-6)
    check(lambda e: torch.pow(2, e), ints(low=0, high=30), exact=True)
    check(lambda e: torch.pow(1, e), floats(), exact=True)
    check(lambda e: 3 ** e, bools(), exact=True)


def test_int_division_semantics():
    a = torch.tensor([7, -7, 7, -7, 0, 5, -9, 9], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3, -5, 4, -4], dtype=torch.int64)
    for fn in (torch.floor_divide, torch.remainder, torch.fmod, torch.div,
               lambda x, y: torch.div(x, y, rounding_mode="trunc"),
               lambda x, y: torch.div(x, y, rounding_mode="floor")):
        check(fn, a, b, exact=True)
    check(torch.floor_divide, a.to(torch.int8), b.to(torch.int8), exact=True)


def test_float_division_semantics():
    a = torch.tensor([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1.0, -1.0, 0.0, math.inf, 5.0, 1e30])
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 0.0, 0.0, 2.0, math.inf, 1e-30])
    for fn in (torch.floor_divide, torch.remainder, torch.fmod,
               lambda x, y: torch.div(x, y, rounding_mode="trunc"),
               lambda x, y: torch.div(x, y, rounding_mode="floor")):
        tpu, cpu = check(fn, a, b, exact=True)
        assert torch.equal(torch.signbit(tpu.cpu()), torch.signbit(cpu))


@pytest.mark.parametrize("fn", [torch.add, torch.mul, torch.div, torch.remainder, torch.fmod, torch.pow,
                                torch.floor_divide, torch.eq, torch.lt, torch.copysign, torch.xlogy,
                                torch.sub, torch.clamp_min],
                         ids=lambda f: f.__name__)
def test_binary_python_scalars(fn):
    # a Python scalar on either side (where the op allows) in each dtype category
    for x in (floats(), floats(torch.float16), ints(nonzero=True), ints(torch.uint8, nonzero=True)):
        for s in (2, 2.5, -3, True):
            if isinstance(s, bool) and fn in (torch.remainder, torch.fmod, torch.floor_divide):
                continue
            if isinstance(s, bool) and fn is torch.sub:
                continue
            check(lambda a: fn(a, s), x, **_tol(x.dtype, 1e-5, 1e-5))


@pytest.mark.parametrize("fn", [torch.add, torch.sub, torch.mul, torch.div, torch.remainder, torch.pow,
                                torch.maximum, torch.gt, torch.where, torch.bitwise_and, torch.hypot,
                                torch.atan2],
                         ids=lambda f: f.__name__)
def test_cpu_scalar_tensor_operand(fn):
    # a 0-dim CPU tensor mixes with tpu tensors (it is a wrapped number)
    tensor_dtypes = [torch.float32, torch.float16] if fn is not torch.bitwise_and else [torch.int32, torch.uint8]
    scalar_values = [torch.tensor(2.5), torch.tensor(3), torch.tensor(-2, dtype=torch.int8)]
    if fn is torch.bitwise_and:
        scalar_values = [torch.tensor(6), torch.tensor(5, dtype=torch.int16)]
    for dtype in tensor_dtypes:
        x = floats(dtype) if dtype.is_floating_point else ints(dtype)
        for s in scalar_values:
            if fn is torch.where:
                cpu = torch.where(x > 0, x, s)
                tpu = torch.where(x.to("tpu") > 0, x.to("tpu"), s)
            else:
                cpu = fn(x, s)
                tpu = fn(x.to("tpu"), s)
                assert_same(fn(s, x.to("tpu")), fn(s, x), rtol=1e-5, atol=1e-5)
            assert_same(tpu, cpu, rtol=1e-5, atol=1e-5)


def test_cpu_scalar_tensor_in_place():
    x = floats()
    t = x.to("tpu")
    t.add_(torch.tensor(1.5))
    t.mul_(torch.tensor(2, dtype=torch.int64))
    assert_same(t, x.add(torch.tensor(1.5)).mul(torch.tensor(2)), exact=True)


def test_broadcasting():
    a, b, c = floats(shape=(3, 1, 5)), floats(shape=(4, 1), seed=3), floats(shape=(5,), seed=4)
    for fn in (torch.add, torch.mul, torch.sub, torch.maximum, torch.eq, torch.atan2, torch.fmod):
        check(fn, a, b, rtol=1e-6, atol=1e-6)
        check(fn, b, c, rtol=1e-6, atol=1e-6)
    check(torch.where, a > 0, b, c, exact=True)
    check(lambda x, y, z: torch.addcmul(x, y, z, value=0.5), a, b, c, rtol=1e-6, atol=1e-6)
    check(lambda x, y, z: torch.lerp(x, y, z), a, b, unit(shape=(5,)), rtol=1e-6, atol=1e-6)
    check(torch.add, floats(shape=()), floats(shape=(2, 3)), exact=True)


def test_mixed_dtypes():
    pairs = [(torch.float32, torch.float64), (torch.float16, torch.bfloat16), (torch.int32, torch.float16),
             (torch.uint8, torch.int8), (torch.bool, torch.int32), (torch.int64, torch.float32),
             (torch.bfloat16, torch.float32)]
    for da, db in pairs:
        a = bools() if da == torch.bool else (floats(da) if da.is_floating_point else ints(da, nonzero=True))
        b = bools(seed=5) if db == torch.bool else (floats(db, seed=5) if db.is_floating_point
                                                     else ints(db, seed=5, nonzero=True))
        for fn in (torch.add, torch.mul, torch.div, torch.maximum, torch.lt, torch.eq):
            check(fn, a, b, rtol=1e-3, atol=1e-3)


# ---- in-place, out=, non-contiguous ----------------------------------------------------------

def test_in_place():
    x, y = floats(), floats(seed=1)
    for name, args in [("add_", (y,)), ("sub_", (y,)), ("mul_", (2.5,)), ("div_", (y,)), ("pow_", (2,)),
                       ("clamp_", (-1.0, 1.0)), ("sigmoid_", ()), ("exp_", ()), ("neg_", ()),
                       ("floor_divide_", (y,)), ("lerp_", (y, 0.3)), ("addcmul_", (y, y)),
                       ("relu_", ()), ("abs_", ()), ("remainder_", (1.5,)), ("masked_fill_", (x > 0, 7.0))]:
        cpu = x.clone()
        tpu = x.to("tpu")
        r_cpu = getattr(cpu, name)(*args)
        r_tpu = getattr(tpu, name)(*to_tpu(list(args)))
        assert r_tpu is tpu, name
        assert_same(tpu, cpu, exact=name not in ("sigmoid_", "exp_", "div_"))
        assert_same(r_tpu, r_cpu, rtol=2e-6, atol=1e-6)


def test_in_place_int_and_bool():
    x = ints()
    for name, args in [("add_", (3,)), ("mul_", (-2,)), ("bitwise_and_", (6,)), ("__ilshift__", (2,)),
                       ("__irshift__", (1,)), ("remainder_", (7,)), ("clamp_", (-5, 5))]:
        cpu, tpu = x.clone(), x.to("tpu")
        getattr(cpu, name)(*args)
        getattr(tpu, name)(*args)
        assert_same(tpu, cpu, exact=True)
    b = bools()
    cpu, tpu = b.clone(), b.to("tpu")
    cpu.logical_not_()
    tpu.logical_not_()
    assert_same(tpu, cpu, exact=True)


def test_in_place_dtype_rules():
    # an int tensor cannot hold a float result in place: PyTorch's error
    with pytest.raises(RuntimeError, match="can't be cast"):
        ints().to("tpu").div_(2)
    t = floats(torch.bfloat16).to("tpu")
    t.mul_(floats(torch.float32).to("tpu"))  # float32 math, bfloat16 result
    assert t.dtype == torch.bfloat16
    assert_same(t, floats(torch.bfloat16).mul_(floats(torch.float32)))


def test_out():
    x, y = floats(), floats(seed=1)
    for fn, args in [(torch.add, (x, y)), (torch.mul, (x, 3)), (torch.sqrt, (x,)), (torch.eq, (x, y)),
                     (torch.clamp, (x, -1, 1)), (torch.pow, (x, 2)), (torch.atan2, (x, y)),
                     (torch.where, (x > 0, x, y)), (torch.logical_and, (x, y)), (torch.sigmoid, (x,))]:
        cpu = fn(*args)
        out = torch.empty(0, dtype=cpu.dtype, device="tpu")  # resized by the op
        r = fn(*to_tpu(list(args)), out=out)
        assert r is out
        assert_same(out, cpu, rtol=2e-6, atol=1e-6)
    out = torch.empty(6, 7, dtype=torch.float64, device="tpu")  # out= casts the result to its dtype
    torch.add(x.to("tpu"), y.to("tpu"), out=out)
    assert_same(out, torch.add(x, y).double(), exact=True)


def test_out_non_contiguous():
    x, y = floats(), floats(seed=1)
    out_cpu = torch.zeros(7, 6).t()
    out_tpu = torch.zeros(7, 6, device="tpu").t()
    torch.mul(x, y, out=out_cpu)
    torch.mul(x.to("tpu"), y.to("tpu"), out=out_tpu)
    assert_same(out_tpu, out_cpu, exact=True)


def test_non_contiguous_inputs():
    x, y = floats(shape=(7, 6)), floats(shape=(6, 7), seed=1)
    for fn in (torch.add, torch.mul, torch.maximum, torch.remainder, torch.lt, torch.atan2):
        check(lambda a, b: fn(a.t(), b), x, y, rtol=1e-6, atol=1e-6)
        check(lambda a, b: fn(a[::2, 1:], b[1:5:2, ::2][:, :3].t().t()), x, y.t(), rtol=1e-6, atol=1e-6)
    for fn in (torch.exp, torch.neg, torch.sigmoid, torch.floor, F.gelu, torch.isnan):
        check(lambda a: fn(a.t()[1:, ::3]), x, rtol=2e-6, atol=1e-6)
    # a transposed input gives a transposed (channels-like) result in PyTorch
    tpu, cpu = check(lambda a: torch.exp(a.t()), x, rtol=2e-6, atol=1e-6)
    assert tpu.stride() == cpu.stride()


def test_in_place_on_view():
    x, y = floats(), floats(shape=(3,), seed=1)
    cpu, tpu = x.clone(), x.to("tpu")
    cpu[1:4, 2].add_(y)
    tpu[1:4, 2].add_(y.to("tpu"))
    cpu.t()[::2].mul_(2)
    tpu.t()[::2].mul_(2)
    assert_same(tpu, cpu, exact=True)


# ---- ternary, clamp, selection ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_ternary(dtype):
    a, b, c = floats(dtype, special=False), floats(dtype, seed=1, special=False), floats(dtype, seed=2)
    c = c.abs() + 0.5
    w = unit(dtype)
    check(lambda x, y, z: torch.addcmul(x, y, z, value=-0.5), a, b, c, rtol=2e-6, atol=1e-6)
    check(lambda x, y, z: torch.addcdiv(x, y, z, value=2), a, b, c, rtol=2e-6, atol=1e-6)
    check(lambda x, y: torch.lerp(x, y, 0.3), a, b, rtol=2e-6, atol=1e-6)
    check(lambda x, y: torch.lerp(x, y, 0.7), a, b, rtol=2e-6, atol=1e-6)
    check(torch.lerp, a, b, w, rtol=2e-6, atol=1e-6)


def test_addcmul_int():
    check(lambda x, y, z: torch.addcmul(x, y, z, value=3), ints(), ints(seed=1), ints(seed=2), exact=True)


def test_clamp():
    x = floats()
    for lo, hi in [(-1, 1), (None, 0.5), (-0.5, None), (2, -2), (0, 0)]:
        check(lambda a: torch.clamp(a, lo, hi), x, exact=True)
    lo, hi = floats(seed=1), floats(seed=2)
    check(torch.clamp, x, lo, hi, exact=True)
    check(lambda a, b: torch.clamp(a, min=b), x, lo, exact=True)
    check(lambda a, b: torch.clamp(a, max=b), x, hi, exact=True)
    check(torch.clamp_min, x, lo, exact=True)
    check(lambda a: torch.clamp(a, -3, 3), ints(), exact=True)
    check(lambda a: torch.clamp(a, 2.5), ints(), exact=True)  # promotes to float
    check(lambda a: torch.clamp(a, -1, 1), floats(torch.bfloat16), exact=True)
    check(lambda a: a.clip(-1, 1), floats(torch.float16), exact=True)


def test_where_and_masked_fill():
    x, y = floats(), floats(seed=1)
    m = bools()
    check(torch.where, m, x, y, exact=True)
    check(torch.where, m, ints(), y, exact=True)             # promotes
    check(lambda c, a: torch.where(c, a, 0.0), m, x, exact=True)  # Scalar overloads decompose
    check(lambda c, a: torch.where(c, 1, a), m, ints(), exact=True)
    check(torch.where, m, floats(torch.float16), floats(torch.bfloat16), exact=True)
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.bool):
        t = bools(seed=3) if dtype == torch.bool else floats(dtype) if dtype.is_floating_point else ints(dtype)
        check(lambda a, mm: a.masked_fill(mm, 3), t, m, exact=True)
        check(lambda a, mm: a.masked_fill(mm, torch.tensor(1)), t, m, exact=True)      # CPU 0-dim value
        check(lambda a, mm, v: a.masked_fill(mm, v), t, m, torch.tensor(0), exact=True)  # tpu 0-dim value
    check(lambda a, mm: a.masked_fill(mm, -math.inf), x, bools(shape=(7,)), exact=True)  # broadcast mask


# ---- logic and bits ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS + [torch.int16, torch.bool], ids=str)
def test_bitwise(dtype):
    a = bools() if dtype == torch.bool else ints(dtype, low=-100, high=100)
    b = bools(seed=1) if dtype == torch.bool else ints(dtype, seed=1, low=-100, high=100)
    for fn in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        check(fn, a, b, exact=True)
        check(lambda x: fn(x, 5 if dtype != torch.bool else True), a, exact=True)
    check(torch.bitwise_not, a, exact=True)
    check(torch.logical_not, a, exact=True)
    check(lambda x, y: x & y, a, b, exact=True)
    check(lambda x, y: x | y, a, b, exact=True)
    check(lambda x, y: x ^ y, a, b, exact=True)
    check(lambda x: ~x, a, exact=True)


@pytest.mark.parametrize("dtype", INTS + [torch.int16], ids=str)
def test_shifts(dtype):
    bits = torch.iinfo(dtype).bits
    a = ints(dtype, low=-100, high=100)
    b = torch.randint(0, bits + 3, a.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    for fn in (torch.bitwise_left_shift, torch.bitwise_right_shift, lambda x, y: x << y, lambda x, y: x >> y):
        check(fn, a, b, exact=True)
        check(lambda x: fn(x, 3), a, exact=True)
    check(lambda y: torch.bitwise_left_shift(7, y), b, exact=True)
    if dtype != torch.uint8:  # negative shifts
        check(lambda x: torch.bitwise_right_shift(x, -1), a, exact=True)
        check(lambda x: torch.bitwise_left_shift(x, -1), a, exact=True)


def test_logical_mixed_dtypes():
    x, y = floats(), ints(seed=1)
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor):
        check(fn, x, y, exact=True)
        check(fn, x, bools(), exact=True)
    check(torch.logical_not, x, exact=True)
    check(torch.logical_not, floats(torch.bfloat16), exact=True)


def test_comparisons_scalar():
    x = floats()
    for fn in (torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge):
        check(lambda a: fn(a, 0.5), x, exact=True)
        check(lambda a: fn(a, 3), ints(), exact=True)
        check(lambda a: fn(a, 2.5), ints(), exact=True)   # compares in float
        check(lambda a: fn(a, -1), ints(torch.uint8), exact=True)
        check(lambda a: fn(a, 1.0 / 3), floats(torch.float16), exact=True)


# ---- activations --------------------------------------------------------------------------

ACTIVATIONS = {
    "relu": F.relu, "relu6": F.relu6, "hardtanh": lambda x: F.hardtanh(x, -0.5, 2.0),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1), "elu": lambda x: F.elu(x, 1.3),
    "celu": lambda x: F.celu(x, 0.7), "selu": F.selu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "mish": F.mish,
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2, threshold=3), "threshold": lambda x: F.threshold(x, 0.3, -2),
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "logsigmoid": F.logsigmoid,
    "softshrink": lambda x: F.softshrink(x, 0.7), "hardshrink": lambda x: F.hardshrink(x, 0.7),
    "glu": F.glu, "glu0": lambda x: F.glu(x, 0),
    "prelu": lambda x: F.prelu(x, torch.tensor([0.25], dtype=x.dtype)),
    "prelu_channels": lambda x: F.prelu(x, torch.linspace(-0.5, 0.5, x.shape[1], dtype=x.dtype)),
    "softsign": F.softsign, "tanhshrink": F.tanhshrink,
    "logit": lambda x: torch.logit(torch.sigmoid(x), eps=1e-6),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_forward(name, dtype):
    fn = ACTIVATIONS[name]
    x = floats(dtype, shape=(6, 8))
    if name.startswith("prelu"):  # the weight travels with the input
        fn_t = lambda a: fn(a) if a.device.type == "cpu" else _prelu_tpu(name, a)  # noqa: E731
        assert_same(fn_t(x.to("tpu")), fn(x), **_tol(dtype, 2e-6))
        return
    if name.startswith("gelu"):
        x[x == math.inf] = 5  # PyTorch's vectorized gelu(+inf) is NaN (a quirk we do not copy)
    check(fn, x, **_tol(dtype, 2e-6, 1e-6))


def _prelu_tpu(name, a):
    if name == "prelu":
        return F.prelu(a, torch.tensor([0.25], dtype=a.dtype, device="tpu"))
    return F.prelu(a, torch.linspace(-0.5, 0.5, a.shape[1], dtype=a.dtype).to("tpu"))


GRAD_ACTIVATIONS = ["relu", "relu6", "hardtanh", "leaky_relu", "elu", "celu", "selu", "gelu", "gelu_tanh",
                    "silu", "mish", "hardsigmoid", "hardswish", "softplus", "softplus_beta", "threshold",
                    "sigmoid", "tanh", "logsigmoid", "softshrink", "hardshrink", "glu", "glu0", "logit"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", GRAD_ACTIVATIONS)
def test_activation_backward(name, dtype):
    """Autograd on tpu reaches the *_backward kernels; compare the gradients."""
    fn = ACTIVATIONS[name]
    x = floats(dtype, shape=(6, 8), special=False)
    x.view(-1)[:8] = torch.tensor([0.0, -3.0, 3.0, 1.0, -1.0, 0.7, -0.7, 20.0]).to(dtype)  # kinks
    g = floats(dtype, shape=fn(x).shape, seed=7, special=False)

    def grad(inp, g_out):
        inp = inp.detach().requires_grad_(True)
        fn(inp).backward(g_out)
        return inp.grad

    assert_same(grad(x.to("tpu"), g.to("tpu")), grad(x, g), **_tol(dtype, 1e-5, 1e-5))


def test_elu_backward_from_result():
    # inplace elu saves its result: the backward gets is_result=True
    x = floats(shape=(6, 8), special=False)
    g = floats(shape=(6, 8), seed=3, special=False)
    for dtype in (torch.float32, torch.float64):
        xa, ga = x.to(dtype), g.to(dtype)
        cpu = torch.ops.aten.elu_backward(ga, 1.3, 1.0, 1.0, True, F.elu(xa, 1.3))
        tpu = torch.ops.aten.elu_backward(ga.to("tpu"), 1.3, 1.0, 1.0, True, F.elu(xa, 1.3).to("tpu"))
        assert_same(tpu, cpu, **_tol(dtype, 2e-6))
    cpu = torch.ops.aten.elu_backward(g, 1.0, 1.0507, 1.2, False, x)
    tpu = torch.ops.aten.elu_backward(g.to("tpu"), 1.0, 1.0507, 1.2, False, x.to("tpu"))
    assert_same(tpu, cpu, rtol=2e-6, atol=1e-6)


def test_backward_ops_direct():
    x, g = floats(special=False), floats(seed=1, special=False)
    u = unit()
    calls = [
        (torch.ops.aten.threshold_backward, (g, x, 0.2)),
        (torch.ops.aten.hardtanh_backward, (g, x, -1.0, 1.0)),
        (torch.ops.aten.leaky_relu_backward, (g, x, 0.2, False)),
        (torch.ops.aten.gelu_backward, (g, x)),
        (torch.ops.aten.silu_backward, (g, x)),
        (torch.ops.aten.mish_backward, (g, x)),
        (torch.ops.aten.hardsigmoid_backward, (g, x)),
        (torch.ops.aten.hardswish_backward, (g, x)),
        (torch.ops.aten.softplus_backward, (g, x, 1.0, 20.0)),
        (torch.ops.aten.sigmoid_backward, (g, torch.sigmoid(x))),
        (torch.ops.aten.tanh_backward, (g, torch.tanh(x))),
        (torch.ops.aten.logit_backward, (g, u * 1.2 - 0.1)),
        (torch.ops.aten.logit_backward, (g, u, 0.05)),
        (torch.ops.aten.softshrink_backward, (g, x, 0.5)),
        (torch.ops.aten.hardshrink_backward, (g, x, 0.5)),
        (torch.ops.aten.glu_backward, (g[:, :3], x[:, :6], 1)),
        (torch.ops.aten._prelu_kernel_backward, (g, x, torch.full_like(x, 0.25))),
        (torch.ops.aten.log_sigmoid_backward, (g, x, torch.ops.aten.log_sigmoid_forward(x)[1])),
    ]
    for op, args in calls:
        check(op, *args, rtol=1e-5, atol=1e-6)


def test_activation_in_place():
    x = floats()
    for fn in (lambda a: F.relu(a, inplace=True), lambda a: F.leaky_relu(a, 0.2, inplace=True),
               lambda a: F.elu(a, inplace=True), lambda a: F.hardtanh(a, inplace=True),
               lambda a: F.silu(a, inplace=True), lambda a: F.hardswish(a, inplace=True),
               lambda a: F.threshold(a, 0.1, 20, inplace=True), lambda a: a.sigmoid_()):
        cpu, tpu = x.clone(), x.to("tpu")
        fn(cpu)
        fn(tpu)
        assert_same(tpu, cpu, rtol=2e-6, atol=1e-6)


def test_training_step_style_chain():
    """A small MLP-ish forward/backward built from these ops only."""
    x = floats(shape=(8, 6), special=False)
    w = floats(shape=(6,), seed=1, special=False)

    def step(a, b):
        a = a.detach().requires_grad_(True)
        y = F.gelu(a * b + 1).sigmoid() * F.silu(a) - torch.tanh(a).pow(2) + F.softplus(a).clamp(max=1.5)
        y.sum().backward() if False else y.backward(torch.ones_like(y))
        return y, a.grad

    assert_same(step(x.to("tpu"), w.to("tpu")), step(x, w), rtol=1e-5, atol=1e-5)


def test_scalar_first_overloads():
    x = floats(special=False).abs() + 0.5
    check(lambda a: torch.remainder(5, a), x, exact=True)
    check(lambda a: torch.remainder(-7, a), ints(nonzero=True), exact=True)
    check(lambda a: torch.xlogy(2, a), x, rtol=1e-6, atol=1e-6)
    check(lambda a: torch.special.xlog1py(3.0, a), x, rtol=1e-6, atol=1e-6)
    check(lambda a: torch.float_power(a, 2.5), x, rtol=1e-12, atol=0)
    check(lambda a: torch.bitwise_or(12, a), ints(), exact=True)


def test_ops_run_on_tpu_kernels(monkeypatch):
    """With TORCH_TPU_STRICT=1 a missing kernel raises instead of running on the CPU."""
    monkeypatch.setenv("TORCH_TPU_STRICT", "1")
    x = floats().to("tpu")
    i = ints(nonzero=True).to("tpu")
    for fn in (torch.exp, torch.sigmoid, torch.isfinite, torch.isnan, F.gelu, F.silu, F.mish, F.elu, F.selu,
               F.celu, F.hardswish, F.hardsigmoid, F.softplus, F.relu6, F.logsigmoid, torch.nan_to_num,
               torch.signbit, torch.frac, torch.sgn, torch.logical_not, lambda a: a.clip(-1, 1),
               lambda a: torch.where(a > 0, a, 0.0), lambda a: a.masked_fill(a > 0, 1.0),
               lambda a: torch.heaviside(a, a), lambda a: torch.nextafter(a, a + 1),
               lambda a: torch.lerp(a, a, 0.5), lambda a: torch.addcdiv(a, a, a.abs() + 1)):
        fn(x)
    for fn in (lambda a: a // 3, lambda a: a % 3, lambda a: a << 2, lambda a: a >> 1, lambda a: ~a,
               lambda a: a ** 2, torch.square, lambda a: torch.div(a, 2, rounding_mode="floor")):
        fn(i)


_COMPLEX_PARTS = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 3e38]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("name", ["add", "sub", "add alpha", "rsub", "add real", "sub real", "add_"])
def test_complex_add_and_sub_bit_for_bit_with_infinities_and_signed_zeros(name, dtype):
    # PyTorch computes a + alpha * b with C++'s complex product even for
    # alpha 1 (an infinite part makes the other part NaN) and subtracts as
    # add with -alpha (the sign of a zero part)
    a = torch.tensor([complex(x, y) for x in _COMPLEX_PARTS for y in _COMPLEX_PARTS], dtype=dtype)
    b = a.flip(0)
    real = torch.tensor([x for x in _COMPLEX_PARTS for _ in _COMPLEX_PARTS], dtype=torch.float32)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
          "add alpha": lambda x, y: torch.add(x, y, alpha=0.5 - 1j), "rsub": torch.rsub,
          "add real": lambda x, y: x + real.to(x.device), "sub real": lambda x, y: x - real.to(x.device),
          "add_": lambda x, y: x.clone().add_(y, alpha=2)}[name]
    cpu = torch.view_as_real(fn(a, b))
    tpu = torch.view_as_real(fn(a.to("tpu"), b.to("tpu")).cpu())
    assert torch.equal(cpu.isnan(), tpu.isnan())
    numbers = ~cpu.isnan()
    assert torch.equal(cpu[numbers], tpu[numbers]) and torch.equal(cpu[numbers].signbit(), tpu[numbers].signbit())


def _same_bits_where(cpu, tpu, where):
    cpu, tpu = torch.view_as_real(cpu)[where], torch.view_as_real(tpu)[where]
    assert torch.equal(cpu.isnan(), tpu.isnan())
    numbers = ~cpu.isnan()
    assert torch.equal(cpu[numbers], tpu[numbers]) and torch.equal(cpu[numbers].signbit(), tpu[numbers].signbit())


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_pow_at_zeros_infinities_and_nans_as_the_cpu(dtype):
    # the CPU's std::pow is C's cpow, cexp(y * clog(x)) with C99's special values
    # (0 ** 0 is NaN there, XLA's pow says 1); finite values stay within tolerance,
    # large ones too (XLA's pow overflowed to NaN from |x| ~ 1e19 in complex64)
    parts = [0.0, -0.0, 1.0, -2.5, 0.5, math.inf, -math.inf, math.nan]
    v = torch.tensor([complex(x, y) for x in parts for y in parts], dtype=dtype)
    base, exp = torch.meshgrid(v, v, indexing="ij")
    special = ~(torch.isfinite(base) & torch.isfinite(exp)) | (base == 0)
    cpu, tpu = torch.pow(base, exp), torch.pow(base.to("tpu"), exp.to("tpu")).cpu()
    _same_bits_where(cpu, tpu, special)
    torch.testing.assert_close(tpu[~special], cpu[~special])
    big = torch.tensor([complex(-2.2e19, -1.5e20), complex(-8e19, -8.1e19)], dtype=dtype)
    exp = torch.tensor([complex(-3.5e19, 2.5e19), complex(9.1e19, 6.8e19)], dtype=dtype)
    _same_bits_where(torch.pow(big, exp), torch.pow(big.to("tpu"), exp.to("tpu")).cpu(),
                     torch.tensor([False, True]))  # (0j and -inf+infj; the first's zero signs follow C's sin)
    assert torch.pow(big.to("tpu"), exp.to("tpu")).cpu()[0] == 0
    special_v = ~torch.isfinite(v) | (v == 0)
    for scalar in (1 + 0j, 2j, -1.5 + 0.5j):  # a Python base: ATen's 1 ** anything is 1
        _same_bits_where(torch.pow(scalar, v), torch.pow(scalar, v.to("tpu")).cpu(), special_v)
    # a complex exponent with no imaginary part takes the CPU's shortcuts (x * x, 1 / x...)
    for scalar in (2 + 0j, 3 + 0j, -2 + 0j, -1 + 0j, -1.0, 1.5, 2.5 + 1j):
        _same_bits_where(torch.pow(v, scalar), torch.pow(v.to("tpu"), scalar).cpu(), special_v)
    # 1 / x by c10's formula: XLA must not fold its constant numerator (the sign of -0)
    _same_bits_where(torch.reciprocal(v), torch.reciprocal(v.to("tpu")).cpu(), torch.ones_like(special_v))


@pytest.mark.parametrize("fn", [torch.sigmoid, torch.tanh, lambda t: torch._foreach_sigmoid([t])[0],
                                lambda t: torch._foreach_tanh([t])[0]],
                         ids=["sigmoid", "tanh", "foreach_sigmoid", "foreach_tanh"])
def test_complex_sigmoid_and_tanh_backward_conjugate_the_derivative(fn):
    # ATen's sigmoid_backward/tanh_backward multiply by the derivative's
    # conjugate for complex tensors (PyTorch's test_foreach autodiff found
    # the real part's sign wrong on tpu)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, dtype=torch.complex128, generator=gen)
    g = torch.randn(5, dtype=torch.complex128, generator=gen)
    grads = []
    for device in ("cpu", "tpu"):
        leaf = x.clone().requires_grad_()
        fn(leaf.to(device)).backward(g.to(device))
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])
