"""What a benchmark of each exercise measures: its shape, its work, its inputs, its baseline.

The exercise rows (``grader.exercises``) say how a kernel is launched and judged on small
cases; this module adds, keyed by exercise id, what a timing at full size needs:

* the shape a student names on the command line (``B=4,H=16,S=4096,d=64``) and how it becomes
  the exercise's own parameters (the exercises call the sequence length ``N``);
* the floating-point operations the kernel must do and the fewest bytes it must move through
  device memory (each input read once, each output written once), so a time becomes TFLOP/s
  and GB/s that compare across kernels;
* how to build its inputs on the device at that size (the exercises' ``make_inputs`` build
  float64 references on the host, far too slow at S = 4096);
* which library call it is measured against.

FLOP conventions: attention forward 4·B·H·S²·d (Q Kᵀ and P V), halved when causal; the
backward kernels count the products each one must form (recomputing S = Q Kᵀ is part of the
work of a kernel that does not receive P), the whole backward 10·B·H·S²·d (2.5 forwards).
Row statistics (L, D, m, l) and key lengths are 4-byte values whatever the tensors' dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import numpy as np

from .arrays import array_module
from .errors import CourseError

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}
STAT = 4  # bytes of one float32 row statistic or int32 length

ATTENTION_SHAPE = {"B": 4, "H": 16, "S": 4096, "d": 64}
MATMUL_SHAPE = {"M": 4096, "N": 4096, "K": 4096}
QK_SHAPE = {"S": 4096, "d": 64}
# the score matrix of one batch entry of the attention shape: H*S rows of S scores
SOFTMAX_SHAPE = {"rows": 16 * 4096, "cols": 4096}
MAX_HEAD_DIM = 128  # every attention kernel of the course sizes its per-thread arrays for d <= 128


@dataclass(frozen=True)
class BenchSpec:
    """How to benchmark one exercise. ``family`` picks the input builder and the baseline;
    ``flops`` and ``bytes`` take the exercise's parameters and the element size of the
    tensors; ``flops`` is None for kernels judged by bandwidth alone."""

    exercise: str
    family: str  # "attention", "attention_bwd", "matmul", "qk", "softmax"
    shape: dict
    flops: Callable | None
    bytes: Callable
    causal: bool = False
    baseline: str | None = None  # "sdpa", "sdpa_bwd", "cublas", "softmax"
    fixed: tuple = ()  # shape entries the kernel's build fixes at compile time (d of a -DHEAD_DIM build)
    padded: bool = False  # the kernel takes key_lengths: timed with nothing padded

    def params(self, shape: dict) -> SimpleNamespace:
        """The exercise's parameters for a benchmark shape (S becomes N for attention)."""
        p = dict(shape)
        if "S" in p:
            p["N"] = p.pop("S")
        if self.causal:
            p["causal"] = True
        if self.padded:
            p["lengths"] = (p["N"],) * p["B"]  # nothing padded: the cost of the masking logic itself
        return SimpleNamespace(**p)

    def unsupported(self, shape: dict) -> str | None:
        """Why this kernel cannot run at ``shape``, or None."""
        for key in self.fixed:
            if shape.get(key) != self.shape[key]:
                return (f"{self.exercise} is built for {key}={self.shape[key]} (a compile-time constant), "
                        f"not {key}={shape.get(key)}")
        d = shape.get("d")
        if self.family in ("attention", "attention_bwd") and d is not None and d > MAX_HEAD_DIM:
            return f"{self.exercise} supports head dimensions up to {MAX_HEAD_DIM} (d={d})"
        return None


def _heads(p):
    return p.B * p.H


def _fwd_flops(p):
    keys = sum(p.lengths) if hasattr(p, "lengths") else p.B * p.N  # each query sees its batch entry's valid keys
    return 4.0 * p.H * p.N * keys * p.d * (0.5 if getattr(p, "causal", False) else 1.0)


def _fwd_bytes(p, e):
    extra = STAT * p.B if hasattr(p, "lengths") else 0
    return e * 4 * _heads(p) * p.N * p.d + STAT * _heads(p) * p.N + extra  # Q, K, V in; O, L out


