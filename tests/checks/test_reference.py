"""Checks of grader.reference, the float64 answers every student kernel is graded against.

Three independent kinds of evidence:
  * finite differences of a scalar loss for the gradients;
  * PyTorch's results, stored in tests/fixtures/torch_attention.npz by
    tests/make_torch_fixtures.py (torch is not needed to run these tests);
  * properties the maths guarantees (softmax rows sum to 1, merging is associative, ...).
Any NumPy RuntimeWarning (overflow, 0/0, log 0) fails a test: the references must never make one.
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from grader import reference as ref

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

HERE = Path(__file__).resolve().parents[1]  # tests/: fixtures/ and make_torch_fixtures.py
FIXTURE = HERE / "fixtures" / "torch_attention.npz"


def randn(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


def qkv_do(seed, b, h, sq, sk, d):
    """Random q, k, v, dO of shapes [b, h, sq, d], [b, h, sk, d], [b, h, sk, d], [b, h, sq, d]."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((b, h, sq, d)), rng.standard_normal((b, h, sk, d)),
            rng.standard_normal((b, h, sk, d)), rng.standard_normal((b, h, sq, d)))


def assert_no_nan(*arrays):
    for a in arrays:
        assert not np.isnan(a).any()


# Attention set-ups shared by several tests: (name, shape (B, H, Sq, Sk, d), options).
SETUPS = [
    ("plain", (2, 2, 5, 5, 3), dict()),
    ("causal", (1, 2, 6, 6, 4), dict(causal=True)),
    ("padding", (3, 1, 4, 6, 3), dict(key_lengths=[6, 2, 1])),
    ("causal_padding", (2, 1, 5, 5, 3), dict(causal=True, key_lengths=[3, 5])),
    ("cross_causal_q3_k6", (1, 1, 3, 6, 2), dict(causal=True)),
    ("cross_causal_q6_k3", (1, 1, 6, 3, 2), dict(causal=True)),
    ("fully_masked_batch", (2, 1, 4, 4, 3), dict(key_lengths=[4, 0])),
    ("scale_0.7", (1, 1, 4, 5, 3), dict(scale=0.7)),
]
SETUP_IDS = [name for name, _, _ in SETUPS]


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------

def test_matmul_is_float64_and_checks_shapes():
    a, b = randn(0, 3, 4).astype(np.float32), randn(1, 4, 2).astype(np.float32)
    c = ref.matmul(a, b)
    assert c.dtype == np.float64
    expected = [[sum(float(a[i, t]) * float(b[t, j]) for t in range(4)) for j in range(2)] for i in range(3)]
    np.testing.assert_allclose(c, expected, rtol=1e-14)
    with pytest.raises(ValueError):
        ref.matmul(a, a)


def test_scaled_scores_default_scale_and_leading_axes():
    q, k = randn(0, 2, 3, 4, 8), randn(1, 2, 3, 5, 8)
    s = ref.scaled_scores(q, k)
    assert s.shape == (2, 3, 4, 5)
    np.testing.assert_allclose(s[1, 2, 3, 4], np.dot(q[1, 2, 3], k[1, 2, 4]) / math.sqrt(8), rtol=1e-14)
    np.testing.assert_allclose(ref.scaled_scores(q, k, scale=0.25), 0.25 * math.sqrt(8) * s, rtol=1e-14)


def test_softmax_rows_sum_to_one_and_ignore_shifts():
    s = randn(0, 4, 7, 9) * 5
    p = ref.softmax_rows(s)
    assert (p >= 0).all()
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(ref.softmax_rows(s + 123.0), p, rtol=1e-12)


def test_softmax_rows_handles_huge_logits_and_masked_rows():
    s = np.array([[1000.0, 999.0, -np.inf],    # e^1000 overflows unless the max is subtracted
                  [-np.inf, -np.inf, -np.inf],  # fully masked row
                  [0.0, 0.0, 0.0]])
    p = ref.softmax_rows(s)
    e = math.exp(-1.0)
    np.testing.assert_allclose(p[0], [1 / (1 + e), e / (1 + e), 0.0], rtol=1e-15)
    np.testing.assert_array_equal(p[1], 0.0)
    np.testing.assert_allclose(p[2], 1 / 3, rtol=1e-15)


