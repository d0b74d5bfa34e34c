"""Hidden-case shapes drawn from the grading seed.

The exercises declare each hidden case with fixed parameters (``hidden("odd_size", n=1237)``),
and the package is public, so a kernel could special-case exactly those shapes. At grading
time :func:`draw_cases` replaces every size parameter of a hidden case with a value drawn
from a per-student, per-exercise seed, keeping what the declared value was chosen to exercise:

* ``1`` stays ``1`` (a single row / element);
* a multiple of 16 stays a multiple of 16 (exact tiles), and the largest head dimension
  (``d = 128``) stays 128;
* ``16k +- 1`` stays one off a multiple of 16 on the same side (tile minus one / plus one);
* anything else stays ragged (not a multiple of 16, not one off) with the same parity (odd
  stays odd), within -40%..+40% of the declared value (+25% above 256, so the emulator's time
  per case stays about what the exercise declared);
* a head dimension keeps its divisibility by 8 and stays within 2..127 (or 8..120);
* dependent parameters follow: ``lengths`` (key lengths per batch, 0 and N kept as "empty"
  and "full") are rescaled to the new ``N``, and row indices such as ``empty_a`` keep ``rows``
  above them.

Counts (``B``, ``H``, ``BH``), floats (scales, spreads) and visible cases are never changed.
This is a transformation of the declared cases, done only in the grading worker; the
exercises themselves keep their declarations (see the report in the module docstring of
:mod:`grader.autograde` for the declaration the exercises should grow instead).
"""
from __future__ import annotations

import dataclasses
import random

TILE = 16
LENGTH_DIMS = ("n", "N", "M", "K", "rows", "cols", "keys")
HEAD_DIMS = ("d",)
INDEX_LISTS = {"empty_a": "rows", "empty_b": "rows"}  # tuple of row indices -> the dim they index


def _ragged(v: int) -> bool:
    return v % TILE not in (0, 1, TILE - 1)


def draw_length(v: int, rng: random.Random, lo_floor: int = 1) -> int:
    if v <= 1:
        return v
    up = 1.25 if v > 256 else 1.4
    lo, hi = max(lo_floor, 2, int(v * 0.6)), max(int(v * up), lo_floor + 1, 3)
    r = v % TILE
    if r == 0:
        ks = [k for k in range(max(1, lo // TILE), hi // TILE + 1) if k * TILE >= lo_floor] or [v // TILE]
        return rng.choice(ks) * TILE
    if r in (1, TILE - 1) and v > TILE:
        off = 1 if r == 1 else -1
        ks = [k for k in range(max(1, (lo - off) // TILE), (hi - off) // TILE + 1) if 1 < k * TILE + off and k * TILE + off >= lo_floor]
        return (rng.choice(ks) * TILE + off) if ks else v
    if v < TILE:
        # below one tile: any value under the tile with the same parity
        cands = [x for x in range(max(2, lo_floor), TILE) if x % 2 == v % 2]
        return rng.choice(cands) if cands else v
    cands = [x for x in range(lo, hi + 1) if x % 2 == v % 2 and _ragged(x) and x >= lo_floor]
    return rng.choice(cands) if cands else v


def draw_head_dim(v: int, rng: random.Random) -> int:
    if v >= 128 or v <= 1:
        return v
    if v % 8 == 0:
        return rng.choice([x for x in range(max(8, v - 24), min(120, v + 24) + 1, 8)])
    cands = [x for x in range(max(2, v - 16), min(127, v + 16) + 1) if x % 2 == v % 2 and x % 8]
    return rng.choice(cands) if cands else v


def draw_params(params: dict, rng: random.Random, keep: tuple = ()) -> dict:
    out = dict(params)
    floors = {}
    for key, dim in INDEX_LISTS.items():
        if isinstance(params.get(key), (tuple, list)) and params[key]:
            floors[dim] = max(floors.get(dim, 1), max(params[key]) + 1)
    for key in sorted(params):  # sorted: the draw order never depends on declaration order
        v = params[key]
        if isinstance(v, bool) or not isinstance(v, int) or key in keep:
            continue
        if key in LENGTH_DIMS:
            out[key] = draw_length(v, rng, floors.get(key, 1))
        elif key in HEAD_DIMS:
            out[key] = draw_head_dim(v, rng)
    lengths = params.get("lengths")
    if isinstance(lengths, (tuple, list)) and "N" in params:
        old, new = params["N"], out["N"]
        scaled = []
        for length in lengths:
            if length <= 0 or length >= old:
                scaled.append(0 if length <= 0 else new)
            else:
                scaled.append(min(new - 1, max(1, round(length * new / old))))
        out["lengths"] = type(lengths)(scaled)
    return out


def draw_cases(cases: list, seed: int, keep: tuple = ()) -> list:
    """The exercise's cases with every hidden case's sizes drawn from ``seed`` (except the
    parameters named in ``keep``: a Triton exercise's block dimensions must stay powers of two)."""
    rng = random.Random(seed)
    out = []
    for c in cases:
        if getattr(c, "hidden", False):
            out.append(dataclasses.replace(c, params=draw_params(c.params, rng, keep)))
        else:
            out.append(c)
    return out