def _bwd_flops(products):
    """``products`` N x N x d matrix products of 2 flops per multiply-add, halved when causal."""
    return lambda p: 2.0 * products * _heads(p) * p.N * p.N * p.d * (0.5 if getattr(p, "causal", False) else 1.0)


def _bwd_bytes(tensors_in, stats_in, tensors_out):
    return lambda p, e: (e * (tensors_in + tensors_out) * _heads(p) * p.N * p.d + STAT * stats_in * _heads(p) * p.N)


def forward_spec(exercise: str, d: int | None = None, causal: bool = False, padded: bool = False) -> BenchSpec:
    """An attention forward timed at the reference shape against SDPA. ``d``: the head dimension
    the kernel is built for (-DHEAD_DIM), None for a kernel that takes d at run time."""
    shape = ATTENTION_SHAPE if d is None else ATTENTION_SHAPE | {"d": d}
    return BenchSpec(exercise, "attention", shape, _fwd_flops, _fwd_bytes, causal=causal, baseline="sdpa",
                     fixed=() if d is None else ("d",), padded=padded)


def _backward(exercise, flops, bytes_, causal=False, baseline="sdpa_bwd"):
    return BenchSpec(exercise, "attention_bwd", ATTENTION_SHAPE, flops, bytes_, causal=causal, baseline=baseline)


def _matmul(exercise):
    return BenchSpec(exercise, "matmul", MATMUL_SHAPE, lambda p: 2.0 * p.M * p.N * p.K,
                     lambda p, e: e * (p.M * p.K + p.K * p.N + p.M * p.N), baseline="cublas")


SPECS: dict[str, BenchSpec] = {s.exercise: s for s in [
    _matmul("matmul_naive"),
    _matmul("matmul_tiled"),
    BenchSpec("qk_scores_tiled", "qk", QK_SHAPE, lambda p: 2.0 * p.N * p.N * p.d,
              lambda p, e: e * (2 * p.N * p.d + p.N * p.N), baseline="cublas"),
    BenchSpec("online_softmax_rows", "softmax", SOFTMAX_SHAPE, None,
              lambda p, e: e * 2 * p.rows * p.cols, baseline="softmax"),
    forward_spec("flash_fwd_row"),
    forward_spec("flash_fwd_fa1"),
    forward_spec("flash_fwd_fa2"),
    forward_spec("flash_fwd_fa2_padded"),
    forward_spec("flash_fwd_half_d64", d=64),
    forward_spec("flash_fwd_half_d128", d=128),
    forward_spec("flash_fwd_causal", causal=True),
    forward_spec("flash_fwd_padded", padded=True),
    _backward("flash_bwd_preprocess", lambda p: 2.0 * _heads(p) * p.N * p.d,
              lambda p, e: e * 2 * _heads(p) * p.N * p.d + STAT * _heads(p) * p.N, baseline=None),
    _backward("flash_bwd_dkdv", _bwd_flops(4), _bwd_bytes(4, 2, 2)),  # S, dP, dV, dK
    _backward("flash_bwd_dq", _bwd_flops(3), _bwd_bytes(4, 2, 1)),  # S, dP, dQ
    _backward("flash_bwd_atomic", _bwd_flops(5), _bwd_bytes(4, 2, 3)),  # S, dP, dV, dK, dQ
    _backward("flash_bwd_dkdv_causal", _bwd_flops(4), _bwd_bytes(4, 2, 2), causal=True),
]}

# The baselines' own work: SDPA's forward is the forward's; its backward reads Q, K, V, O,
# dO and L and writes dQ, dK, dV, forming five products.
SDPA_BWD_FLOPS = _bwd_flops(5)
SDPA_BWD_BYTES = _bwd_bytes(5, 1, 3)


def get_spec(exercise: str) -> BenchSpec:
    if exercise not in SPECS:
        raise CourseError(f"no benchmark is declared for {exercise!r}. Benchmarks exist for: {', '.join(SPECS)}")
    return SPECS[exercise]