# ---------------------------------------------------------------------------------------------
# Online softmax
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 3, 128])
@pytest.mark.parametrize("magnitude", [1.0, 1e3])
def test_online_softmax_equals_softmax_rows(block, magnitude):
    x = randn(block, 5, 300) * magnitude
    np.testing.assert_allclose(ref.online_softmax(x, block), ref.softmax_rows(x), rtol=1e-12, atol=1e-300)
    if magnitude > 1:  # the unsafe formula e^x / Σ e^x overflows for these logits
        with np.errstate(over="ignore", invalid="ignore"):
            unsafe = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
        assert not np.isfinite(unsafe).all()


@pytest.mark.parametrize("block", [1, 3, 128])
def test_online_softmax_states_track_prefix_max_and_sum(block):
    x = randn(2, 4, 260) * 10
    states = ref.online_softmax_states(x, block)
    assert len(states) == math.ceil(x.shape[1] / block)
    for n, (m, ell) in enumerate(states):
        prefix = x[:, :min((n + 1) * block, x.shape[1])]
        np.testing.assert_array_equal(m, prefix.max(axis=1))
        np.testing.assert_allclose(ell, np.exp(prefix - m[:, None]).sum(axis=1), rtol=1e-13)
    assert all((later[0] >= earlier[0]).all() for earlier, later in zip(states, states[1:]))


def test_online_softmax_with_masked_leading_blocks():
    x = randn(3, 3, 10)
    x[0, :6] = -np.inf  # the first two blocks of row 0 are fully masked
    x[1, :] = -np.inf   # row 1 is fully masked
    m, ell = ref.online_softmax_states(x, 3)[0]
    assert m[0] == -np.inf and ell[0] == 0.0
    out = ref.online_softmax(x, 3)
    np.testing.assert_allclose(out, ref.softmax_rows(x), rtol=1e-13)
    np.testing.assert_array_equal(out[1], 0.0)


# ---------------------------------------------------------------------------------------------
# Partial states and merging
# ---------------------------------------------------------------------------------------------

def assert_states_close(a, b):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)


def test_partial_state_matches_its_definition():
    q, k, v, _ = qkv_do(0, 1, 1, 3, 5, 4)
    m, ell, acc = ref.partial_state(q, k, v)
    s = q[0, 0] @ k[0, 0].T / 2.0  # scale = 1/√4
    np.testing.assert_array_equal(m[0, 0], s.max(axis=1))
    np.testing.assert_allclose(ell[0, 0], np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1), rtol=1e-14)
    np.testing.assert_allclose(acc[0, 0], np.exp(s - s.max(axis=1, keepdims=True)) @ v[0, 0], rtol=1e-13)


def test_merging_a_split_equals_the_whole_key_set():
    q, k, v, _ = qkv_do(1, 2, 2, 4, 9, 3)
    whole = ref.partial_state(q, k, v)
    for cut in range(0, 10):  # includes the empty halves cut = 0 and cut = 9
        left = ref.partial_state(q, k[:, :, :cut], v[:, :, :cut])
        right = ref.partial_state(q, k[:, :, cut:], v[:, :, cut:])
        assert_states_close(ref.merge_states(left, right), whole)


def test_merge_is_commutative_and_associative():
    q, k, v, _ = qkv_do(2, 1, 2, 3, 8, 4)
    k = k * 4  # spread the row maxima so that rescaling matters
    a = ref.partial_state(q, k[:, :, :3], v[:, :, :3])
    b = ref.partial_state(q, k[:, :, 3:6], v[:, :, 3:6])
    c = ref.partial_state(q, k[:, :, 6:], v[:, :, 6:])
    empty = ref.partial_state(q, k[:, :, :0], v[:, :, :0])
    masked = ref.partial_state(q, k[:, :, :2], v[:, :, :2], mask=np.zeros((3, 2), dtype=bool))
    assert_states_close(ref.merge_states(a, b), ref.merge_states(b, a))
    assert_states_close(ref.merge_states(ref.merge_states(a, b), c),
                        ref.merge_states(a, ref.merge_states(b, c)))
    for nothing in (empty, masked):
        assert_states_close(ref.merge_states(a, nothing), a)
        assert_states_close(ref.merge_states(nothing, a), a)


