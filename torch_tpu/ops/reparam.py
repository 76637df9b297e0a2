"""Reparameterized gradients of Gamma and Dirichlet samples: what
``Gamma(...).rsample()`` (and Beta, Dirichlet, StudentT, Chi2 through it)
backpropagates through.  ``_standard_gamma_grad(alpha, x)`` is
-(d/dalpha CDF(x; alpha)) / pdf(x; alpha); ``_dirichlet_grad(x, alpha, total)``
the same for a Beta(alpha, total - alpha) marginal, divided by (1 - x).

Neither has a closed form.  These follow the piecewise approximations of
PyTorch's CPU kernels (ATen/native/Distributions.h: Taylor series near 0,
Rice saddle-point expansions for large parameters, fitted rational
corrections elsewhere; the fitted coefficients are theirs), evaluated in
float64, every branch computed and the right one selected.  The CPU also
uses float64, except for the Dirichlet's two Taylor series, which it sums in
the input's precision: float32 results there agree with the CPU's float64
ones rather than its float32 ones.
"""
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma

from .registry import register

_F64 = np.float64


def _f32(c):
    """A C float literal (0.8f) as the double it becomes in the CPU's comparisons."""
    return float(np.float32(c))


# ---- Gamma -----------------------------------------------------------------------

_GAMMA_UV = np.array([  # bivariate rational fit: rows are powers of u, columns p0..p3, q0..q3
    [0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084],
    [0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915,
     -0.00058392623],
    [0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326,
     0.00085092367, -1.5247877e-07],
], dtype=np.float32).astype(_F64)  # float literals in the C source


def _gamma_grad_small_x(alpha, x):
    """Taylor series of the incomplete gamma function (x < 0.8)."""
    numer, denom = jnp.ones_like(x), alpha
    series1, series2 = numer / denom, numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-x / i)
        denom = denom + 1
        series1 = series1 + numer / denom
        series2 = series2 + numer / (denom * denom)
    pow_x_alpha = x ** alpha
    pdf = x ** (alpha - 1) * jnp.exp(-x)
    cdf_alpha = (jnp.log(x) - digamma(alpha)) * pow_x_alpha * series1 - pow_x_alpha * series2
    result = -cdf_alpha / pdf
    return jnp.where(jnp.isnan(result), 0.0, result)


def _gamma_grad_large_alpha(alpha, x):
    """Rice saddle-point expansion (alpha > 8), with its own form near x = alpha."""
    numer_1 = 1 + 24 * alpha * (1 + 12 * alpha)
    numer_2 = (1440 * (alpha * alpha) + 6 * x * (53 - 120 * x) - 65 * x * x / alpha
               + alpha * (107 + 3600 * x))
    near = numer_1 * numer_2 / (1244160 * (alpha * alpha) * (alpha * alpha))
    denom = jnp.sqrt(8 * alpha)
    term2 = denom / (alpha - x)
    term3 = (x - alpha - alpha * jnp.log(x / alpha)) ** -1.5
    term23 = jnp.where(x < alpha, term2 - term3, term2 + term3)
    term1 = jnp.log(x / alpha) * term23 - jnp.sqrt(2 / alpha) * (alpha + x) / ((alpha - x) * (alpha - x))
    stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha))
    far = -stirling * (x * term1) / denom
    return jnp.where((_f32(0.9) * alpha <= x) & (x <= _f32(1.1) * alpha), near, far)


def _gamma_grad_rational(alpha, x):
    u, v = jnp.log(x / alpha), jnp.log(alpha)
    c = [_GAMMA_UV[0, i] + u * (_GAMMA_UV[1, i] + u * _GAMMA_UV[2, i]) for i in range(8)]
    p = c[0] + v * (c[1] + v * (c[2] + v * c[3]))
    q = c[4] + v * (c[5] + v * (c[6] + v * c[7]))
    return jnp.exp(p / q)


@register("_standard_gamma_grad.default")
def _standard_gamma_grad(self, output):
    alpha, x = self.astype(_F64), output.astype(_F64)
    result = jnp.where(x < _f32(0.8), _gamma_grad_small_x(alpha, x),
                       jnp.where(alpha > 8, _gamma_grad_large_alpha(alpha, x),
                                 _gamma_grad_rational(alpha, x)))
    return result.astype(self.dtype)


# ---- Dirichlet (Beta marginals) ----------------------------------------------------

_BETA_C = np.array([  # rational correction: [p or q][power of u][power of a][power of b]
    [[[1.003668233, -0.01061107488, -0.0657888334, 0.01201642863],
      [0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033],
      [-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013]],
     [[0.221950385, -0.3187676331, 0.01799915743, 0.01074823814],
      [-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057],
      [0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05]],
     [[-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565],
      [0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181],
      [0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05]]],
    [[[1, -0.02924021934, -0.04438342661, 0.007285809825],
      [0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521],
      [-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149]],
     [[0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273],
      [0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956],
      [-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05]],
     [[0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05],
      [0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05],
      [-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06]]],
], dtype=_F64)


