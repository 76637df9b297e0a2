"""Matrix factorizations and the solvers built on them (LU, Cholesky, QR,
eigh, SVD, eig, triangular solves, matrix_exp).

The aten overloads here are the ones PyTorch's composite ``torch.linalg``
functions bottom out in; everything above them (``linalg.solve``, ``pinv``,
``matrix_norm``, the backward formulas) is ATen composite code that calls them.
Results follow LAPACK's conventions as PyTorch's CPU kernels do: packed LU
with 1-based int32 pivots, ``info`` as LAPACK reports it, Householder
reflectors as ``geqrf`` stores them.  On the CPU platform JAX calls the same
LAPACK routines (getrf, potrf, geqrf, syevd, gesdd, geev), so factors and
their signs agree with PyTorch's.

``linalg_matrix_exp`` uses JAX's Pade expm, not ATen's degree-18 Taylor
series: equal to float32 roundoff, which on ill-conditioned inputs exceeds
the OpInfo comparison's tolerance (forward ``matrix_exp`` stays an expected
failure; the result is as close to the float64 value as the CPU's).

``check_errors=True`` is honoured after the kernel ran, by PyTorch's own
``_linalg_check_errors`` on a host copy of ``info`` (same exception types and
messages as on the CPU).
"""
import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import torch
from jax import lax

from . import out_checks
from .registry import kernel, register, register_raw, resolve, variants_of

_I32 = jnp.int32


def _precise(fn):
    """Products inside decompositions at full float32 precision (TPU's default rounds to bf16)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)
    return wrapped


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    return jnp.conj(_mT(x))


def _mm(a, b):
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def broadcast_batch(*xs):
    """Broadcast the batch dims (all but the last two) of the matrices, as ATen's solvers do."""
    batch = jnp.broadcast_shapes(*(x.shape[:-2] for x in xs))
    return [jnp.broadcast_to(x, batch + x.shape[-2:]) for x in xs]


def _eye_like(a, rows, cols):
    return jnp.broadcast_to(jnp.eye(rows, cols, dtype=a.dtype), a.shape[:-2] + (rows, cols))


def _empty(dtype):
    return jnp.zeros((0,), dtype)


# ---- registration: functional and out= overloads, plus PyTorch's error check ----

class _Checked:
    """A raw kernel around JAX ``Kernel``s: an optional argument check before it
    runs (errors PyTorch's CPU kernel raises that no meta kernel does);
    optionally a choice between variants made from the torch arguments (the
    layout PyTorch's CPU kernel picks from A's contiguity); and
    ``check_errors=True`` handled after it, as ATen does, from ``info``."""

    def __init__(self, kernels, choose, api, info_index, precheck):
        self.kernels = kernels
        self.choose = choose
        self.api = api
        self.info_index = info_index
        self.precheck = precheck
        # torch.compile graphs run without the host-side check
        functional = next(iter(kernels.values())).mode == "functional"
        self.graph = (None if not functional else kernels[None] if choose is None
                      else _GraphChoice(kernels, choose))

    def __call__(self, *args, **kwargs):
        if self.precheck is not None:
            self.precheck(*args, **kwargs)
        kernel = self.kernels[self.choose(*args, **kwargs) if self.choose else None]
        out = kernel(*args, **kwargs)
        if self.api is not None and kwargs.get("check_errors", False):
            info = out[self.info_index]
            torch._linalg_check_errors(info.cpu(), self.api, is_matrix=args[0].dim() == 2)
        return out


class _GraphChoice:
    """A ``_Checked`` op with variants inside a torch.compile graph: the choice
    comes from the node's recorded tensors (their strides), which are what the
    traced backward formula saw too.  The lowering hands ``promote_dtype`` the
    node's meta arguments and its result to ``apply``; the choice rides along."""

    def __init__(self, kernels, choose):
        self.kernels = kernels
        self.choose = choose
        self.opts = kernels[False].opts

    def promote_dtype(self, args, kwargs):
        choice = self.choose(*args, **kwargs)
        return choice, self.kernels[choice].promote_dtype(args, kwargs)

    def apply(self, args, kwargs, promote_dtype, out_dtypes, key=None):
        choice, promote = promote_dtype
        return self.kernels[choice].apply(args, kwargs, promote, out_dtypes, key)


