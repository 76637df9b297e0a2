"""What a lowered TPU program contains, read from its StableHLO text: the
Pallas (Mosaic) kernels, and the types a TPU handles poorly (see the guide's
"Dtypes on a TPU": float64 and 64-bit integers are emulated, 128-bit complex
is refused)."""
import collections
import dataclasses
import re

_OP = re.compile(r'^\s*(?:%[^=]+=\s*)?"?(?:stablehlo|chlo|mhlo)\.([a-z_]+)')
_F64 = re.compile(r"tensor<(?:[0-9?]+x)*f64>")
_I64 = re.compile(r"tensor<(?:[0-9?]+x)*u?i64>")
_COMPLEX = re.compile(r"complex<f(32|64)>")
_KERNEL = re.compile(r'@tpu_custom_call\(.*kernel_name = "([^"]*)"')
# Ops that move, reshape or convert int64 values without computing on them
# (a cast to int64 and back, the sizes of a reshape): free of emulated arithmetic.
_MOVES = {"constant", "convert", "broadcast_in_dim", "reshape", "transpose", "slice", "concatenate",
          "iota", "bitcast_convert", "return", "tuple", "get_tuple_element", "optimization_barrier",
          "custom_call", "dynamic_reshape", "pad", "reverse"}
_INDEXING = {"gather", "scatter", "dynamic_slice", "dynamic_update_slice"}


@dataclasses.dataclass
class Contents:
    kernels: list             # kernel name per Mosaic custom call, in program order
    float64_ops: int          # ops with a float64 operand or result
    complex_types: set        # "complex64" / "complex128" seen
    int64_arithmetic: dict    # op name -> count of ops computing on 64-bit integers
    int64_indexing: dict      # gather/scatter/dynamic_slice with 64-bit indices or values

    def poor_dtypes(self) -> list:
        """One line per issue, worst first (empty when none)."""
        out = []
        if "complex128" in self.complex_types:
            out.append("complex128: not supported on a TPU (XLA refuses C128 there)")
        if self.float64_ops:
            out.append(f"float64 in {self.float64_ops} ops: emulated on a TPU (slow, float32 exponent range)")
        if "complex64" in self.complex_types:
            out.append("complex64: supported, but many ops are slow on a TPU")
        if self.int64_arithmetic:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.int64_arithmetic.items()))
            out.append(f"int64 arithmetic (emulated as 32-bit pairs): {ops}")
        if self.int64_indexing:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.int64_indexing.items()))
            out.append(f"int64 indexing: {ops}")
        return out


def _signature(line: str) -> str:
    # the types after the last " : " (operands -> results), or the whole line
    cut = line.rfind(" : ")
    return line[cut:] if cut >= 0 else line


def contents(stablehlo: str) -> Contents:
    kernels, f64_ops, complex_types = [], 0, set()
    arith, indexing = collections.Counter(), collections.Counter()
    for line in stablehlo.splitlines():
        if "tpu_custom_call" in line:
            m = _KERNEL.search(line)
            if m or "@tpu_custom_call(" in line:
                kernels.append(m.group(1) if m else "?")
        m = _OP.match(line)
        if m is None:
            continue
        op, types = m.group(1), _signature(line)
        if _F64.search(types):
            f64_ops += 1
        for bits in _COMPLEX.findall(types):
            complex_types.add("complex64" if bits == "32" else "complex128")
        if _I64.search(types) and op not in _MOVES:
            (indexing if op in _INDEXING else arith)[op] += 1
    return Contents(kernels, f64_ops, complex_types, dict(arith), dict(indexing))
