"""04_flash_forward: the tiled forward with online softmax, three ways."""
import numpy as np

from .. import reference as ref
from ..exercise_rows import Mistake, case, exercise, hidden
from ..launch import ceil_div
from .shared import OUTPUTS, forward_magnitude, forward_mistakes, forward_ref, qkv, row_pairs_mistake, scale_of

MODULE = "04_flash_forward"
F32 = np.float32
ROWS_PER_BLOCK = 64  # flash_fwd_row and flash_fwd_fa1: one thread per query row
BC = 32  # key tile of flash_fwd_row and flash_fwd_fa1
FA2_BR, FA2_BC = 16, 16  # flash_fwd_fa2: a 16 x 16 score tile, one thread per element
RACE_CASE = "tile_plus_one"  # the first case with several key tiles: a missing barrier between tiles shows there first



def _all_nan(p, x):
    return dict(O=np.full((p.B, p.H, p.N, p.d), np.nan), L=np.full((p.B, p.H, p.N), np.nan))


UNINITIALISED_STATE = Mistake(
    "running state used before it was initialised",
    "m_buf, l_buf and O arrive holding garbage (NaN on the emulator, and that NaN spreads to every output, so "
    "O can even look never written). Before the first K/V tile set m = -INFINITY, l = 0 and O = 0 for every row "
    "of the head. (Every output NaN can also mean a partial key tile read keys that were never loaded.)",
    _all_nan)


CASES = [
    case("single_query", B=1, H=1, N=1, d=32, seed=1),
    case("one_tile", B=1, H=1, N=32, d=32, seed=2),
    case("tile_plus_one", B=1, H=2, N=33, d=64, seed=3),
    case("rising_max", B=1, H=1, N=100, d=32, rising=True, seed=4),
    case("large_logits", B=1, H=1, N=70, d=64, spread=30.0, seed=15),
    case("head_dim_128", B=1, H=1, N=65, d=128, seed=6),
    case("batches_and_heads", B=2, H=3, N=40, d=32, seed=7),
    case("other_scale", B=1, H=2, N=45, d=40, scale=0.5, seed=8),
    # extreme but legal logits: every score near -150 (exp(s) underflows: a max that starts at 0
    # fails), the first tile's keys 200 above the later tiles (rescaling with the tile max instead
    # of the running max overflows), and the max in the very last key
    case("scores_below_minus_87", B=1, H=1, N=40, d=32, negative=150.0, seed=9),
    case("falling_max", B=1, H=1, N=80, d=32, falling=200.0, seed=10),
    case("max_in_last_tile", B=1, H=1, N=70, d=32, late_peak=30.0, seed=11),
    hidden("sizes_127", B=1, H=2, N=127, d=64),
    hidden("sizes_129_rising", B=2, H=1, N=129, d=32, rising=True),
    hidden("odd_d_large_logits", B=1, H=2, N=50, d=48, spread=20.0),
    hidden("custom_scale", B=1, H=1, N=64, d=64, scale=0.3),
    hidden("falling_max_ragged", B=1, H=2, N=99, d=24, falling=120.0, scale=0.2),
    hidden("long_sequence", B=1, H=1, N=600, d=64),
]


def _magnitude(p, x):
    return forward_magnitude(x, float(scale_of(p)))

exercise(
    id="flash_fwd_row",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    kernel="flash_fwd_row",
    signature="flash_fwd_row(const float* Q, const float* K, const float* V, float* O, float* L, int N, int d, float scale)",
    launch_shape=f"grid = (ceil_div(N, {ROWS_PER_BLOCK}), H, B), block = {ROWS_PER_BLOCK}: thread t owns query row "
    f"blockIdx.x*{ROWS_PER_BLOCK} + t of head (blockIdx.z, blockIdx.y); K/V tiles of {BC} keys staged in shared "
    "memory by the whole block; d <= 128; arrays [B, H, N, d], L [B, H, N]",
    make_inputs=qkv,
    magnitude=_magnitude,
    outputs=OUTPUTS,
    reference=forward_ref,
    args=lambda p, a: (a.Q, a.K, a.V, a.O, a.L, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, ROWS_PER_BLOCK), p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    cases=CASES,
    race_check=True,
    race_case=RACE_CASE,
    mistakes=forward_mistakes(Mistake, BC),
)

exercise(
    id="flash_fwd_fa1",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    kernel="flash_fwd_fa1",
    signature="flash_fwd_fa1(const float* Q, const float* K, const float* V, float* O, float* L, "
    "float* m_buf, float* l_buf, int N, int d, float scale)",
    launch_shape=f"grid = (H, B), block = {ROWS_PER_BLOCK}: one block per head, FA1 loop order: outer loop over K/V "
    f"tiles of {BC} keys (in shared memory), inner loop over Q tiles of {ROWS_PER_BLOCK} rows (thread t owns row t of "
    "each Q tile); O, m_buf and l_buf ([B, H, N], uninitialised scratch) round-trip through global memory",
    make_inputs=qkv,
    magnitude=_magnitude,
    outputs=OUTPUTS,
    scratch=dict(m_buf=lambda p: ((p.B, p.H, p.N), F32), l_buf=lambda p: ((p.B, p.H, p.N), F32)),
    reference=forward_ref,
    args=lambda p, a: (a.Q, a.K, a.V, a.O, a.L, a.m_buf, a.l_buf, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    cases=CASES,
    race_check=True,
    race_case=RACE_CASE,
    mistakes=[UNINITIALISED_STATE] + forward_mistakes(Mistake, BC),
)

exercise(
    id="flash_fwd_fa2",
    hidden_sizes={"N": 16, "d": 8},
    module=MODULE,
    kernel="flash_fwd_fa2",
    signature="flash_fwd_fa2(const float* Q, const float* K, const float* V, float* O, float* L, int N, int d, float scale)",
    launch_shape=f"grid = (ceil_div(N, {FA2_BR}), H, B), block = ({FA2_BC}, {FA2_BR}): a block owns a tile of "
    f"{FA2_BR} query rows and loops over K/V tiles of {FA2_BC} keys; thread (x, y) computes score S[y][x] of the "
    f"tile; dynamic shared memory = (2*{FA2_BR}*d + 2*{FA2_BC}*d + {FA2_BR}*{FA2_BC} + 2*{FA2_BR}) floats "
    "(Q tile, O accumulator, K and V tiles, S tile, m and l); O written once at the end",
    make_inputs=qkv,
    magnitude=_magnitude,
    outputs=OUTPUTS,
    reference=forward_ref,
    args=lambda p, a: (a.Q, a.K, a.V, a.O, a.L, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, FA2_BR), p.H, p.B),
    block=lambda p: (FA2_BC, FA2_BR),
    shared_mem=lambda p: 4 * (2 * FA2_BR * p.d + 2 * FA2_BC * p.d + FA2_BR * FA2_BC + 2 * FA2_BR),
    cases=CASES,
    race_check=True,
    race_case=RACE_CASE,
    mistakes=forward_mistakes(Mistake, FA2_BC) + [row_pairs_mistake(Mistake, FA2_BR)],
)