def _register(name, api=None, info_index=None, precheck=None, choose=None):
    """Like ``registry.register`` (functional + out= siblings), with ``_Checked`` when
    asked.  With ``choose``, the implementation's first argument is the choice
    (one of True/False), made from the torch arguments (in graphs, their metadata)."""
    def decorate(impl):
        if api is None and precheck is None and choose is None:
            register(name)(_precise(impl))
            return impl
        op = resolve(name)
        impls = {None: impl} if choose is None else {f: functools.partial(impl, f) for f in (False, True)}
        for target, mode in [(op, "functional")] + variants_of(op):
            kernels = {f: kernel(target, _precise(i), mode) for f, i in impls.items()}
            checked = _Checked(kernels, choose, api, info_index, precheck)
            register_raw(target, graph=checked.graph)(checked)
        return impl
    return decorate


# ---- LU ---------------------------------------------------------------------

def _lu(a):
    """getrf: (packed LU, 1-based int32 pivots, info).  info is LAPACK's: the
    1-based index of the first exactly-zero diagonal entry of U, else 0."""
    lu, piv, _ = lax.linalg.lu(a)
    d = jnp.diagonal(lu, axis1=-2, axis2=-1)
    zero = d == 0
    if d.shape[-1] == 0:
        info = jnp.zeros(d.shape[:-1], _I32)
    else:
        info = jnp.where(zero.any(-1), jnp.argmax(zero, -1) + 1, 0).astype(_I32)
    return lu, (piv + 1).astype(_I32), info


def _permutation(piv, m):
    """LAPACK's 1-based row swaps as a permutation ``perm`` with ``A[perm] = L @ U``."""
    if piv.shape[-1] == 0:
        return jnp.broadcast_to(jnp.arange(m, dtype=_I32), piv.shape[:-1] + (m,))
    return lax.linalg.lu_pivots_to_permutation(piv.astype(_I32) - 1, m)


def _swap_sign(piv):
    """(-1) ** (number of row swaps)."""
    swaps = jnp.sum(piv != jnp.arange(1, piv.shape[-1] + 1, dtype=piv.dtype), axis=-1)
    return 1 - 2 * (swaps % 2)


def _rows(x, idx):
    return jnp.take_along_axis(x, idx[..., None], axis=-2)


def _lu_solve(lu, piv, b, left=True, adjoint=False):
    """getrs: solves A X = B (A^H X = B with ``adjoint``; X A = B when not ``left``)
    from A's packed LU and pivots.  Batch dims broadcast."""
    if not left:  # X A = B  <=>  A^H X^H = B^H
        return _mH(_lu_solve(lu, piv, _mH(b), True, not adjoint))
    lu, b = broadcast_batch(lu, b)
    piv = jnp.broadcast_to(piv, lu.shape[:-2] + piv.shape[-1:])
    n = lu.shape[-1]
    if n == 0 or b.shape[-1] == 0:
        return jnp.zeros(b.shape, b.dtype)
    perm = _permutation(piv, n)
    tri = functools.partial(lax.linalg.triangular_solve, left_side=True)
    if not adjoint:  # P A = L U:  X = U^-1 L^-1 (P B)
        x = tri(lu, _rows(b, perm), lower=True, unit_diagonal=True)
        return tri(lu, x, lower=False)
    # A^H = U^H L^H P:  P X = L^-H U^-H B
    y = tri(lu, b, lower=False, transpose_a=True, conjugate_a=True)
    y = tri(lu, y, lower=True, transpose_a=True, conjugate_a=True, unit_diagonal=True)
    return _rows(y, jnp.argsort(perm, axis=-1))


def _no_pivot(api):
    def check(A, *, pivot=True, **_):
        if not pivot:  # as on the CPU (LAPACK has no unpivoted getrf)
            raise RuntimeError(f"{api}: LU without pivoting is not implemented on the tpu device")
    return check


@_register("linalg_lu_factor_ex.default", api="torch.linalg.lu_factor_ex", info_index=2,
           precheck=_no_pivot("linalg.lu_factor"))
def linalg_lu_factor_ex(A, pivot=True, check_errors=False):
    return _lu(A)


