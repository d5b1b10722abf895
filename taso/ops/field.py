"""Arithmetic in Z_p x Z_q, the rings fingerprints are computed in, and keyed random functions over them.

Mirage's construction (OSDI'25) with large primes: p = 2q + 1 = 33553799 is a safe prime below 2**25 and
q = 16776899, both = 3 (mod 4). A value of an evaluation holds both components in one int64, the Z_p residue
in the low 32 bits and the Z_q residue above them (`pack`); containers, reshapes, concats and gathers move it
as one number, and `taso.generate.fingerprint.field_apply` unpacks it for an op's field rule, which runs once
per component with a `Ring` saying which. Only the Z_p component is digested: it is the fingerprint; the Z_q
component exists to be an exponent.

Why int64 cannot overflow: both residues are below 2**25, so a product is below 2**50 and int64 can add up
2**13 = 8192 of them (the longest sums the generator's graphs make are a conv over 8 channels x 3 x 3 = 72
terms); every product is reduced before the next; a packed value is below 2**57 and is never multiplied.
Schwartz-Zippel keeps collisions of two different degree-d polynomial programs near d / p < 1e-6 per element,
and a fingerprint takes two independent evaluations.

What each op's field rule sees exactly, and what it cannot (a keyed random function stands for what has no
algebra: a splitmix64 hash of (key, op, value), so only identities true of *every* function survive, the way
an uninterpreted function behaves in z3):

============================  ==================================================  ===============================
op                            seen exactly                                        not seen (keyed or lost)
============================  ==================================================  ===============================
Add, Mul, MatMul, Conv, ...   every polynomial identity (ring laws, linearity)    none
Div, Reciprocal               (x / y) * y = x, 1 / (1 / x) = x (y, x not 0)       division by 0 (gives 0)
float constants               m * 2**e exactly (0.5, 1e-5 are exact dyadics);    what sqrt(2/pi) is beyond an
                              a rounding of sqrt 2, sqrt(2/pi), 0.044715 as       indeterminate (a fixed
                              that number (`taso.ops.numbers`)                    random residue)
Sqrt (x ** ((p+1)/4))         sqrt(x)**2 = x on residues, sqrt(x**4) = x**2,      a non-residue (a negative's
                              sqrt(exp(x)) = exp(x / 2), x ** 0.5 = sqrt(x)      stand-in) has a keyed root
Exp (w ** (x mod q))          exp(a + b) = exp(a) * exp(b), exp(0) = 1,           exp of an exp (Mirage's LAX
                              exp(k * a) = exp(a) ** k                            fragment): keyed in Z_q
Pow (constant exponent)       integer exponents as products, 0.5 as Sqrt,         other exponents: keyed
                              negative ones through inverses
AveragePool, sums and means   sums exact, a mean = sum * inverse(count)          none
Slice, Gather, Where          values moved or chosen as numbers; a boolean        none
                              condition lifts to 0 and 1
Softmax                       softmax(x + c) = softmax(x), = exp(x) / sum exp(x)  softmax of an exp
LayerNormalization            its formula with Sqrt's residue caveat              variance a non-residue
Relu, Sigmoid, Tanh, MaxPool  commuting with transpose, concat, slice (every     relu(x) + relu(-x) = |x| and
(and erf, gelu: no algebra)   element-wise function does)                         every other specific identity
============================  ==================================================  ===============================
"""

from __future__ import annotations

import hashlib

import numpy as np

from taso.ops import numbers

