"""Settings from flags and config files: ``--ops`` specs, the pool and constants of a JSON or TOML config."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path

from taso.errors import BadInput
from taso.generate.forms import BIAS_FORMS, BIASES, FORMS, TASO_FORMS, TASO_POOL, InputClass, Settings, Splits


def parse_ops(spec: str, base: Sequence[str] = TASO_FORMS) -> tuple[str, ...]:
    """Forms named by ``spec``: comma-separated form names (``conv_s1_same``), op names (``Conv``: all its forms),
    ``taso`` (TASO's set) or ``bias`` (the biased convs); a leading ``+`` or ``-`` adds to or removes from
    ``base``."""
    chosen: list[str] = []
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise BadInput("--ops: no op forms given")
    if items[0][0] in "+-":
        chosen = list(base)
    for item in items:
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("+", item)
        if name == "taso":
            names = list(TASO_FORMS)
        elif name == "bias":
            names = list(BIAS_FORMS)
        elif name in FORMS:
            names = [name]
        else:
            names = [f for f, form in FORMS.items() if form.op.lower() == name.lower()]
        if not names:
            ops_ = sorted({f.op for f in FORMS.values()})
            raise BadInput(f"--ops: unknown form or op {name!r}; forms: {', '.join(FORMS)}; ops: {', '.join(ops_)}")
        for n in names:
            if sign == "-" and n in chosen:
                chosen.remove(n)
            elif sign == "+" and n not in chosen:
                chosen.append(n)
    if not chosen:
        raise BadInput("--ops: that leaves no op forms")
    return tuple(chosen)


def load_config(path: Path) -> dict:
    """A config file (JSON, or TOML by its .toml suffix) as a dict, checked for unknown keys."""
    try:
        text = path.read_text()
    except OSError as e:
        raise BadInput(f"{path}: cannot read config ({e.strerror})") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'} ({e})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a config file holds a table/object at the top")
    unknown = set(data) - {"max_ops", "ops", "inputs", "constants", "seed"}
    if unknown:
        raise BadInput(f"{path}: unknown config key(s) {sorted(unknown)}; known: max_ops, ops, inputs, constants, seed")
    return data


def settings_from(
    config: dict | None = None, ops: str | None = None, max_ops: int | None = None, seed: int | None = None
) -> Settings:
    """Settings from a config dict (see `load_config`) overridden by flags."""
    try:
        return _settings_from(config or {}, ops, max_ops, seed)
    except (TypeError, ValueError, AttributeError) as e:
        raise BadInput(f"config: a value has the wrong type ({e})") from None


def _settings_from(config: dict, ops: str | None, max_ops: int | None, seed: int | None) -> Settings:
    forms = TASO_FORMS
    if "ops" in config:
        cfg_ops = config["ops"]
        forms = parse_ops(",".join(cfg_ops) if isinstance(cfg_ops, list) else str(cfg_ops))
    if ops:
        forms = parse_ops(ops, forms)
    pool = (*TASO_POOL, BIASES) if set(forms) & set(BIAS_FORMS) else TASO_POOL
    if "inputs" in config:
        pool = tuple(_input_class(i, c) for i, c in enumerate(config["inputs"]))
        prefixes = [c.prefix for c in pool]
        if len(set(prefixes)) != len(prefixes):
            raise BadInput("config inputs: two classes share a prefix")
    constants = tuple((k, tuple(int(d) for d in v)) for k, v in sorted(config.get("constants", {}).items()))
    for k, _ in constants:
        if k not in FORMS or FORMS[k].arity:
            raise BadInput(f"config constants: {k!r} is not a constant form (ones, eye, conv_identity, pool_kernel)")
    n = max_ops if max_ops is not None else int(config.get("max_ops", 3))
    if not 0 <= n <= 6:
        raise BadInput(f"max_ops must be between 0 and 6, got {n}")
    return Settings(n, forms, pool, seed if seed is not None else int(config.get("seed", 0)), constants)


def _input_class(i: int, c: object) -> InputClass:
    where = f"config inputs[{i}]"
    if (
        not isinstance(c, dict)
        or set(c) - {"prefix", "shape", "kind", "count", "splits"}
        or not {"prefix", "shape"} <= set(c)
    ):
        raise BadInput(f"{where}: give prefix, shape and optionally kind (activation|weight), count and splits")
    prefix, kind, count = str(c["prefix"]), c.get("kind", "activation"), c.get("count", 1)
    if not prefix.isidentifier() or prefix[-1].isdigit():
        raise BadInput(f"{where}: prefix {prefix!r} must be a name not ending in a digit")
    if kind not in ("activation", "weight"):
        raise BadInput(f"{where}: kind must be activation or weight, not {kind!r}")
    shape = c["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
        raise BadInput(f"{where}: shape must be a list of positive integers")
    if not isinstance(count, int) or not 1 <= count <= 8:
        raise BadInput(f"{where}: count must be 1..8")
    return InputClass(prefix, tuple(shape), kind, count, _input_splits(where, shape, c.get("splits", {})))


def _input_splits(where: str, shape: list[int], splits: object) -> Splits:
    """``{axis: [part sizes]}`` from a config, checked against the shape."""
    if not isinstance(splits, dict):
        raise BadInput(f"{where}: splits must map an axis to a list of part sizes, e.g. {{1 = [4, 4]}}")
    out = []
    for axis, sizes in splits.items():
        a = int(axis) if str(axis).isdigit() else -1
        if not 0 <= a < len(shape):
            raise BadInput(f"{where}: splits axis {axis!r} is not an axis of shape {shape}")
        if not isinstance(sizes, list) or len(sizes) < 2 or not all(isinstance(d, int) and d > 0 for d in sizes):
            raise BadInput(f"{where}: splits of axis {a} must list two or more positive sizes")
        if sum(sizes) != shape[a]:
            raise BadInput(f"{where}: splits of axis {a} add up to {sum(sizes)}, not the size {shape[a]}")
        out.append((a, tuple(sizes)))
    return tuple(sorted(out))