def _unpack(lu, piv, dtype):
    """(P, L, U) with A = P @ L @ U from a packed LU."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    perm = _permutation(piv, m)
    # P[r, c] = 1 where perm[c] == r (P is the inverse, i.e. transpose, of the row selection)
    P = (perm[..., None, :] == jnp.arange(m, dtype=perm.dtype)[:, None]).astype(dtype)
    L = jnp.tril(lu[..., :, :k], -1) + _eye_like(lu, m, k)
    U = jnp.triu(lu[..., :k, :])
    return P, L, U


@_register("linalg_lu.default", precheck=_no_pivot("linalg.lu"))
def linalg_lu(A, pivot=True):
    lu, piv, _ = _lu(A)
    return _unpack(lu, piv, A.dtype)


@_register("lu_unpack.default")
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    P, L, U = _unpack(LU_data, LU_pivots, LU_data.dtype)
    if not unpack_data:
        L = U = _empty(LU_data.dtype)
    if not unpack_pivots:
        P = _empty(LU_data.dtype)
    return P, L, U


@_register("linalg_lu_solve.default")
def linalg_lu_solve(LU, pivots, B, left=True, adjoint=False):
    return _lu_solve(LU, pivots, B, left, adjoint)


@_register("linalg_inv_ex.default", api="linalg.inv_ex", info_index=1)
def linalg_inv_ex(A, check_errors=False):
    lu, piv, info = _lu(A)
    n = A.shape[-1]
    return _lu_solve(lu, piv, _eye_like(A, n, n)), info


def _uses_A_T(A, **_):
    """PyTorch's CPU det/slogdet factor A^T, not A, when A is contiguous and real
    (it saves a copy into LAPACK's column-major layout); their backward formulas
    read the returned LU that way, so the same LU must come back here."""
    return A.is_contiguous() and not A.is_complex()


def _lu_det(use_A_T, A):
    lu, piv, _ = _lu(_mT(A) if use_A_T and not jnp.iscomplexobj(A) else A)
    return lu, piv, jnp.diagonal(lu, axis1=-2, axis2=-1)


@_register("_linalg_det.default", choose=_uses_A_T)
def linalg_det(use_A_T, A):
    lu, piv, d = _lu_det(use_A_T, A)
    return jnp.prod(d, axis=-1) * _swap_sign(piv).astype(A.dtype), lu, piv


@_register("_linalg_slogdet.default", choose=_uses_A_T)
def linalg_slogdet(use_A_T, A):
    lu, piv, d = _lu_det(use_A_T, A)
    # ATen: sign = prod(sgn(diag)) * (-1)^swaps, logabsdet = sum(log|diag|)
    sign = jnp.prod(jnp.sign(d), axis=-1) * _swap_sign(piv).astype(A.dtype)
    return sign, jnp.sum(jnp.log(jnp.abs(d)), axis=-1), lu, piv


def _vector_rhs(A, B):
    """ATen's linalg_solve_is_vector_rhs."""
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])


@_register("_linalg_solve_ex.default", api="torch.linalg.solve_ex", info_index=3)
def linalg_solve_ex(A, B, left=True, check_errors=False):
    lu, piv, info = _lu(A)
    if _vector_rhs(A, B):
        return _lu_solve(lu, piv, B[..., None])[..., 0], lu, piv, info
    return _lu_solve(lu, piv, B, left), lu, piv, info


# ---- triangular solves --------------------------------------------------------

def _tri_solve(A, B, upper, left, unit, transpose=False):
    A, B = broadcast_batch(A, B)
    if B.size == 0 or A.shape[-1] == 0:
        return jnp.zeros(B.shape, B.dtype)
    # trsm reads only A's triangle; mask anyway so every backend agrees
    A = jnp.triu(A) if upper else jnp.tril(A)
    return lax.linalg.triangular_solve(A, B, left_side=left, lower=not upper, transpose_a=transpose,
                                       unit_diagonal=unit)


@_register("linalg_solve_triangular.default")
def linalg_solve_triangular(self, B, upper, left=True, unitriangular=False):
    return _tri_solve(self, B, upper, left, unitriangular)


