"""The emulator's memory profiler against Nsight Compute on an H100.

Eight kernels in four pairs, each pair one lesson of the course:
  matmul     module 02's naive and tiled solutions          (global sectors: tiling reuses loads)
  fa2_k      module 04's flash_fwd_fa2 solution, K tile read at a stride of d floats, and the same
             kernel with K rows padded to d + 1                (shared wavefronts: bank conflicts)
  copy       a float copy and a float4 copy                    (global requests: 4x fewer)
  ldmatrix   ldmatrix_x4 over a 64 x 64 fp16 tile, plain and XOR-swizzled (shared wavefronts)

Three phases, since the GPU machine may lack the emulator's compilers (g++, clang-16) and this
one lacks a GPU:
    PYTHONPATH=. python3 benchmarks/profile_vs_ncu.py --emulator   # here: profile=True on the CPU
    PYTHONPATH=. python3 benchmarks/profile_vs_ncu.py --ncu        # GPU machine, ncu on PATH
    PYTHONPATH=. python3 benchmarks/profile_vs_ncu.py --compare    # either: the comparison table
--ncu runs each kernel once under ``ncu --metrics ... --csv``, launched by this script's own
``--launch CASE`` driver through grader.RawKernel on the GPU backend (the translation unit and
NVRTC options the course uses). Results: benchmarks/results/profile_{emulator,ncu}.json and
profile_vs_ncu.txt. The comparison passes when every total is within 10% of Nsight's and each
pair ranks its two variants the same way on its key metric.
"""
from __future__ import annotations

import argparse
import csv
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course import solution_source  # noqa: E402
from grader.kernel import RawKernel  # noqa: E402
from grader.wrong_corpus import replace_each_once  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TOLERANCE = 0.10

# Emulator total -> the Nsight Compute metrics it is compared with (summed: ldmatrix is its own
# instruction class, LDSM, for Nsight; the emulator counts it as a 16-byte shared load).
METRICS = {
    "global_load_sectors": ["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"],
    "global_load_requests": ["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"],
    "global_store_sectors": ["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"],
    "global_store_requests": ["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"],
    "shared_load_wavefronts": ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum"],
    "shared_load_requests": ["smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_ldsm.sum"],
    "shared_store_wavefronts": ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"],
    "shared_store_requests": ["smsp__inst_executed_op_shared_st.sum"],
}
# Recorded for reading the results; not compared.
EXTRA_METRICS = ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                 "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]
# Per pair: the metric on which its variants must rank the same way on both sides.
KEY = {"matmul": "global_load_sectors", "fa2_k": "shared_load_wavefronts", "copy": "global_load_requests",
       "ldmatrix": "shared_load_wavefronts"}


# ----------------------------------------------------------------------------- the kernels

COPY = r"""
extern "C" __global__ void copy_scalar(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
}

extern "C" __global__ void copy_vec4(const float4* a, float4* b, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) b[i] = a[i];
}
"""

# Each block stages its own 64 x 64 tile of 16-bit values (128 bytes, eight 16-byte chunks a row)
# in shared memory, then warp w reads rows 16w..16w+15 as four 16 x 16 blocks with ldmatrix_x4.
# The 8 row addresses of one 8x8 matrix are 128 bytes apart: without a swizzle they fall in the
# same 4 banks (8 wavefronts instead of 1); SWIZZLE stores chunk c of row r at c ^ (r % 8).
LDMATRIX = r"""
extern "C" __global__ void ldmatrix_tile(const uint4* in, unsigned* out) {
    __shared__ uint4 tile[64 * 8];
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint4* src = in + blockIdx.x * 64 * 8;
    for (int i = tid; i < 64 * 8; i += blockDim.x) {
        int r = i / 8, c = i % 8;
        tile[r * 8 + (SWIZZLE ? c ^ (r % 8) : c)] = src[i];
    }
    __syncthreads();
    unsigned* dst = out + blockIdx.x * 4 * 4 * 4 * 32;
    for (int j = 0; j < 4; ++j) {
        int r = warp * 16 + lane % 8 + 8 * ((lane / 8) % 2);   // lanes 8-15, 24-31: the lower 8 rows
        int c = 2 * j + lane / 16;                             // lanes 16-31: the right 8 columns
        unsigned reg[4];
        ldmatrix_x4(reg, &tile[r * 8 + (SWIZZLE ? c ^ (r % 8) : c)]);
        for (int m = 0; m < 4; ++m) dst[((warp * 4 + j) * 4 + m) * 32 + lane] = reg[m];
    }
}
"""


