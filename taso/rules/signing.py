"""The user's key, which signs the proofs `subst verify` makes: a proof record alone can be computed by anyone.

A proof record binds its rule (`taso.rules.provenance.bound`), but the public code computes that binding for
any rule, false ones too. So `subst verify` signs each proof's binding with HMAC-SHA256 under a secret key of
the user's, and `subst optimize` applies a proof only where the signature verifies under the same key (or the
store's proofs are the shipped ones, `taso.rules.provenance.SHIPPED`). The key lives outside every store and
cache: ``$XDG_CONFIG_HOME/subst/trust.key``, else ``~/.config/subst/trust.key``, made on first need (0600 in a
0700 folder) and refused where another user owns it or could read or replace it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path

from taso.errors import BadInput

KEY_BYTES = 32
"""A key's length: HMAC-SHA256's block is 64 bytes, its security 256 bits."""


def key_path() -> Path:
    """``$XDG_CONFIG_HOME/subst/trust.key``, else ``~/.config/subst/trust.key``."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "subst" / "trust.key"


def user_key(create: bool = False) -> bytes | None:
    """The user's key; None where there is none and ``create`` is off (nothing was signed by this user then).
    `BadInput` where the file or its folder is another user's or open to others: whoever can read the key can
    sign false rules, and whoever can replace it can make the user's runs trust their signatures."""
    path = key_path()
    if not path.exists():
        if not create:
            return None
        _make(path)
    _require_private(path.parent, "folder")
    _require_private(path, "file")
    try:
        key = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: not a subst trust key ({e}); remove it and run `subst verify --force`") from None
    if len(key) != KEY_BYTES:
        raise BadInput(f"{path}: not a subst trust key ({len(key)} bytes, want {KEY_BYTES})")
    return key


def sign(key: bytes, digest: str) -> str:
    """The signature of a proof's binding ``digest``."""
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def verifies(key: bytes | None, digest: str, signature: object) -> bool:
    """Whether ``signature`` is ``digest``'s under ``key`` (compared in constant time, as bytes: a store's text
    may be any)."""
    if key is None or not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign(key, digest).encode(), signature.encode())


def _make(path: Path) -> None:
    """A new random key at ``path``, written whole before it appears (a link of a finished temp file, which
    fails where another process made one first: theirs is kept)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".trust-", suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(KEY_BYTES) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as e:
        raise BadInput(f"{path}: cannot make the trust key ({e.strerror})") from None


def _require_private(path: Path, what: str) -> None:
    """Refuse ``path`` unless the user owns it and no one else may write it (nor read it, for the key)."""
    st = path.stat()
    if st.st_uid != os.getuid():
        raise BadInput(f"{path}: the trust key's {what} is owned by another user (uid {st.st_uid}); subst refuses it")
    others = stat.S_IWGRP | stat.S_IWOTH | (stat.S_IRWXG | stat.S_IRWXO if what == "file" else 0)
    if st.st_mode & others:
        mode = oct(stat.S_IMODE(st.st_mode))
        raise BadInput(f"{path}: the trust key's {what} is open to other users (mode {mode}); run chmod go-rwx on it")