@_register("triangular_solve.default")
def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    # ``transpose`` is a plain transpose (no conjugation), as in ATen
    A_b, _ = broadcast_batch(A, self)
    return _tri_solve(A, self, upper, True, unitriangular, transpose), A_b


# ---- Cholesky -------------------------------------------------------------------

def _potf2(a):
    """Unblocked lower Cholesky as LAPACK's potf2 runs it, for the failing case:
    stops at the first non-positive (or NaN) pivot, leaves it on the diagonal and
    the columns after it unfactored; returns (L, 1-based info)."""
    n = a.shape[-1]
    idx = jnp.arange(n)

    def step(j, carry):
        l, info = carry
        live = info == 0
        lj = jnp.where(idx < j, l[..., j, :], 0)  # L[j, :j]
        ajj = jnp.real(l[..., j, j]) - jnp.sum(jnp.abs(lj) ** 2, axis=-1)
        bad = (ajj <= 0) | jnp.isnan(ajj)
        ok = live & ~bad
        ljj = jnp.sqrt(jnp.where(ok, ajj, 1))
        old = l[..., :, j]
        # L[j+1:, j] = (A[j+1:, j] - L[j+1:, :j] @ conj(L[j, :j])) / L[j, j]
        below = (old - _mm(jnp.where(idx < j, l, 0), jnp.conj(lj)[..., None])[..., 0]) / ljj[..., None]
        done = jnp.where(idx > j, below, jnp.where(idx == j, ljj[..., None], old))
        stopped = jnp.where(idx == j, ajj[..., None], old)  # potf2 leaves the bad pivot in A[j, j]
        col = jnp.where(ok[..., None], done, jnp.where((live & bad)[..., None], stopped, old))
        l = l.at[..., :, j].set(col.astype(l.dtype))
        return l, jnp.where(live & bad, j + 1, info).astype(_I32)

    return lax.fori_loop(0, n, step, (jnp.tril(a), jnp.zeros(a.shape[:-2], _I32)))


def _cholesky(A, upper):
    """(factor, info) as potrf: lower L with A = L L^H from A's lower triangle, or
    upper U with A = U^H U from its upper triangle."""
    a = _mH(A) if upper else A  # the upper triangle of A is the lower one of A^H
    n = a.shape[-1]
    if n == 0:
        l, info = a, jnp.zeros(a.shape[:-2], _I32)
    else:
        l = lax.linalg.cholesky(a, symmetrize_input=False)
        failed = jnp.isnan(l).any(axis=(-2, -1))  # JAX marks a failed factorization with NaNs
        # only when some matrix failed, rerun unblocked to get LAPACK's info and partial factor
        slow_l, info = lax.cond(failed.any(), _potf2, lambda x: (x, jnp.zeros(x.shape[:-2], _I32)), a)
        l = jnp.where(failed[..., None, None], slow_l, l)
    return (_mH(l) if upper else l), info


@_register("linalg_cholesky_ex.default", api="linalg.cholesky_ex", info_index=1)
def linalg_cholesky_ex(self, upper=False, check_errors=False):
    return _cholesky(self, upper)


class _OldCholesky:
    """``torch.cholesky``: the factor, with the CPU's error for a matrix that is not
    positive-definite (its schema has no ``info`` output to carry it)."""

    def __init__(self, mode):
        self.mode = mode
        self.inner = kernel("linalg_cholesky_ex.default", _precise(linalg_cholesky_ex))
        self.graph = None
        if mode == "functional":
            self.graph = kernel("cholesky.default", _precise(lambda s, upper=False: _cholesky(s, upper)[0]))

    def __call__(self, self_, upper=False, *, out=None):
        L, info = self.inner(self_, upper=upper)
        torch._linalg_check_errors(info.cpu(), "cholesky", is_matrix=self_.dim() == 2)
        if out is None:
            return L
        if out.shape != L.shape:
            out.resize_(L.shape)
        return out.copy_(L)


for _name, _mode in (("cholesky.default", "functional"), ("cholesky.out", "out")):
    _kernel = _OldCholesky(_mode)
    register_raw(_name, graph=_kernel.graph)(_kernel)


