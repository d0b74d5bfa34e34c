"""Hidden-case shapes drawn from the grading seed.

The exercises declare each hidden case with fixed parameters (``hidden("odd_size", n=1237)``),
and the package is public, so a kernel could special-case exactly those shapes. At grading
time :func:`draw_cases` replaces the size parameters an exercise names in ``hidden_sizes``
(parameter -> unit, the tile or block the kernel cuts that size into) with values drawn from a
per-student, per-exercise seed, keeping what the declared value was chosen to exercise:

* ``1`` stays ``1`` (a single row / element);
* a multiple of the unit stays a multiple (exact tiles);
* one off a multiple stays one off on the same side (tile minus one / plus one);
* below one unit stays below it, with the same parity;
* anything else stays ragged (not a multiple, not one off) with the same parity (odd stays odd),
  within -40%..+40% of the declared value (+25% above 256, so the emulator's time per case stays
  about what the exercise declared);
* a size of 4096 or more never shrinks and grows by at most 1% (such cases are declared large to
  pass a boundary: element indices past 2^24, where a float no longer holds every integer);
* ``d`` (a runtime head dimension) keeps its divisibility by 8 and stays within 2..127 (or
  8..120), and ``d = 128`` stays 128;
* dependent parameters follow: ``lengths`` (key lengths per batch entry) keep 0 and N ("empty"
  and "full") and the other entries their class in N's unit, below the new ``N``; row indices
  such as ``empty_a`` keep ``rows`` above them.

Parameters an exercise does not name (counts such as ``B``, ``H``, ``splits``; a compile-time
``HEAD_DIM``; sizes its contract ties to a multiple, declared with that multiple as the unit),
floats and visible cases are never changed. The exercises keep their declarations; only the
grading worker draws.
"""
from __future__ import annotations

import dataclasses
import random

TILE = 16
LARGE = 4096  # sizes from here on only grow (at most 1%): a case declared past a size boundary stays past it
INDEX_LISTS = {"empty_a": "rows", "empty_b": "rows"}  # tuple of row indices -> the dim they index


def _ragged(v: int, unit: int) -> bool:
    return v % unit not in (0, 1, unit - 1)


def draw_length(v: int, rng: random.Random, lo_floor: int = 1, unit: int = TILE, hi_cap: int | None = None) -> int:
    """A size of the same class as ``v`` in ``unit``, at least ``lo_floor`` and at most ``hi_cap``."""
    if v <= 1:
        return v
    up = 1.25 if v > 256 else 1.4
    lo, hi = max(lo_floor, 2, int(v * 0.6)), max(int(v * up), lo_floor + 1, 3)
    if v >= LARGE:  # declared large to pass a boundary (indices past 2^24): never smaller, a little larger
        lo, hi = v, v + max(2 * unit + 2, v // 100)
    if hi_cap is not None:
        hi = min(hi, hi_cap)
    r = v % unit
    if unit < v < LARGE and (r == 0 or r in (1, unit - 1)):  # a whole unit either side, so large units still move
        lo, hi = min(lo, max(lo_floor, 2, v - unit)), max(hi, v + unit) if hi_cap is None else min(max(hi, v + unit),
                                                                                                        hi_cap)
    if r == 0:
        ks = [k for k in range(max(1, -(-lo // unit)), hi // unit + 1) if k * unit >= lo_floor]
        return rng.choice(ks) * unit if ks else v
    if unit > 2 and r in (1, unit - 1) and v > unit:
        off = 1 if r == 1 else -1
        least = max(lo, 2, unit + 1)  # k * unit + off within [least, hi], k from 1 (a range: 2^24 / unit ks)
        ks = range(max(1, -(-(least - off) // unit)), min(hi // unit + 1, (hi - off) // unit) + 1)
        return (rng.choice(ks) * unit + off) if len(ks) else v
    if v < unit:
        # below one unit: any value under it with the same parity
        cands = [x for x in range(max(2, lo_floor), min(unit, hi + 1)) if x % 2 == v % 2]
        return rng.choice(cands) if cands else v
    cands = [x for x in range(max(lo, unit + 2), hi + 1) if x % 2 == v % 2 and _ragged(x, unit) and x >= lo_floor]
    return rng.choice(cands) if cands else v


def draw_head_dim(v: int, rng: random.Random) -> int:
    if v >= 128 or v <= 1:
        return v
    if v % 8 == 0:
        return rng.choice([x for x in range(max(8, v - 24), min(120, v + 24) + 1, 8)])
    cands = [x for x in range(max(2, v - 16), min(127, v + 16) + 1) if x % 2 == v % 2 and x % 8]
    return rng.choice(cands) if cands else v


def draw_params(params: dict, rng: random.Random, sizes: dict) -> dict:
    """``params`` with the sizes named in ``sizes`` (parameter -> unit) drawn; see the module docstring."""
    out = dict(params)
    floors = {}
    for key, dim in INDEX_LISTS.items():
        if isinstance(params.get(key), (tuple, list)) and params[key]:
            floors[dim] = max(floors.get(dim, 1), max(params[key]) + 1)
    for key in sorted(params):  # sorted: the draw order never depends on declaration order
        v = params[key]
        if isinstance(v, bool) or not isinstance(v, int) or key not in sizes:
            continue
        out[key] = draw_head_dim(v, rng) if key == "d" else draw_length(v, rng, floors.get(key, 1), sizes[key])
    lengths = params.get("lengths")
    if isinstance(lengths, (tuple, list)) and "N" in sizes and "N" in params:
        old, new = params["N"], out["N"]
        drawn = []
        for length in lengths:
            if length <= 0 or length >= old:
                drawn.append(0 if length <= 0 else new)
            else:
                got = draw_length(length, rng, 1, sizes["N"], hi_cap=new - 1)
                # no value of its class below the new N: scaled with N instead
                drawn.append(got if 1 <= got < new else min(new - 1, max(1, round(length * new / old))) if new > 1 else new)
        out["lengths"] = type(lengths)(drawn)
    return out


def draw_cases(cases: list, seed: int, sizes: dict) -> list:
    """The exercise's cases with every hidden case's declared sizes (``hidden_sizes``: parameter ->
    unit) drawn from ``seed``."""
    rng = random.Random(seed)
    out = []
    for c in cases:
        if getattr(c, "hidden", False):
            out.append(dataclasses.replace(c, params=draw_params(c.params, rng, sizes)))
        else:
            out.append(c)
    return out