def test_merging_empty_states_stays_empty_without_nan():
    q, k, v, _ = qkv_do(3, 1, 1, 2, 0, 4)
    empty = ref.partial_state(q, k, v)
    m, ell, acc = ref.merge_states(empty, empty)
    np.testing.assert_array_equal(m, -np.inf)
    np.testing.assert_array_equal(ell, 0.0)
    np.testing.assert_array_equal(acc, 0.0)
    o, lse = ref.finalize_state((m, ell, acc))
    np.testing.assert_array_equal(o, 0.0)
    np.testing.assert_array_equal(lse, -np.inf)


@pytest.mark.parametrize("block_c", [1, 4, 16, 64])
def test_tiled_forward_with_merges_equals_attention_forward(block_c):
    """FlashAttention's loop: visit B_c keys at a time, merge, finalise once at the end."""
    q, k, v, _ = qkv_do(4, 2, 2, 20, 20, 8)
    lengths = [20, 7]
    mask = ref.attention_mask(20, 20, True, lengths, 2)
    state = ref.partial_state(q, k[:, :, :0], v[:, :, :0])  # start from the empty state
    for start in range(0, 20, block_c):
        cols = slice(start, start + block_c)
        tile = ref.partial_state(q, k[:, :, cols], v[:, :, cols], mask=mask[..., cols])
        state = ref.merge_states(state, tile)
    o, lse = ref.finalize_state(state)
    o_ref, lse_ref = ref.attention_forward(q, k, v, causal=True, key_lengths=lengths)
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lse, lse_ref, rtol=1e-13)


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------

def test_causal_mask_is_top_left_aligned():
    np.testing.assert_array_equal(ref.attention_mask(3, 3, True)[0, 0], np.tril(np.ones((3, 3), bool)))
    np.testing.assert_array_equal(ref.attention_mask(2, 4, True)[0, 0],
                                  [[1, 0, 0, 0],
                                   [1, 1, 0, 0]])
    np.testing.assert_array_equal(ref.attention_mask(4, 2, True)[0, 0],
                                  [[1, 0],
                                   [1, 1],
                                   [1, 1],
                                   [1, 1]])


def test_key_lengths_mask_padding_per_batch():
    mask = ref.attention_mask(2, 4, True, key_lengths=[4, 1, 0], batch=3)
    assert mask.shape == (3, 1, 2, 4) and mask.dtype == bool
    np.testing.assert_array_equal(mask[1, 0], [[1, 0, 0, 0], [1, 0, 0, 0]])
    assert not mask[2].any()
    with pytest.raises(ValueError):
        ref.attention_mask(2, 4, False, key_lengths=[4, 1], batch=3)
    with pytest.raises(ValueError):
        ref.attention_mask(2, 4, False, key_lengths=[5], batch=1)


# ---------------------------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------------------------

def test_forward_on_a_case_worked_by_hand():
    # scores [0, ln 3] → P = [1/4, 3/4] → O = 1/4·1 + 3/4·5 = 4, L = ln(1 + 3)
    q, k, v = [[1.0]], [[0.0], [math.log(3.0)]], [[1.0], [5.0]]
    o, lse = ref.attention_forward(q, k, v, scale=1.0)
    np.testing.assert_allclose(o, [[4.0]], rtol=1e-15)
    np.testing.assert_allclose(lse, [math.log(4.0)], rtol=1e-15)


@pytest.mark.parametrize("name,shape,opts", SETUPS, ids=SETUP_IDS)
def test_naive_attention_equals_forward(name, shape, opts):
    b, h, sq, sk, d = shape
    q, k, v, _ = qkv_do(5, b, h, sq, sk, d)
    o, lse = ref.attention_forward(q, k, v, **opts)
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    np.testing.assert_allclose(ref.attention_naive(q, k, v, **opts), o, rtol=1e-13, atol=1e-15)