def _chol_solve(L, B, upper):
    """X with (L L^H) X = B (or (U^H U) X = B)."""
    L, B = broadcast_batch(L, B)
    if B.size == 0 or L.shape[-1] == 0:
        return jnp.zeros(B.shape, B.dtype)
    tri = functools.partial(lax.linalg.triangular_solve, left_side=True, lower=not upper)
    L = jnp.triu(L) if upper else jnp.tril(L)
    if upper:  # U^H y = B, U x = y
        y = tri(L, B, transpose_a=True, conjugate_a=True)
        return tri(L, y)
    y = tri(L, B)
    return tri(L, y, transpose_a=True, conjugate_a=True)


@_register("_cholesky_solve_helper.default")
def cholesky_solve_helper(self, A, upper):
    return _chol_solve(A, self, upper)


@_register("cholesky_inverse.default")
def cholesky_inverse(self, upper=False):
    n = self.shape[-1]
    x = _chol_solve(self, _eye_like(self, n, n), upper)
    return (x + _mH(x)) / 2  # exactly Hermitian, as potri's mirrored result


# ---- QR and Householder products ------------------------------------------------------

@_register("linalg_qr.default")
def linalg_qr(A, mode="reduced"):
    if mode == "r":
        return _empty(A.dtype), jnp.linalg.qr(A, mode="r")
    return tuple(lax.linalg.qr(A, full_matrices=mode == "complete"))


@_register("geqrf.default")
def geqrf(self):
    h, tau = jnp.linalg.qr(self, mode="raw")  # NumPy's raw mode returns the reflectors transposed
    return _mT(h), tau


@_register("linalg_householder_product.default")
def linalg_householder_product(input, tau):
    if input.size == 0 or tau.shape[-1] == 0:
        return _eye_like(input, *input.shape[-2:])
    return lax.linalg.householder_product(input, tau)


@_register("ormqr.default")
def ormqr(self, input2, input3, left=True, transpose=False):
    a, c = broadcast_batch(self, input3)
    tau = jnp.broadcast_to(input2, a.shape[:-2] + input2.shape[-1:])
    if c.size == 0 or tau.shape[-1] == 0:
        return c
    return lax.linalg.ormqr(a, tau, c, left=left, transpose=transpose)


# ---- eigen- and singular value decompositions ---------------------------------------------

@_register("_linalg_eigh.default")
def linalg_eigh(A, UPLO="L", compute_v=True):
    # syevd reads only the UPLO triangle: no symmetrization, as on the CPU
    v, w = lax.linalg.eigh(A, lower=UPLO == "L", symmetrize_input=False)
    return w, (v if compute_v else _empty(A.dtype))


@_register("_linalg_svd.default")
def linalg_svd(A, full_matrices=False, compute_uv=True, driver=None):
    m, n = A.shape[-2:]
    if not compute_uv:
        return _empty(A.dtype), lax.linalg.svd(A, compute_uv=False), _empty(A.dtype)
    if min(m, n) == 0:  # no singular values: the factors are (pieces of) identities, as on the CPU
        k = min(m, n)
        U = _eye_like(A, m, m if full_matrices else k)
        Vh = _eye_like(A, n if full_matrices else k, n)
        return U, jnp.zeros(A.shape[:-2] + (0,), jnp.real(A).dtype), Vh
    return tuple(lax.linalg.svd(A, full_matrices=full_matrices, compute_uv=True))


def _eig(A, vectors):
    # geev, as on the CPU; real input gives complex results
    if A.shape[-1] == 0:
        c = jnp.result_type(A.dtype, jnp.complex64)
        return jnp.zeros(A.shape[:-1], c), jnp.zeros(A.shape, c)
    out = lax.linalg.eig(A, compute_left_eigenvectors=False, compute_right_eigenvectors=vectors)
    return out[0], (out[1] if vectors else None)


@_register("linalg_eig.default")
def linalg_eig(self):
    return _eig(self, True)


@_register("_linalg_eigvals.default")
def linalg_eigvals(self):
    return _eig(self, False)[0]


@_register("linalg_matrix_exp.default")
def linalg_matrix_exp(self):
    if self.size == 0:
        return self
    if self.dtype in (jnp.bfloat16, jnp.float16):  # JAX's expm takes float32 and wider
        return jsl.expm(self.astype(jnp.float32)).astype(self.dtype)
    return jsl.expm(self)