def parse_shape(given, spec: BenchSpec) -> dict:
    """``"B=4,S=2048"`` or ``{"B": 4, "S": 2048}`` -> the spec's default shape with those
    entries replaced (None: the defaults)."""

    text = ",".join(f"{k}={v}" for k, v in given.items()) if isinstance(given, dict) else (given or "")
    shape = dict(spec.shape)
    for item in filter(None, text.replace(" ", "").split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in shape:
            raise CourseError(f"--shape {text!r}: {spec.exercise} takes {', '.join(f'{k}=INT' for k in spec.shape)}")
        try:
            shape[key] = int(value)
        except ValueError:
            raise CourseError(f"--shape {text!r}: {key} must be a whole number, got {value!r}") from None
        if shape[key] < 1:
            raise CourseError(f"--shape {text!r}: {key} must be at least 1")
    return shape


# --------------------------------------------------------------------------- device inputs


def _normal(rng, shape, dtype, cp):
    x = rng.standard_normal(shape, dtype=cp.float32)
    if dtype == "fp32":
        return x
    if dtype == "fp16":
        return x.astype(cp.float16)
    # CuPy has no bfloat16: a bf16 pointer takes the top half of each float32's bits
    return (x.view(cp.uint32) >> 16).astype(cp.uint16)


def _forward_state(q, k, v, scale, causal, cp, heads_per_step=8):
    """(O, L) of attention in float32 on the device, a few heads at a time (their S is N x N)."""
    b, h, n, d = q.shape
    qf, kf, vf = (x.reshape(b * h, n, d).astype(cp.float32) for x in (q, k, v))
    o, lse = cp.empty_like(qf), cp.empty(qf.shape[:2], cp.float32)
    above = cp.triu(cp.ones((n, n), bool), 1) if causal else None
    for s in range(0, b * h, heads_per_step):
        sl = slice(s, s + heads_per_step)
        scores = scale * cp.matmul(qf[sl], kf[sl].transpose(0, 2, 1))
        if causal:
            scores = cp.where(above, -cp.inf, scores)
        m = scores.max(axis=-1, keepdims=True)
        p = cp.exp(scores - m)
        ell = p.sum(axis=-1, keepdims=True)
        o[sl] = cp.matmul(p, vf[sl]) / ell
        lse[sl] = (m + cp.log(ell))[..., 0]
    return o.reshape(b, h, n, d).astype(q.dtype), lse.reshape(b, h, n)


def device_inputs(spec: BenchSpec, p, dtype: str, seed: int = 0) -> dict:
    """The kernel's inputs at benchmark size, named as in the exercise: CuPy arrays, or on the
    emulator (a dry run of a benchmark, at a small shape) NumPy arrays built the same way."""

    cp = array_module()
    rng = cp.random.default_rng(seed)
    if spec.family == "matmul":
        return dict(A=_normal(rng, (p.M, p.K), dtype, cp), B=_normal(rng, (p.K, p.N), dtype, cp))
    if spec.family == "qk":
        return dict(Q=_normal(rng, (p.N, p.d), dtype, cp), K=_normal(rng, (p.N, p.d), dtype, cp))
    if spec.family == "softmax":
        return dict(x=_normal(rng, (p.rows, p.cols), dtype, cp))
    shape = (p.B, p.H, p.N, p.d)
    x = {name: _normal(rng, shape, dtype, cp) for name in ("Q", "K", "V")}
    if hasattr(p, "lengths"):
        x["key_lengths"] = cp.asarray(p.lengths, dtype=cp.int32)
    if spec.family == "attention_bwd":
        if dtype != "fp32":
            raise NotImplementedError("backward inputs are built in fp32 only (the course's backward kernels are fp32)")
        x["dO"] = _normal(rng, shape, dtype, cp)
        x["O"], x["L"] = _forward_state(x["Q"], x["K"], x["V"], np.float32(p.d ** -0.5), spec.causal, cp)
        x["D"] = (x["O"] * x["dO"]).sum(axis=-1)
    return x
