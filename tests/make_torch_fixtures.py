"""Write ``tests/fixtures/torch_attention.npz``: PyTorch's attention, for checking grader.reference.

PyTorch is an independent implementation of the same maths, so agreement with it checks our
NumPy references (forward, logsumexp, gradients, the causal and padding conventions). It is
needed only to *write* the fixture file; the tests read the file and never import torch.

Run from the repository root (rerunnable; the output is deterministic up to rounding):

    .venv/bin/pip install torch==2.13.0     # CPU wheel, not a dependency of the course
    .venv/bin/python tests/make_torch_fixtures.py

For every case below the file holds, under keys ``"<name>/<array>"``:
    q, k, v, do        inputs (do = dL/dO, the upstream gradient), stored as float32 but generated
                       to be exactly representable, so casting back to float64 is lossless
    key_lengths        int64 [B] (only for cases with padding)
    o, lse             forward output [B, H, S_q, d] and row logsumexp [B, H, S_q], float64
    dq, dk, dv         gradients of sum(o ∘ do) with respect to q, k, v, float64
and ``"cases"`` holds the case list as JSON text.

How torch is asked:
    * causal without padding: ``scaled_dot_product_attention(is_causal=True)``, i.e. torch's own
      convention (top-left aligned, which matters when S_q != S_k);
    * padding (key_lengths): an explicit boolean ``attn_mask`` (True = keep), built here with torch
      ops; with padding and causal together the lower triangle is folded into that mask;
    * lse: ``torch.logsumexp`` over the masked, scaled scores (sdpa does not return it).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "torch_attention.npz"

# Sq/Sk default to S. Shapes are small to keep the file well under 1.5 MB.
CASES = [
    dict(name="plain_64", B=2, H=2, S=64, d=16, seed=1, causal=False),
    dict(name="causal_129", B=1, H=2, S=129, d=32, seed=7, causal=True),
    dict(name="padding", B=3, H=2, S=40, d=16, seed=3, causal=False, key_lengths=[40, 17, 1]),
    dict(name="causal_padding", B=2, H=1, S=33, d=16, seed=4, causal=True, key_lengths=[33, 20]),
    dict(name="odd_d_80", B=1, H=1, S=24, d=80, seed=5, causal=False),
    dict(name="odd_d_24_causal", B=1, H=2, S=19, d=24, seed=6, causal=True),
    dict(name="s1_causal", B=2, H=2, S=1, d=8, seed=8, causal=True),
    dict(name="fully_masked_batch", B=2, H=2, S=12, d=8, seed=9, causal=False, key_lengths=[12, 0]),
    dict(name="cross_causal_q20_k37", B=1, H=2, Sq=20, Sk=37, d=16, seed=10, causal=True),
    dict(name="cross_causal_q37_k20", B=1, H=1, Sq=37, Sk=20, d=16, seed=11, causal=True),
    dict(name="scale_0.3", B=1, H=2, S=21, d=16, seed=12, causal=False, scale=0.3),
]


def case_inputs(case):
    """Deterministic inputs for one case: float64 arrays that are exact float32 values."""
    rng = np.random.default_rng(case["seed"])
    sq, sk = case.get("Sq", case.get("S")), case.get("Sk", case.get("S"))
    b, h, d = case["B"], case["H"], case["d"]

    def draw(s):
        return rng.standard_normal((b, h, s, d)).astype(np.float32).astype(np.float64)

    return {"q": draw(sq), "k": draw(sk), "v": draw(sk), "do": draw(sq)}


def torch_case(case):
    """Run one case through PyTorch (float64, CPU); return inputs and outputs as NumPy arrays."""
    import torch
    import torch.nn.functional as F

    arrays = case_inputs(case)
    q, k, v = (torch.tensor(arrays[n], dtype=torch.float64, requires_grad=True) for n in "qkv")
    do = torch.tensor(arrays["do"], dtype=torch.float64)
    sq, sk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = case.get("scale", 1.0 / math.sqrt(d))
    lengths = case.get("key_lengths")

    # keep[b, 0, i, j]: may query i see key j? (the same rule torch uses for is_causal)
    keep = torch.ones(case["B"], 1, sq, sk, dtype=torch.bool)
    if case["causal"]:
        keep &= torch.ones(sq, sk, dtype=torch.bool).tril()
    if lengths is not None:
        keep &= torch.arange(sk)[None, None, None, :] < torch.tensor(lengths)[:, None, None, None]

    if lengths is None:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"], scale=scale)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)
    o.backward(do)

    with torch.no_grad():
        scores = (scale * q @ k.transpose(-1, -2)).masked_fill(~keep, -math.inf)
        lse = torch.logsumexp(scores, dim=-1)

    out = dict(arrays)
    out.update(
        o=o.detach().numpy(), lse=lse.numpy(),
        dq=q.grad.numpy(), dk=k.grad.numpy(), dv=v.grad.numpy(),
    )
    if lengths is not None:
        out["key_lengths"] = np.asarray(lengths, dtype=np.int64)
    return out


def main():
    import torch

    torch.manual_seed(0)
    payload = {"cases": np.array(json.dumps(CASES))}
    for case in CASES:
        result = torch_case(case)
        for key, value in result.items():
            if key in ("q", "k", "v", "do"):
                value = value.astype(np.float32)  # lossless: the values are float32 already
            payload[f"{case['name']}/{key}"] = value
        bad = [key for key, value in result.items() if np.isnan(value).any()]
        if bad:
            raise SystemExit(f"{case['name']}: torch returned NaN in {bad}")
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(FIXTURE, **payload)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size / 1e6:.2f} MB, {len(CASES)} cases, torch {torch.__version__})")


if __name__ == "__main__":
    main()