# ---- least squares ----------------------------------------------------------------

_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq(A, b, rcond=None, driver=None):
    """(solution, residuals, rank, singular_values) with the CPU's per-driver outputs:
    rank for all but gels, singular values for gelsd/gelss, residuals when m > n for
    all but gelsy.  Solved through the SVD: the minimum-norm least-squares solution,
    which is what every LAPACK driver returns for the matrices it supports."""
    driver = driver or "gelsy"
    m, n = A.shape[-2:]
    vector = b.ndim == A.ndim - 1  # ATen's vector case: one right-hand side per matrix
    B = b[..., None] if vector else b
    A, B = broadcast_batch(A, B)
    real = jnp.real(A).dtype
    batch = A.shape[:-2]
    if min(m, n) == 0:
        X = jnp.zeros(batch + (n, B.shape[-1]), A.dtype)
        s = jnp.zeros(batch + (0,), real)
        rank = jnp.zeros(batch, jnp.int64)
    else:
        U, s, Vh = lax.linalg.svd(A, full_matrices=False)
        # rcond as LAPACK gets it from ATen: default eps * max(m, n); relative to the largest singular value
        rc = jnp.finfo(real).eps * max(m, n) if rcond is None else rcond
        keep = s > rc * s[..., :1]
        rank = jnp.sum(keep, axis=-1).astype(jnp.int64)
        inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(A.dtype)
        X = _mm(_mH(Vh), inv[..., None] * _mm(_mH(U), B))
    if m > n and driver != "gelsy":
        residuals = jnp.sum(jnp.abs(_mm(A, X) - B) ** 2, axis=-2).astype(real)
    else:
        residuals = jnp.zeros((0,), real)
    return (X[..., 0] if vector else X, residuals,
            rank if driver != "gels" else jnp.zeros((0,), jnp.int64),
            s if driver in ("gelsd", "gelss") else jnp.zeros((0,), real))


class _Lstsq:
    """linalg_lstsq has no meta kernel: PyTorch's argument errors are raised here;
    gelsd/gelss return residuals only when every matrix has full rank n, a
    data-dependent shape decided on the host after the kernel."""

    def __init__(self, mode):
        self.mode = mode
        self.kernel = kernel("linalg_lstsq.default", _precise(_lstsq), meta=False)

    def __call__(self, A, b, rcond=None, *, driver=None, **outs):
        api = "torch.linalg.lstsq"
        if A.dim() < 2:
            raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
        if b.dim() < 1:
            raise RuntimeError(f"{api}: other must have at least 1 dimension.")
        if not (A.is_floating_point() or A.is_complex()):
            raise RuntimeError("This function doesn't handle types other than float and double")
        if A.dtype != b.dtype:
            raise RuntimeError(f"{api}: Expected input and other to have the same dtype, but got input's dtype "
                               f"{_type_name(A)} and other's dtype {_type_name(b)}")
        vector = b.dim() == A.dim() - 1
        if A.shape[-2] != (b.shape[-1] if vector else b.shape[-2]):
            raise RuntimeError(f"{api}: input.size(-2) should match other.size(-{1 if vector else 2})")
        if driver is not None and driver not in _LSTSQ_DRIVERS:
            raise RuntimeError(f"{api}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
        X, res, rank, sv = self.kernel(A, b, rcond, driver=driver)
        if driver in ("gelsd", "gelss") and res.numel() and not bool((rank.cpu() == A.shape[-1]).all()):
            res = res.new_empty((0,))
        result = (X, res, rank, sv)
        if self.mode == "functional":
            return result
        names = ("solution", "residuals", "rank", "singular_values")
        for name, r in zip(names, result):
            o = outs[name]
            if o.shape != r.shape:
                out_checks.resize_output(o, r.shape)
            o.copy_(r)
        return tuple(outs[n] for n in names)


def _type_name(t):
    return {torch.float32: "Float", torch.float64: "Double", torch.complex64: "ComplexFloat",
            torch.complex128: "ComplexDouble"}.get(t.dtype, str(t.dtype))


register_raw("linalg_lstsq.default")(_Lstsq("functional"))
register_raw("linalg_lstsq.out")(_Lstsq("out"))
