"""A case's extreme-logit parameters must reach its inputs: every case row that asks for `negative`, `falling` or
`late_peak` scores (grader/exercises/shared.py: extreme_scores) gets them from its exercise's input maker. An
input maker of its own that skipped them would turn the case into an ordinary random one, silently (module 08's
did, until a student trial found a max initialised to 0 passing)."""
from types import SimpleNamespace

import numpy as np

import grader.exercises  # noqa: F401  (registers every exercise)
from grader.arrays import bf16_values
from grader.exercise_rows import REGISTRY

EXTREMES = ("negative", "falling", "late_peak")
FIRST_KEYS = 16


def values(a):
    a = np.asarray(a)
    return bf16_values(a).astype(np.float64) if a.dtype == np.uint16 else a.astype(np.float64)


def scores(ex, c):
    """scale * Q K^T of the case's inputs, or None for an exercise whose inputs are not Q and K (a merge's
    partial results, made from such inputs inside its maker)."""
    p = SimpleNamespace(**c.params)
    x = ex.make_inputs(p, np.random.default_rng(c.seed or 1))
    if "Q" not in x or "K" not in x:
        return None
    q, k = values(x["Q"]), values(x["K"])
    scale = c.params.get("scale", 1.0 / np.sqrt(q.shape[-1]))
    return scale * (q @ np.swapaxes(k, -1, -2))


def test_every_extreme_case_gets_its_extreme_scores():
    seen = {name: 0 for name in EXTREMES}
    for ex in REGISTRY.values():
        for c in ex.cases:
            asked = [name for name in EXTREMES if c.params.get(name)]
            if not asked or not hasattr(ex, "make_inputs") or ex.make_inputs is None:
                continue
            s = scores(ex, c)
            if s is None:
                continue
            where = f"{ex.id}, case '{c.name}'"
            if "negative" in asked:
                assert s.max() <= -c.params["negative"] / 2, f"{where}: scores reach {s.max():.3g}"
            if "falling" in asked:
                gap = s[..., :FIRST_KEYS].min(axis=-1) - s[..., FIRST_KEYS:].max(axis=-1)
                assert gap.min() >= c.params["falling"] / 4, f"{where}: the first keys lead by only {gap.min():.3g}"
            if "late_peak" in asked:  # the last key, or with key padding each batch entry's last valid key
                lengths = c.params.get("lengths") or (s.shape[-1],) * s.shape[0]
                for b, n in enumerate(lengths):
                    if n > 1:
                        gap = s[b, ..., n - 1] - s[b, ..., :n - 1].max(axis=-1)
                        assert gap.min() >= c.params["late_peak"] / 4, \
                            f"{where}: key {n - 1} of batch entry {b} leads by only {gap.min():.3g}"
            for name in asked:
                seen[name] += 1
    assert all(seen.values()), f"no case exercised some parameter: {seen}"


def test_every_large_values_case_reaches_past_half_precision():
    """`spread=0` with `v_offset=X` (shared.qkv): every score 0 and every value about X, so that the
    unnormalised output, about N·X, passes half precision's 65504; an input maker that skipped `v_offset`
    would leave the values random and an accumulator kept in half would pass."""
    seen = 0
    for ex in REGISTRY.values():
        for c in ex.cases:
            offset = c.params.get("v_offset")
            if not offset or not hasattr(ex, "make_inputs") or ex.make_inputs is None:
                continue
            x = ex.make_inputs(SimpleNamespace(**c.params), np.random.default_rng(c.seed or 1))
            where = f"{ex.id}, case '{c.name}'"
            assert c.params.get("spread") == 0.0 and np.abs(values(x["Q"])).max() == 0, f"{where}: the scores are not flat"
            assert values(x["V"]).mean() > offset / 2, f"{where}: the values average {values(x['V']).mean():.3g}"
            assert c.params["N"] * offset > 65504, f"{where}: N * v_offset stays within half precision's range"
            if c.params.get("do_offset"):  # the backward's D = rowsum(dO * O): each product past half's range
                assert (values(x["O"]) * values(x["dO"])).min() > 65504, f"{where}: dO * O stays within half's range"
            seen += 1
    assert seen, "no case asks for v_offset"