def _beta_grad_alpha_small(x, alpha, beta):
    """Taylor expansion for x near 0."""
    factor = digamma(alpha) - digamma(alpha + beta) - jnp.log(x)
    numer = jnp.ones_like(x)
    series = numer / alpha * (factor + 1 / alpha)
    for i in range(1, 11):
        numer = numer * ((i - beta) * x / i)
        denom = alpha + i
        series = series + numer / denom * (factor + 1 / denom)
    result = x * (1 - x) ** -beta * series
    return jnp.where(jnp.isnan(result), 0.0, result)


def _beta_grad_beta_small(x, alpha, beta):
    """Taylor expansion in beta's direction for x near 0 (used mirrored, near 1)."""
    factor = digamma(alpha + beta) - digamma(beta)
    numer, betas, dbetas = jnp.ones_like(x), jnp.ones_like(x), jnp.zeros_like(x)
    series = factor / alpha
    for i in range(1, 9):
        numer = numer * (-x / i)
        dbetas = dbetas * (beta - i) + betas
        betas = betas * (beta - i)
        series = series + numer / (alpha + i) * (dbetas + factor * betas)
    result = -(1 - x) ** (1 - beta) * series
    return jnp.where(jnp.isnan(result), 0.0, result)


def _beta_grad_alpha_mid(x, alpha, beta):
    """Rice saddle-point expansion for large alpha and beta."""
    total = alpha + beta
    mean = alpha / total
    std = jnp.sqrt(alpha * beta / (total + 1)) / total
    poly = 47 * x * (beta * beta) * (beta * beta) + alpha * (
        (43 + 20 * (16 + 27 * beta) * x) * (beta * beta) * beta + alpha * (
            3 * (59 + 180 * beta - 90 * x) * (beta * beta) + alpha * (
                (453 + 1620 * beta * (1 - x) - 455 * x) * beta + alpha * (
                    8 * (1 - x) * (135 * beta - 11)))))
    prefactor_num = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total)
    prefactor_den = 12960 * alpha * alpha * alpha * beta * beta * (1 + 12 * total)
    near = prefactor_num / (1 - x) * poly / prefactor_den
    prefactor = -x / jnp.sqrt(2 * alpha * beta / total)
    stirling = ((1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha))
                * (1 + 1 / (12 * beta) + 1 / (288 * beta * beta))
                / (1 + 1 / (12 * total) + 1 / (288 * total * total)))
    term1_num = 2 * (alpha * alpha) * (x - 1) + alpha * beta * (x - 1) - x * (beta * beta)
    axbx = alpha * (x - 1) + beta * x
    term1 = term1_num / (jnp.sqrt(2 * alpha / beta) * total ** 1.5 * axbx * axbx)
    term2 = 0.5 * jnp.log(alpha / (total * x))
    term3 = jnp.sqrt(8 * alpha * beta / total) / (beta * x + alpha * (x - 1))
    term4 = (beta * jnp.log(beta / (total * (1 - x))) + alpha * jnp.log(alpha / (total * x))) ** -1.5
    far = stirling * prefactor * (term1 + term2 * (term3 + jnp.where(x < mean, term4, -term4)))
    return jnp.where((mean - 0.1 * std <= x) & (x <= mean + 0.1 * std), near, far)


def _beta_grad_rational(x, alpha, total):
    beta = total - alpha
    u = jnp.log(x)
    a = jnp.log(alpha) - u
    b = jnp.log(total) - a
    p = q = jnp.zeros_like(x)
    for i in range(3):
        for j in range(3):
            ua = u ** i * a ** j
            cp, cq = _BETA_C[0, i, j], _BETA_C[1, i, j]
            p = p + ua * (cp[0] + b * (cp[1] + b * (cp[2] + b * cp[3])))
            q = q + ua * (cq[0] + b * (cq[1] + b * (cq[2] + b * cq[3])))
    approx = x * (digamma(total) - digamma(alpha)) / beta
    return p / q * approx


@register("_dirichlet_grad.default")
def _dirichlet_grad(x, alpha, total):
    # All in float64.  The CPU sums the two Taylor series in the input's own
    # precision, which in float32 loses up to 3 digits near x = 1 (cancelling
    # terms); these results match the CPU's float64 ones instead.
    dtype = x.dtype
    x, alpha, total = (v.astype(_F64) for v in jnp.broadcast_arrays(x, alpha, total))
    beta = total - alpha
    boundary = total * x * (1 - x)
    result = jnp.where(
        (x <= 0.5) & (boundary < 2.5), _beta_grad_alpha_small(x, alpha, beta),
        jnp.where((x >= 0.5) & (boundary < 0.75), -_beta_grad_beta_small(1 - x, beta, alpha),
                  jnp.where((alpha > 6) & (beta > 6), _beta_grad_alpha_mid(x, alpha, beta),
                            _beta_grad_rational(x, alpha, total))))
    return result.astype(dtype)
