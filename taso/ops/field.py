"""Arithmetic in the prime field Z_p that fingerprints are computed in, and keyed random functions over it.

Why p = 33554393 (the largest prime below 2**25): field elements are below 2**25, so a product is below 2**50
and int64 can add up 2**13 = 8192 of them before it could overflow. The longest sums the generator's graphs make
are a conv over concatenated channels (8 channels x 3 x 3 = 72 terms), far inside that. A prime this large keeps
Schwartz-Zippel collisions of two different degree-d polynomial programs at about d / p < 1e-6 per element.

Non-linear element-wise ops (relu, sigmoid, tanh) and max pooling become *keyed random functions*: a
splitmix64 hash of (key, op, value) reduced mod p. Only identities that hold for every such function survive,
the way an uninterpreted function behaves in z3.
"""

from __future__ import annotations

import hashlib

import numpy as np

P = 33_554_393
"""The field's prime: the largest prime below 2**25 (see the module docstring for why)."""

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def modinv(a: int) -> int:
    """The inverse of ``a`` mod P (Fermat); stands in for division by a constant such as a pool's 1/count."""
    a %= P
    if a == 0:
        raise ZeroDivisionError("0 has no inverse mod P")
    return pow(a, P - 2, P)


def inverse(values: np.ndarray) -> np.ndarray:
    """Each element's inverse mod P (Fermat, by squaring: every product stays below 2**50), 0 for 0: the field's
    stand-in for 1/x, exact wherever x is not 0."""
    base = np.asarray(values, dtype=np.int64) % P
    out = np.ones_like(base)
    e = P - 2
    while e:
        if e & 1:
            out = out * base % P
        base = base * base % P
        e >>= 1
    return out


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


def keyed(values: np.ndarray, key: int, op: str) -> np.ndarray:
    """A random function of each element, fixed by (key, op): equal inputs give equal outputs, in [0, P)."""
    k = np.uint64(salt(key, op) & _MASK)
    with np.errstate(over="ignore"):
        z = np.asarray(values).astype(np.uint64) * np.uint64(_GOLDEN) + k
    return (_splitmix(z) % np.uint64(P)).astype(np.int64)


def keyed_multiset(windows: np.ndarray, key: int, op: str) -> np.ndarray:
    """A random *symmetric* function of the last axis (a pooling window): sorted, then hashed in a chain."""
    w = np.sort(np.asarray(windows).astype(np.uint64), axis=-1)
    h = np.full(w.shape[:-1], np.uint64(salt(key, op) & _MASK), dtype=np.uint64)
    for j in range(w.shape[-1]):
        with np.errstate(over="ignore"):
            h = _splitmix(h * np.uint64(_GOLDEN) + w[..., j])
    return (h % np.uint64(P)).astype(np.int64)