def test_padding_equals_dropping_the_padded_keys():
    q, k, v, _ = qkv_do(6, 3, 2, 5, 7, 4)
    lengths = [7, 3, 1]
    o, lse = ref.attention_forward(q, k, v, causal=False, key_lengths=lengths)
    for b, n in enumerate(lengths):
        o_b, lse_b = ref.attention_forward(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n])
        np.testing.assert_allclose(o[b:b + 1], o_b, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(lse[b:b + 1], lse_b, rtol=1e-14)


def test_two_d_inputs_are_one_head():
    q, k, v, do = qkv_do(7, 1, 1, 6, 6, 5)
    o4, lse4 = ref.attention_forward(q, k, v, causal=True)
    o2, lse2 = ref.attention_forward(q[0, 0], k[0, 0], v[0, 0], causal=True)
    np.testing.assert_array_equal(o2, o4[0, 0])
    np.testing.assert_array_equal(lse2, lse4[0, 0])
    np.testing.assert_array_equal(ref.attention_naive(q[0, 0], k[0, 0], v[0, 0], causal=True),
                                  ref.attention_naive(q, k, v, causal=True)[0, 0])
    grads4 = ref.attention_backward(q, k, v, o4, lse4, do, causal=True)
    grads2 = ref.attention_backward(q[0, 0], k[0, 0], v[0, 0], o2, lse2, do[0, 0], causal=True)
    for g2, g4 in zip(grads2, grads4):
        np.testing.assert_array_equal(g2, g4[0, 0])
    parts2 = ref.backward_intermediates(q[0, 0], k[0, 0], v[0, 0], o2, lse2, do[0, 0], causal=True)
    assert parts2["P"].shape == (6, 6) and parts2["D"].shape == (6,)


def test_float32_inputs_give_float64_results():
    q, k, v, do = (x.astype(np.float32) for x in qkv_do(8, 1, 2, 4, 4, 8))
    o, lse = ref.attention_forward(q, k, v)
    assert o.dtype == lse.dtype == np.float64
    assert all(g.dtype == np.float64 for g in ref.attention_backward(q, k, v, o, lse, do))


def test_causal_with_a_single_position():
    q, k, v, do = qkv_do(9, 2, 3, 1, 1, 4)
    o, lse = ref.attention_forward(q, k, v, causal=True)
    np.testing.assert_allclose(o, v, rtol=1e-15)  # one visible key: weight 1
    np.testing.assert_allclose(lse, (q * k).sum(-1) / 2.0, rtol=1e-14)  # L = S_00
    dq, dk, dv = ref.attention_backward(q, k, v, o, lse, do, causal=True)
    np.testing.assert_allclose(dv, do, rtol=1e-15)
    np.testing.assert_allclose(dq, 0.0, atol=1e-15)  # the softmax of one entry is constant
    np.testing.assert_allclose(dk, 0.0, atol=1e-15)


def test_fully_masked_rows_give_zero_output_and_no_nan():
    q, k, v, do = qkv_do(10, 3, 2, 4, 5, 3)
    lengths = [5, 0, 2]  # batch 1 has no visible key at all
    o, lse = ref.attention_forward(q, k, v, causal=True, key_lengths=lengths)
    np.testing.assert_array_equal(o[1], 0.0)
    np.testing.assert_array_equal(lse[1], -np.inf)
    assert np.isfinite(lse[[0, 2]]).all()
    np.testing.assert_array_equal(ref.attention_naive(q, k, v, causal=True, key_lengths=lengths)[1], 0.0)

    grads = ref.attention_backward(q, k, v, o, lse, do, causal=True, key_lengths=lengths)
    parts = ref.backward_intermediates(q, k, v, o, lse, do, causal=True, key_lengths=lengths)
    assert_no_nan(o, *grads, *parts.values())
    for g in grads:
        np.testing.assert_array_equal(g[1], 0.0)
    np.testing.assert_array_equal(parts["P"][1], 0.0)
    np.testing.assert_array_equal(parts["dS"][1], 0.0)
    # the other batch entries do not notice
    o0, lse0 = ref.attention_forward(q[:1], k[:1], v[:1], causal=True)
    np.testing.assert_allclose(o[:1], o0, rtol=1e-14)
    for g, g0 in zip(grads, ref.attention_backward(q[:1], k[:1], v[:1], o0, lse0, do[:1], causal=True)):
        np.testing.assert_allclose(g[:1], g0, rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------------

def finite_difference_grads(loss, arrays, eps=1e-6):
    """Central differences (loss(x + ε) − loss(x − ε)) / 2ε of a scalar loss, entry by entry."""
    grads = []
    for x in arrays:
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            saved = x[idx]
            x[idx] = saved + eps
            up = loss()
            x[idx] = saved - eps
            down = loss()
            x[idx] = saved
            g[idx] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("name,shape,opts", SETUPS, ids=SETUP_IDS)
def test_backward_matches_finite_differences(name, shape, opts):
    b, h, sq, sk, d = shape
    q, k, v, g = qkv_do(11, b, h, sq, sk, d)

    def loss():  # L = Σ O ∘ g, so dL/dO = g
        return float(np.sum(ref.attention_forward(q, k, v, **opts)[0] * g))

    numeric = finite_difference_grads(loss, [q, k, v])
    o, lse = ref.attention_forward(q, k, v, **opts)
    analytic = ref.attention_backward(q, k, v, o, lse, g, **opts)
    for label, a, n in zip(("dq", "dk", "dv"), analytic, numeric):
        np.testing.assert_allclose(a, n, rtol=1e-6, atol=1e-8, err_msg=label)


def test_backward_intermediates_satisfy_their_identities():
    q, k, v, do = qkv_do(12, 2, 2, 7, 9, 5)
    opts = dict(causal=True, key_lengths=[9, 4])
    o, lse = ref.attention_forward(q, k, v, **opts)
    parts = ref.backward_intermediates(q, k, v, o, lse, do, **opts)
    p, dp, ds, d_rows = parts["P"], parts["dP"], parts["dS"], parts["D"]
    s = np.where(ref.attention_mask(7, 9, True, [9, 4], 2), ref.scaled_scores(q, k), -np.inf)
    np.testing.assert_allclose(p, ref.softmax_rows(s), rtol=1e-13, atol=1e-16)  # e^{S−L} = softmax(S)
    np.testing.assert_allclose(dp, do @ np.swapaxes(v, -1, -2), rtol=1e-14)
    np.testing.assert_allclose(d_rows, ref.backward_preprocess(o, do), rtol=1e-15)
    np.testing.assert_allclose(d_rows, (p * dp).sum(-1), rtol=1e-12, atol=1e-14)  # D = rowsum(P ∘ dP)
    np.testing.assert_allclose(ds.sum(-1), 0.0, atol=1e-13)  # hence the rows of dS sum to 0
    np.testing.assert_array_equal(ds[p == 0], 0.0)


def test_backward_preprocess_is_rowsum_of_product():
    o, do = randn(0, 2, 3, 4, 5), randn(1, 2, 3, 4, 5)
    d_rows = ref.backward_preprocess(o, do)
    assert d_rows.shape == (2, 3, 4)
    np.testing.assert_allclose(d_rows[1, 2, 3], np.dot(o[1, 2, 3], do[1, 2, 3]), rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# PyTorch fixtures
# ---------------------------------------------------------------------------------------------

def load_fixture_cases():
    with np.load(FIXTURE) as data:
        return json.loads(str(data["cases"]))


FIXTURE_CASES = load_fixture_cases()


def fixture_arrays(name):
    with np.load(FIXTURE) as data:
        prefix = f"{name}/"
        return {key[len(prefix):]: data[key] for key in data.files if key.startswith(prefix)}


def test_fixture_file_is_small():
    assert FIXTURE.stat().st_size < 1.5e6


@pytest.mark.parametrize("case", FIXTURE_CASES, ids=[c["name"] for c in FIXTURE_CASES])
def test_matches_pytorch(case):
    data = fixture_arrays(case["name"])
    q, k, v, do = (data[n].astype(np.float64) for n in ("q", "k", "v", "do"))
    opts = dict(causal=case["causal"], scale=case.get("scale"), key_lengths=data.get("key_lengths"))
    o, lse = ref.attention_forward(q, k, v, **opts)
    np.testing.assert_allclose(o, data["o"], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(data["lse"]))
    np.testing.assert_allclose(lse, data["lse"], rtol=1e-10, atol=1e-12)
    grads = ref.attention_backward(q, k, v, o, lse, do, **opts)
    for label, g in zip(("dq", "dk", "dv"), grads):
        np.testing.assert_allclose(g, data[label], rtol=1e-10, atol=1e-12, err_msg=label)


def test_fixture_script_reproduces_the_file_with_torch():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("make_torch_fixtures", HERE / "make_torch_fixtures.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    case = next(c for c in script.CASES if c["name"] == "causal_padding")
    fresh = script.torch_case(case)
    stored = fixture_arrays(case["name"])
    assert set(fresh) == set(stored)
    for key in ("q", "k", "v", "do"):
        np.testing.assert_array_equal(fresh[key], stored[key].astype(np.float64))
    for key in ("o", "lse", "dq", "dk", "dv"):
        np.testing.assert_allclose(fresh[key], stored[key], rtol=1e-12, atol=1e-14, err_msg=key)