def fa2_source(padded: bool) -> str:
    """Module 04's FA2 solution; padded: K rows d + 1 floats apart in shared memory, so that the
    16 keys a warp reads at one column c fall in 16 different banks."""
    src = solution_source("flash_fwd_fa2")
    if not padded:
        return src
    return replace_each_once(src, [
        ("float* Vs = Ks + BC * d;", "float* Vs = Ks + BC * (d + 1);"),
        ("Ks[i] = real ?", "Ks[i / d * (d + 1) + i % d] = real ?"),
        ("Ks[x * d + c]", "Ks[x * (d + 1) + c]"),
    ], "the padded flash_fwd_fa2")


def _matmul(name):
    M = N = K = 128

    def inputs(rng):
        return {"A": rng.standard_normal((M, K), dtype=np.float32), "B": rng.standard_normal((K, N), dtype=np.float32),
                "C": np.zeros((M, N), np.float32)}

    return dict(source=lambda: solution_source(name), kernel=name, grid=(N // 16, M // 16, 1), block=(16, 16, 1),
                shared_mem=0, inputs=inputs, args=lambda a: [a["A"], a["B"], a["C"], np.int32(M), np.int32(N), np.int32(K)],
                shape=f"M=N=K={M}")


def _fa2(padded):
    B, H, N, d, BR, BC = 1, 2, 128, 64, 16, 16

    def inputs(rng):
        q, k, v = (rng.standard_normal((B, H, N, d), dtype=np.float32) for _ in range(3))
        return {"Q": q, "K": k, "V": v, "O": np.zeros((B, H, N, d), np.float32), "L": np.zeros((B, H, N), np.float32)}

    floats = 2 * BR * d + 2 * BC * d + BR * BC + 2 * BR + (BC if padded else 0)
    return dict(source=lambda: fa2_source(padded), kernel="flash_fwd_fa2", grid=(N // BR, H, B), block=(BC, BR, 1),
                shared_mem=4 * floats, inputs=inputs,
                args=lambda a: [a["Q"], a["K"], a["V"], a["O"], a["L"], np.int32(N), np.int32(d), np.float32(d ** -0.5)],
                shape=f"B={B}, H={H}, N={N}, d={d}")


def _copy(vec4):
    n = 1 << 16

    def inputs(rng):
        return {"a": rng.standard_normal(n, dtype=np.float32), "b": np.zeros(n, np.float32)}

    count = n // 4 if vec4 else n
    return dict(source=lambda: COPY, kernel="copy_vec4" if vec4 else "copy_scalar", grid=(count // 256, 1, 1),
                block=(256, 1, 1), shared_mem=0, inputs=inputs, args=lambda a: [a["a"], a["b"], np.int32(count)],
                shape=f"n={n} floats")


def _ldmatrix(swizzle):
    blocks = 16

    def inputs(rng):
        return {"in": rng.integers(0, 2**32, blocks * 64 * 8 * 4, dtype=np.uint32),
                "out": np.zeros(blocks * 4 * 4 * 4 * 32, np.uint32)}

    return dict(source=lambda: LDMATRIX, kernel="ldmatrix_tile", options=(f"-DSWIZZLE={int(swizzle)}",),
                grid=(blocks, 1, 1), block=(128, 1, 1), shared_mem=0, inputs=inputs,
                args=lambda a: [a["in"], a["out"]], shape=f"{blocks} tiles of 64 x 64 fp16")


# name -> (pair, spec); in each pair the first variant is the one expected to cost more
CASES = {
    "matmul_naive": ("matmul", _matmul("matmul_naive")),
    "matmul_tiled": ("matmul", _matmul("matmul_tiled")),
    "fa2_k_stride_d": ("fa2_k", _fa2(padded=False)),
    "fa2_k_stride_d_plus_1": ("fa2_k", _fa2(padded=True)),
    "copy_scalar": ("copy", _copy(vec4=False)),
    "copy_vec4": ("copy", _copy(vec4=True)),
    "ldmatrix_plain": ("ldmatrix", _ldmatrix(swizzle=False)),
    "ldmatrix_swizzled": ("ldmatrix", _ldmatrix(swizzle=True)),
}


def _kernel(spec, backend):
    return RawKernel(spec["source"](), spec["kernel"], options=spec.get("options", ()), backend=backend)


def _arrays(spec, to_device=lambda x: x):
    a = {k: to_device(v) for k, v in spec["inputs"](np.random.default_rng(20260101)).items()}
    return spec["args"](a)


# ----------------------------------------------------------------------------- phases

def emulator_phase(out: Path) -> dict:
    from grader.emulator import _toolchain

    results = {"source": "emulator", "host": platform.node(), "clang": _toolchain.clang(), "cases": {}}
    for name, (pair, spec) in CASES.items():
        t0 = time.perf_counter()
        report = _kernel(spec, "cpu")(spec["grid"], spec["block"], _arrays(spec), shared_mem=spec["shared_mem"],
                                      profile=True)
        p = report.profile
        results["cases"][name] = {"pair": pair, "kernel": spec["kernel"], "shape": spec["shape"], "totals": p.totals,
                                  "ideal": p.ideal_totals, "rows": p.to_dict()["rows"],
                                  "seconds": round(time.perf_counter() - t0, 2)}
        print(f"{name:24s} {json.dumps(p.totals)}", flush=True)
    _write(out, results)
    return results


def launch_one(name: str) -> None:
    """The driver ncu profiles: one launch of one case on the GPU."""
    import cupy

    _, spec = CASES[name]
    kernel = _kernel(spec, "gpu").compile()
    kernel(spec["grid"], spec["block"], _arrays(spec, cupy.asarray), shared_mem=spec["shared_mem"])
    cupy.cuda.runtime.deviceSynchronize()


def _run_ncu(ncu: str, name: str, kernel: str, metrics: list[str]) -> subprocess.CompletedProcess:
    cmd = [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(metrics), "--kernel-name", f"regex:^{kernel}$",
           "--launch-count", "1", sys.executable, str(Path(__file__).resolve()), "--launch", name]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def _parse_ncu_csv(text: str) -> dict[str, float]:
    rows = [ln for ln in text.splitlines() if ln.startswith('"')]
    values = {}
    for row in csv.DictReader(rows):
        raw = (row.get("Metric Value") or "").replace(",", "")
        try:
            values[row["Metric Name"]] = float(raw)
        except (KeyError, ValueError):
            continue
    return values


def ncu_phase(out: Path, ncu: str) -> dict:
    import cupy

    exe = shutil.which(ncu)
    if exe is None:
        raise SystemExit(f"{ncu} not found: pass --ncu-path")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    props = cupy.cuda.runtime.getDeviceProperties(0)
    results = {"source": "ncu", "device": props["name"].decode(), "ncu": version, "cupy": cupy.__version__, "cases": {}}
    wanted = [m for ms in METRICS.values() for m in ms] + EXTRA_METRICS
    for name, (pair, spec) in CASES.items():
        done = _run_ncu(exe, name, spec["kernel"], wanted)
        values = _parse_ncu_csv(done.stdout)
        note = ""
        if not values:
            # An unknown metric name fails the whole run: fall back to one metric at a time.
            note = (done.stdout + done.stderr)[-1500:]
            for m in wanted:
                values |= _parse_ncu_csv(_run_ncu(exe, name, spec["kernel"], [m]).stdout)
        totals = {k: int(sum(values.get(m, 0) for m in ms)) for k, ms in METRICS.items()}
        results["cases"][name] = {"pair": pair, "kernel": spec["kernel"], "shape": spec["shape"], "totals": totals,
                                  "metrics": values, "missing": [m for m in wanted if m not in values], "note": note}
        print(f"{name:24s} {json.dumps(totals)}", flush=True)
    _write(out, results)
    return results


def compare_phase(emu: dict, gpu: dict, out: Path) -> bool:
    lines = [f"emulator profiler vs Nsight Compute ({gpu.get('device', '?')}, {' '.join(gpu.get('ncu', []))}); "
             f"totals within {TOLERANCE:.0%}, same ranking per pair", ""]
    head = f"{'case':24s} {'total':24s} {'emulator':>10s} {'ncu':>10s} {'ratio':>7s}"
    lines += [head, "-" * len(head)]
    ok = True
    for name, e in emu["cases"].items():
        g = gpu["cases"].get(name)
        if g is None:
            lines.append(f"{name:24s} missing from the ncu results")
            ok = False
            continue
        for key, ev in e["totals"].items():
            gv = g["totals"][key]
            if ev == 0 and gv == 0:
                continue
            ratio = ev / gv if gv else float("inf")
            good = abs(ratio - 1) <= TOLERANCE
            ok &= good
            lines.append(f"{name:24s} {key:24s} {ev:10d} {gv:10d} {ratio:7.3f}{'' if good else '  OUT'}")
    lines += ["", "ranking (first variant : second variant, on the pair's key metric):"]
    pairs: dict[str, list[str]] = {}
    for name, (pair, _) in CASES.items():
        pairs.setdefault(pair, []).append(name)
    for pair, (a, b) in pairs.items():
        key = KEY[pair]
        if a not in gpu["cases"] or b not in gpu["cases"]:
            continue
        ea, eb = emu["cases"][a]["totals"][key], emu["cases"][b]["totals"][key]
        ga, gb = gpu["cases"][a]["totals"][key], gpu["cases"][b]["totals"][key]
        same = np.sign(ea - eb) == np.sign(ga - gb)
        ok &= bool(same)
        lines.append(f"  {pair:9s} {key:24s} emulator {ea}:{eb}  ncu {ga}:{gb}  {'same' if same else 'DIFFERENT'}")
    lines += ["", "PASS" if ok else "FAIL"]
    text = "\n".join(lines) + "\n"
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return ok


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"written: {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--emulator", action="store_true", help="profile every case on the CPU emulator")
    mode.add_argument("--ncu", action="store_true", help="run every case under Nsight Compute (GPU)")
    mode.add_argument("--compare", action="store_true", help="compare the two JSON files")
    mode.add_argument("--launch", metavar="CASE", choices=sorted(CASES), help=argparse.SUPPRESS)
    ap.add_argument("--emulator-json", type=Path, default=RESULTS / "profile_emulator.json")
    ap.add_argument("--ncu-json", type=Path, default=RESULTS / "profile_ncu.json")
    ap.add_argument("--table", type=Path, default=RESULTS / "profile_vs_ncu.txt")
    ap.add_argument("--ncu-path", default="ncu")
    args = ap.parse_args()
    if args.launch:
        launch_one(args.launch)
        return 0
    if args.emulator:
        emulator_phase(args.emulator_json)
        return 0
    if args.ncu:
        ncu_phase(args.ncu_json, args.ncu_path)
        if not args.emulator_json.exists():
            return 0
    emu = json.loads(args.emulator_json.read_text())
    gpu = json.loads(args.ncu_json.read_text())
    return 0 if compare_phase(emu, gpu, args.table) else 1


if __name__ == "__main__":
    sys.exit(main())