P = 33_553_799
"""The Z_p component's prime, a safe prime below 2**25 (see the module docstring for why)."""
Q = (P - 1) // 2
"""The Z_q component's prime, q = (p - 1) / 2: the order of exp's base (`Ring.exp`), so exponents live in Z_q."""
LOW = (1 << 32) - 1
"""Mask of a packed value's Z_p residue."""
EXPONENTIAL = "exponential"
"""The trait (`OpDef.tags`) of an op whose field rule reads its inputs' Z_q components (Exp raises a generator to
them): only an evaluation with such an op carries them (`taso.generate.fingerprint.needs_exponents`); any other
computes Z_p alone. It lives here, not in `taso.ops.traits`, whose code the verifier's digest covers: no proof
rests on how a fingerprint is computed."""

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def pack(residues: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """One int64 per element holding both components (Z_p low, Z_q high)."""
    return np.asarray(residues, dtype=np.int64) | (np.asarray(exponents, dtype=np.int64) << 32)


def lift(numbers: np.ndarray) -> np.ndarray:
    """Real numbers (integers or finite floats) as packed values: each one's residue in both components (what
    a weight's data becomes)."""
    return pack(constants(numbers, P), constants(numbers, Q))


def residues(values: np.ndarray) -> np.ndarray:
    """The Z_p component of packed values: what a fingerprint digests."""
    return np.asarray(values, dtype=np.int64) & LOW


def exponents(values: np.ndarray) -> np.ndarray:
    """The Z_q component of packed values: what Exp raises `W` to."""
    return np.asarray(values, dtype=np.int64) >> 32


def power(values: np.ndarray, e: int | np.ndarray, m: int = P) -> np.ndarray:
    """``values ** e`` mod ``m`` by squaring (every product below 2**50); ``e`` >= 0, one or one per element."""
    base = np.asarray(values, dtype=np.int64) % m
    e = np.asarray(e, dtype=np.int64)
    out = np.ones(np.broadcast_shapes(base.shape, e.shape), dtype=np.int64)
    while e.any():
        out = np.where(e & 1, out * base % m, out)
        base = base * base % m
        e = e >> 1
    return out


def modinv(a: int, m: int = P) -> int:
    """The inverse of ``a`` mod ``m`` (Fermat); stands in for division by a constant such as a pool's 1/count."""
    a %= m
    if a == 0:
        raise ZeroDivisionError(f"0 has no inverse mod {m}")
    return pow(a, m - 2, m)


def inverse(values: np.ndarray, m: int = P) -> np.ndarray:
    """Each element's inverse mod ``m``, 0 for 0: the field's stand-in for 1/x, exact wherever x is not 0."""
    return power(values, m - 2, m)


def constant(c: float, m: int = P) -> int:
    """The residue of a real constant: the number it is read as (`taso.ops.numbers.read`): a float that rounds a
    known irrational or decimal (sqrt 2 as 1.4142135) is that number, any other is the dyadic rational n / 2**k
    it is, mapped to n * inv(2)**k, so 0.5 or 1e-5 (as a float) is exact and 0.5 + 0.5 is 1 mod m as it is over
    the reals."""
    return numbers.read(c).residue(m)  # raises on nan and inf


def constants(array: np.ndarray, m: int = P) -> np.ndarray:
    """`constant` of each element of an array of floats or integers."""
    a = np.asarray(array)
    if a.dtype.kind != "f":
        return a.astype(np.int64) % m
    return np.vectorize(lambda c: constant(float(c), m), otypes=[np.int64])(a).reshape(a.shape)


class Ring(int):
    """The key of one evaluation's random functions, as a field rule's fourth argument always was (an int, so
    rules written against that signature keep working), carrying which component the rule computes: Z_``m``
    for m = `P` or `Q`. For the Z_p call, ``partner`` holds the Z_q components of the rule's inputs (Exp reads
    them); the Z_q call has none."""

    m: int
    partner: tuple[np.ndarray, ...] | None

    def __new__(cls, key: int, m: int = P, partner: tuple[np.ndarray, ...] | None = None) -> Ring:
        ring = super().__new__(cls, key)
        ring.m, ring.partner = m, partner
        return ring

    def keyed(self, values: np.ndarray, op: str) -> np.ndarray:
        """`keyed` in this component."""
        return keyed(values, self, op, self.m)

    def inverse(self, values: np.ndarray) -> np.ndarray:
        return inverse(values, self.m)

    def modinv(self, a: int) -> int:
        return modinv(a, self.m)

    def constant(self, c: float) -> int:
        return constant(c, self.m)

    def sqrt(self, values: np.ndarray) -> np.ndarray:
        """x ** ((m + 1) / 4), a square root of x where x is a residue (m = 3 mod 4); a keyed value where it is
        not. A non-residue plays the part of a negative number, whose real root is nan: x ** ((m + 1) / 4) there
        would be a root of -x, and make the root even (sqrt(-x) = sqrt(x)), pairing sqrt(x) ** 2 with sqrt(x * x)
        and sqrt(x * y) with sqrt(x) * sqrt(y), which differ over the reals where x < 0."""
        x = np.asarray(values, dtype=np.int64) % self.m
        root = power(x, (self.m + 1) // 4, self.m)
        return np.where(root * root % self.m == x, root, self.keyed(x, "Sqrt"))

    def exp(self, exponents: np.ndarray) -> np.ndarray:
        """w ** x in Z_p for exponents x in Z_q, w of order q: exp(a + b) = exp(a) * exp(b) exactly. w is the
        square of a number drawn from the key (a square other than 1 has order q, as p - 1 = 2q), so e is no fixed
        residue that a constant could meet (w = 4 would make sqrt(exp(1)) the constant 2)."""
        root = salt(int(self), "exp") % (P - 3) + 2  # in [2, p - 2]: its square is neither 0 nor 1
        return power(np.full(np.shape(exponents), root * root % P), exponents, P)

    def mean(self, values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        """The mean over ``axes`` (kept, of size 1): the sum times the inverse of the count, exact."""
        count = int(np.prod([np.shape(values)[a] for a in axes]))
        return np.sum(values, axis=axes, keepdims=True) % self.m * self.modinv(count) % self.m

    def power(self, values: np.ndarray, e: int) -> np.ndarray:
        """``values ** e`` for an integer ``e``; a negative one through the inverse."""
        return power(values, e, self.m) if e >= 0 else power(self.inverse(values), -e, self.m)


def salt(*parts: object) -> int:
    """A stable 64-bit number from any printable parts (Python's own hash is randomised per process)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little")


def _splitmix(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # uint64 wrap-around is the point; 0-d arrays would warn
        return _splitmix_wrapping(z)


def _splitmix_wrapping(z: np.ndarray) -> np.ndarray:
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keyed(values: np.ndarray, key: int, op: str, m: int = P) -> np.ndarray:
    """A random function of each element, fixed by (key, op): equal inputs give equal outputs, in [0, m)."""
    k = np.uint64(salt(int(key), op) & _MASK)
    with np.errstate(over="ignore"):
        z = np.asarray(values).astype(np.uint64) * np.uint64(_GOLDEN) + k
    return (_splitmix(z) % np.uint64(m)).astype(np.int64)


def keyed_multiset(windows: np.ndarray, key: int, op: str, m: int = P) -> np.ndarray:
    """A random *symmetric* function of the last axis (a pooling window): sorted, then hashed in a chain."""
    w = np.sort(np.asarray(windows).astype(np.uint64), axis=-1)
    h = np.full(w.shape[:-1], np.uint64(salt(int(key), op) & _MASK), dtype=np.uint64)
    for j in range(w.shape[-1]):
        with np.errstate(over="ignore"):
            h = _splitmix(h * np.uint64(_GOLDEN) + w[..., j])
    return (h % np.uint64(m)).astype(np.int64)
