"""Length distributions without a dataset: `--synthetic SPEC` and `--lengths FILE`.

    SPEC      := COMPONENT ( "+" COMPONENT )*          a mixture: the components' lengths together
    COMPONENT := DIST [ ":" KEY "=" NUMBER ( "," KEY "=" NUMBER )* ]
    NUMBER    := 450 | 0.9 | 2e4 | 20k | 1M | 1_000_000

    DIST       parameters (default)                       lengths
    lognormal  median (450), sigma (0.9)                  round(exp(N(ln median, sigma)))
    normal     mean (512), std (128)                      round(N(mean, std))
    uniform    min (1), max (2048)                        integers in [min, max], each equally likely
    constant   value (512)                                all equal
    every DIST n (10000), min (1), max (none), seed (0)   then clipped to [min, max]

    lognormal:median=450,sigma=0.9,n=20000,max=4096,seed=0
    lognormal:median=300,n=9000+constant:value=8192,n=100     a bulk and a long-context tail

Component i draws from default_rng([seed, i]), so a mixture's parts are independent and every
spec is reproducible.

    --lengths FILE    lengths.txt             lengths.npy
                      412                     a 1-D integer array, shape (n,)
                      1033
                                  ← blank lines are skipped
                      97
                      → int32[n], every length >= 1 (a bad line is named by its number)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from packtool.errors import PacktoolError, UsageError

EXAMPLE = "lognormal:median=450,sigma=0.9,n=20000,max=4096,seed=0"
MAX_N = 500_000_000  # 500M int32 lengths = 2 GB
MAX_LENGTH = 2**31 - 1  # lengths are int32: min, max and value at most this

_COMMON = {"n": 10_000, "min": 1, "max": None, "seed": 0}
DISTRIBUTIONS: dict[str, dict[str, float | None]] = {
    "lognormal": {"median": 450, "sigma": 0.9, **_COMMON},
    "normal": {"mean": 512, "std": 128, **_COMMON},
    "uniform": {**_COMMON, "max": 2048},
    "constant": {"value": 512, **_COMMON},
}
_INTEGER = {"n", "min", "max", "seed", "value"}
_SUFFIX = {"k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9}
_NUMBER = re.compile(r"^([+-]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([kKmMgG]?)$")


_EXAMPLES = {
    "lognormal": EXAMPLE,
    "normal": "normal:mean=512,std=128,n=10000,min=16,max=4096",
    "uniform": "uniform:min=16,max=2048,n=10000",
    "constant": "constant:value=1024,n=1000",
}


def _fail(part: str, why: str) -> UsageError:
    dist = (part or "").partition(":")[0].strip().lower()
    return UsageError(
        f"--synthetic {part!r}: {why}; e.g. --synthetic {_EXAMPLES.get(dist, EXAMPLE)}"
    )


@dataclass(frozen=True)
class Component:
    dist: str
    params: tuple[tuple[str, float | None], ...]  # every parameter, defaults filled in

    def get(self, key: str):
        return dict(self.params)[key]


def _number(text: str, key: str, part: str) -> float:
    m = _NUMBER.match(text.strip())
    if not m:
        raise _fail(part, f"{key}={text!r} is not a number")
    try:
        value = float(m.group(1).replace("_", "")) * _SUFFIX.get(m.group(2), 1.0)
    except ValueError:
        raise _fail(part, f"{key}={text!r} is not a number") from None
    if not np.isfinite(value):  # 1e400 reads as inf
        raise _fail(part, f"{key}={text!r} is not a finite number")
    if key in _INTEGER:
        if value != int(value):
            raise _fail(part, f"{key}={text!r} must be a whole number")
        return int(value)
    return value


def _component(text: str) -> Component:
    name, _, args = text.partition(":")
    name = name.strip().lower()
    if name not in DISTRIBUTIONS:
        raise _fail(text, f"unknown distribution {name!r} (known: {', '.join(DISTRIBUTIONS)})")
    params = dict(DISTRIBUTIONS[name])
    seen = set()
    for item in (a.strip() for a in args.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not key:
            raise _fail(text, f"{item!r} is not KEY=VALUE")
        if key not in params:
            raise _fail(text, f"{name} has no parameter {key!r} (it takes {', '.join(params)})")
        if key in seen:
            raise _fail(text, f"{key} is given twice")
        seen.add(key)
        params[key] = _number(value, key, text)
    _check(name, params, text)
    return Component(name, tuple(params.items()))


def _check(name: str, p: dict, part: str) -> None:
    for key in ("value", "min", "max"):  # lengths are int32
        if p.get(key) is not None and p[key] > MAX_LENGTH:
            raise _fail(part, f"{key}={p[key]:.6g} is above the longest length, {MAX_LENGTH:,}")
    if not 1 <= p["n"] <= MAX_N:
        raise _fail(part, f"n={p['n']} must be in 1..{MAX_N:,}")
    if p["min"] < 1:
        raise _fail(part, f"min={p['min']} must be >= 1 (an example has at least one token)")
    if p["max"] is not None and p["max"] < p["min"]:
        raise _fail(part, f"max={p['max']} is below min={p['min']}")
    if p["seed"] < 0:
        raise _fail(part, f"seed={p['seed']} must be >= 0")
    if name == "lognormal":
        if p["median"] <= 0:
            raise _fail(part, f"median={p['median']} must be > 0")
        if p["sigma"] < 0:
            raise _fail(part, f"sigma={p['sigma']} must be >= 0")
    elif name == "normal" and p["std"] < 0:
        raise _fail(part, f"std={p['std']} must be >= 0")
    elif name == "constant" and p["value"] < 1:
        raise _fail(part, f"value={p['value']} must be >= 1")


def parse_spec(spec: str) -> tuple[Component, ...]:
    """Parse a --synthetic SPEC (grammar in the module docstring); UsageError names the bad part."""
    if not spec or not spec.strip():
        raise _fail(spec, "empty spec")
    # "+" joins components; a "+" inside a number (2e+4) is followed by a digit, not a letter
    parts = re.split(r"\+(?=\s*[A-Za-z])", spec.strip())
    return tuple(_component(part.strip()) for part in parts)


def _draw(c: Component, index: int) -> np.ndarray:
    p = dict(c.params)
    rng = np.random.default_rng([int(p["seed"]), index])
    n = int(p["n"])
    if c.dist == "lognormal":
        x = rng.lognormal(np.log(p["median"]), p["sigma"], n)
    elif c.dist == "normal":
        x = rng.normal(p["mean"], p["std"], n)
    elif c.dist == "uniform":
        return rng.integers(int(p["min"]), int(p["max"]) + 1, n, dtype=np.int64).astype(np.int32)
    else:
        x = np.full(n, float(p["value"]))
    hi = float(p["max"]) if p["max"] is not None else float(2**31 - 1)
    return np.clip(np.rint(x), p["min"], hi).astype(np.int32)


def synthetic_lengths(spec: str) -> np.ndarray:
    """int32 lengths, >= 1, for a --synthetic SPEC."""
    parts = parse_spec(spec)
    return np.concatenate([_draw(c, i) for i, c in enumerate(parts)])


def read_lengths(path: str) -> np.ndarray:
    """int32 lengths from a `.npy` (1-D integer array) or a text file (one integer per line;
    blank lines ignored). Every length must be >= 1."""
    if not os.path.isfile(path):
        raise UsageError(f"--lengths {path!r}: no such file")
    if path.endswith(".npy"):
        try:
            arr = np.load(path, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - any unreadable .npy is bad input
            raise PacktoolError(f"{path}: not a readable .npy file ({e})") from None
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise PacktoolError(
                f"{path}: expected a 1-D integer array, got {arr.dtype} with shape {arr.shape}"
            )
        values = arr.astype(np.int64)
    else:
        with open(path, "rb") as f:
            text = f.read()
        try:
            values = np.array(text.split(), dtype=np.int64)
        except ValueError:
            for lineno, line in enumerate(text.splitlines(), 1):
                token = line.strip()
                if token and not re.fullmatch(rb"[+-]?\d+", token):
                    shown = token[:40].decode("utf-8", "replace")
                    raise PacktoolError(
                        f"{path}:{lineno}: {shown!r} is not an integer; the file needs one length per line"
                    ) from None
            raise PacktoolError(f"{path}: one integer length per line expected") from None
    if values.size == 0:
        raise PacktoolError(f"{path}: no lengths in the file")
    bad = np.flatnonzero(values < 1)
    if bad.size:
        i = int(bad[0])
        raise PacktoolError(
            f"{path}: length #{i + 1} is {int(values[i])}; lengths must be >= 1 ({bad.size} such values)"
        )
    if values.max() >= 2**31:
        raise PacktoolError(f"{path}: length {int(values.max())} does not fit in int32")
    return values.astype(np.int32)
