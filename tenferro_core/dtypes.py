"""dtypes and the Array API type-promotion lattice.

A `DType` is an interned singleton compared by identity (``x.dtype is float32``); ``==`` also
accepts NumPy's spellings of the same dtype (``x.dtype == np.float32``, ``== "float32"``);
hashing is by identity (see `DType.__hash__`). Promotion follows the
Array API standard inside a kind (bool, signed, unsigned, floating, complex);
across kinds the result is the operand of the higher kind (bool < integer <
floating < complex), as in PyTorch and JAX. Pairs with no exact common type
(uint64 with a signed integer) are a DTypeError, never a silent cast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError

_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


class DType:
    """A tenferro dtype: name, kind ('b', 'i', 'u', 'f', 'c') and width in bits."""

    __slots__ = ("name", "kind", "bits", "_numpy")

    def __init__(self, name: str, kind: str, bits: int, numpy_name: str | None):
        self.name = name
        self.kind = kind
        self.bits = bits
        self._numpy = np.dtype(numpy_name) if numpy_name else None

    @property
    def itemsize(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def numpy(self) -> np.dtype:
        """The matching NumPy dtype; bfloat16 needs the `ml_dtypes` package."""
        if self._numpy is None:
            try:
                import ml_dtypes  # optional, only for bfloat16 host buffers
            except ImportError:
                raise DTypeError(
                    f"{self.name} has no NumPy dtype without the 'ml_dtypes' package; "
                    f"install ml_dtypes or use float32"
                ) from None
            self._numpy = np.dtype(getattr(ml_dtypes, self.name))
        return self._numpy

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_inexact(self) -> bool:
        return self.kind in "fc"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __eq__(self, other: Any) -> bool:
        """Identity among DTypes; also True against the same dtype spelt as NumPy spells it
        (``np.float32``, ``np.dtype("float32")``, ``"float32"``, ``"f4"``), False against other
        dtypes, NotImplemented for objects that are no dtype at all."""
        if type(other) is DType:
            return other is self
        d = _spelling(other)
        return NotImplemented if d is None else d is self

    def __ne__(self, other: Any) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    # Hashing stays identity's (a C call: dtypes sit in every aval and cache key). Python cannot
    # give one hash to a DType, its name, its NumPy dtype and its scalar type at once, so only
    # DType == DType (identity) is hash-consistent; NumPy's dtypes equal "float32" and hash
    # differently from it too. Key dicts by DType, not by a spelling.
    __hash__ = object.__hash__

    def __reduce__(self):
        return (as_dtype, (self.name,))


bool_ = DType("bool", "b", 8, "bool")
int8 = DType("int8", "i", 8, "int8")
int16 = DType("int16", "i", 16, "int16")
int32 = DType("int32", "i", 32, "int32")
int64 = DType("int64", "i", 64, "int64")
uint8 = DType("uint8", "u", 8, "uint8")
uint16 = DType("uint16", "u", 16, "uint16")
uint32 = DType("uint32", "u", 32, "uint32")
uint64 = DType("uint64", "u", 64, "uint64")
float16 = DType("float16", "f", 16, "float16")
bfloat16 = DType("bfloat16", "f", 16, None)
float32 = DType("float32", "f", 32, "float32")
float64 = DType("float64", "f", 64, "float64")
complex64 = DType("complex64", "c", 64, "complex64")
complex128 = DType("complex128", "c", 128, "complex128")

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, complex64, complex128,
)
SIGNED = (int8, int16, int32, int64)
UNSIGNED = (uint8, uint16, uint32, uint64)
INTEGER = SIGNED + UNSIGNED
FLOATING = (float16, bfloat16, float32, float64)
COMPLEX = (complex64, complex128)
INEXACT = FLOATING + COMPLEX
NUMERIC = INTEGER + INEXACT

DEFAULT_INT = int64
# NumPy's defaults; a Runtime may choose float32 instead (`Runtime.default_float_dtype`), and the
# namespace asks the runtime of the device it works on
DEFAULT_FLOAT = float64
DEFAULT_COMPLEX = complex128
DEFAULT_INDEX = int64

_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME["bool_"] = bool_
_BY_NUMPY = {d._numpy: d for d in ALL_DTYPES if d._numpy is not None}
_BY_PYTYPE = {bool: bool_, int: DEFAULT_INT, float: DEFAULT_FLOAT, complex: DEFAULT_COMPLEX}


def as_dtype(obj: Any) -> DType:
    """Normalize a DType, a dtype name, a NumPy dtype or a Python type to a DType."""
    if isinstance(obj, DType):
        return obj
    if isinstance(obj, str):
        d = _BY_NAME.get(obj)
        if d is not None:
            return d
    elif isinstance(obj, type) and obj in _BY_PYTYPE:
        return _BY_PYTYPE[obj]
    else:
        try:
            npd = np.dtype(obj)
        except TypeError:
            npd = None
        if npd is not None:
            if npd in _BY_NUMPY:
                return _BY_NUMPY[npd]
            if npd.name == "bfloat16":
                return bfloat16
    raise DTypeError(
        f"expected a dtype (one of {', '.join(d.name for d in ALL_DTYPES)}), got {obj!r}; "
        f"pass a tenferro dtype such as tenferro_core.dtypes.float32"
    )


def _spelling(obj: Any) -> DType | None:
    """The DType a dtype name, NumPy dtype or NumPy/Python scalar type spells; None otherwise."""
    if isinstance(obj, str):
        d = _BY_NAME.get(obj)
        if d is not None:
            return d
    elif not isinstance(obj, (np.dtype, type)):
        return None
    try:
        npd = np.dtype(obj)
    except (TypeError, ValueError):
        return None
    return _BY_NUMPY.get(npd) or (bfloat16 if npd.name == "bfloat16" else None)


def from_numpy(npd: np.dtype) -> DType:
    """The DType of a NumPy dtype; DTypeError for NumPy types tenferro lacks."""
    d = _BY_NUMPY.get(npd)
    if d is None:
        if npd.name == "bfloat16":
            return bfloat16
        raise DTypeError(
            f"NumPy dtype {npd} has no tenferro equivalent; expected one of "
            f"{', '.join(d.name for d in ALL_DTYPES)}; convert with .astype() first"
        )
    return d


def _promote_int(a: DType, b: DType) -> DType:
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    bits = max(s.bits, 2 * u.bits)
    if bits > 64:
        raise DTypeError(
            f"no integer dtype holds both {a} and {b}; cast one explicitly with astype() "
            f"(for example to float64 or int64)"
        )
    return _BY_NAME[f"int{bits}"]


def _promote_float(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if a.bits > b.bits else b


def _float_bits(d: DType) -> int:
    return d.bits // 2 if d.kind == "c" else d.bits


def promote_types(a: DType, b: DType) -> DType:
    """The dtype two array operands promote to."""
    if a is b:
        return a
    ka, kb = _KIND_RANK[a.kind], _KIND_RANK[b.kind]
    if {ka, kb} == {2, 3}:  # real floating with complex: the wider precision, complex
        return complex_of(_promote_float(real_of(a), real_of(b)))
    if ka != kb:
        return a if ka > kb else b
    if ka == 0:
        return bool_
    if ka == 1:
        return _promote_int(a, b)
    if ka == 2:
        return _promote_float(a, b)
    return a if a.bits >= b.bits else b


def complex_of(d: DType) -> DType:
    """The complex dtype with the precision of a real floating dtype."""
    if d.kind == "c":
        return d
    return complex128 if d is float64 else complex64


def real_of(d: DType) -> DType:
    """The real dtype of a complex dtype; other dtypes map to themselves."""
    if d is complex64:
        return float32
    if d is complex128:
        return float64
    return d


def promote_scalar(d: DType, value: Any, default_float: DType = DEFAULT_FLOAT) -> DType:
    """The dtype of `array(d) op python_scalar` (the array's dtype wins within its kind); a
    float (complex) scalar with a bool or integer array gives `default_float` (its complex)."""
    if isinstance(value, bool):
        kind = 0
    elif isinstance(value, int):
        kind = 1
    elif isinstance(value, float):
        kind = 2
    elif isinstance(value, complex):
        kind = 3
    else:
        raise DTypeError(f"expected a Python bool, int, float or complex scalar, got {type(value).__name__}")
    dk = _KIND_RANK[d.kind]
    if kind <= dk:
        return d
    if kind == 1:
        return DEFAULT_INT
    if kind == 2:
        return default_float
    return complex_of(d) if dk == 2 else complex_of(default_float)


def result_type(*dtypes: DType) -> DType:
    """Promote any number of dtypes left to right."""
    if not dtypes:
        raise DTypeError("result_type needs at least one dtype or array, got none")
    out = as_dtype(dtypes[0])
    for d in dtypes[1:]:
        out = promote_types(out, as_dtype(d))
    return out


def can_cast(from_: DType, to: DType) -> bool:
    """True when promotion alone turns `from_` into `to` (Array API `can_cast`)."""
    try:
        return promote_types(from_, to) is to
    except DTypeError:
        return False


_ISDTYPE_KINDS = {
    "bool": (bool_,),
    "signed integer": SIGNED,
    "unsigned integer": UNSIGNED,
    "integral": INTEGER,
    "real floating": FLOATING,
    "complex floating": COMPLEX,
    "numeric": NUMERIC,
}


def isdtype(dtype: DType, kind: Any) -> bool:
    """Array API `isdtype`: `kind` is a dtype, a kind name, or a tuple of those."""
    dtype = as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, DType):
        return dtype is kind
    if isinstance(kind, str):
        if kind not in _ISDTYPE_KINDS:
            raise DTypeError(
                f"expected a kind in {sorted(_ISDTYPE_KINDS)}, a dtype, or a tuple of them; got {kind!r}"
            )
        return dtype in _ISDTYPE_KINDS[kind]
    raise DTypeError(f"expected a dtype, a kind string or a tuple, got {type(kind).__name__}")
