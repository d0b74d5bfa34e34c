"""The hardware facts of the GPUs the course names, one row per model, and the occupancy they imply.

Every limit the launch checks enforce, every peak a reading or figure divides by and every SM count
a host heuristic spreads work over is read from here, so a fact is written once with its source.
The course's limits are the H100 SXM's (:data:`H100_SXM`); the H200 (the GPU the benchmarks ran
on) is the same GH100 chip with faster, larger memory, and the A100 is the sm_80 part NVRTC builds
for.

Sources, cited per field below:
  [guide]  CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (8.0, 9.0).
  [occ]    CUDA's occupancy calculator, cuda_occupancy.h: registers handed to a warp in units of 256
           from one of the SM's four sub-partitions; 1 KB of shared memory reserved per block.
  [h100wp] NVIDIA H100 Tensor Core GPU Architecture whitepaper, the H100 SXM5 column: 132 SMs,
           tensor peaks at the 1.83 GHz boost clock (989.4 dense fp16/bf16 TFLOP/s, 1978.9 fp8),
           FP32 66.9 TFLOP/s, 50 MB L2, 1.98 GHz maximum clock; 128 bytes/clock of shared memory
           per SM.
  [h100ds] NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 80 GB of HBM3 at 3.35 TB/s.
  [h200ds] NVIDIA H200 Tensor Core GPU datasheet: 141 GB of HBM3e at 4.8 TB/s; compute as H100 SXM.
  [a100wp] NVIDIA A100 Tensor Core GPU Architecture whitepaper and the A100 80GB SXM datasheet:
           108 SMs, 1410 MHz boost, 312 dense fp16/bf16 TFLOP/s, 19.5 FP32, 40 MB L2, 80 GB of
           HBM2e at 2039 GB/s, no fp8.
"""
from __future__ import annotations

from dataclasses import dataclass

KB = 1024


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str  # the NVRTC --gpu-architecture of its compute capability
    sms: int
    # per block [guide]
    max_threads_per_block: int
    max_block_dim: tuple[int, int, int]
    max_grid_dim: tuple[int, int, int]
    static_shared_per_block: int  # bytes: static __shared__, and dynamic without opting in
    max_shared_per_block_optin: int  # bytes, with cudaFuncAttributeMaxDynamicSharedMemorySize
    registers_per_block: int
    max_registers_per_thread: int
    # per SM [guide], [occ]
    warp_size: int
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int  # 32-bit registers
    register_unit_per_warp: int
    sub_partitions: int
    shared_per_sm: int  # bytes
    shared_reserved_per_block: int  # bytes
    shared_bytes_per_clock_per_sm: int
    # the whole chip
    l2_mb: int  # as the datasheets state it (decimal megabytes)
    hbm_gb: int
    hbm_gbps: int  # GB/s
    max_clock_mhz: int
    tensor_clock_mhz: int  # the boost clock the tensor peaks are quoted at
    fp32_tflops: float  # CUDA cores, no tensor cores
    fp16_dense_tflops: float  # tensor cores, fp32 accumulate, without 2:4 sparsity
    bf16_dense_tflops: float
    fp8_dense_tflops: float | None  # None: no fp8 tensor cores

    @property
    def hbm_tbps(self) -> float:
        return self.hbm_gbps / 1000


# Compute capability 8.0 and 9.0 share these [guide], [occ].
_CC8_9 = dict(max_threads_per_block=1024, max_block_dim=(1024, 1024, 64), max_grid_dim=(2**31 - 1, 65535, 65535),
              static_shared_per_block=48 * KB, registers_per_block=65536, max_registers_per_thread=255, warp_size=32,
              max_threads_per_sm=2048, max_warps_per_sm=64, max_blocks_per_sm=32, registers_per_sm=65536,
              register_unit_per_warp=256, sub_partitions=4, shared_reserved_per_block=1 * KB,
              shared_bytes_per_clock_per_sm=128)

_GH100 = dict(_CC8_9, arch="sm_90", sms=132, shared_per_sm=228 * KB, max_shared_per_block_optin=227 * KB,  # [guide]
              l2_mb=50, max_clock_mhz=1980, tensor_clock_mhz=1830, fp32_tflops=66.9,  # [h100wp]
              fp16_dense_tflops=989.4, bf16_dense_tflops=989.4, fp8_dense_tflops=1978.9)  # [h100wp]

H100_SXM = Gpu(name="H100 SXM", hbm_gb=80, hbm_gbps=3350, **_GH100)  # [h100ds]
H200 = Gpu(name="H200", hbm_gb=141, hbm_gbps=4800, **_GH100)  # [h200ds]
A100_SXM = Gpu(name="A100 SXM 80GB", arch="sm_80", sms=108, shared_per_sm=164 * KB,  # [guide]
               max_shared_per_block_optin=163 * KB, **_CC8_9,  # [guide]
               l2_mb=40, hbm_gb=80, hbm_gbps=2039, max_clock_mhz=1410, tensor_clock_mhz=1410,  # [a100wp]
               fp32_tflops=19.5, fp16_dense_tflops=312.0, bf16_dense_tflops=312.0, fp8_dense_tflops=None)  # [a100wp]

GPUS = (H100_SXM, H200, A100_SXM)


def runs_on(requires: str, compute_capability: str) -> bool:
    """Whether a GPU of ``compute_capability`` ("90", as CUDA reports it) runs code built for
    ``requires``: "sm_90a" (architecture-specific features such as wgmma) only on 9.0 itself,
    "sm_80" on 8.0 and every later one."""
    want = requires.removeprefix("sm_")
    if want.endswith("a"):
        return compute_capability == want[:-1]
    return int(compute_capability) >= int(want)


def models_for(requires: str) -> str:
    """The GPUs of the table that run ``requires``, in words ("H100 SXM or H200")."""
    return " or ".join(g.name for g in GPUS if runs_on(requires, g.arch.removeprefix("sm_")))


def _ceil_div(n: int, b: int) -> int:
    return -(-n // b)


def block_limits(threads: int, smem: int, regs: int | None = None, gpu: Gpu = H100_SXM) -> dict[str, int]:
    """The blocks of ``threads`` threads and ``smem`` bytes of shared memory (and ``regs`` registers a
    thread, when given) one SM of ``gpu`` could hold by each resource alone [occ]."""
    warps = _ceil_div(threads, gpu.warp_size)
    limits = {}
    if regs is not None:
        per_warp = _ceil_div(regs * gpu.warp_size, gpu.register_unit_per_warp) * gpu.register_unit_per_warp
        # each sub-partition holds whole warps
        warps_by_regs = gpu.registers_per_sm // gpu.sub_partitions // per_warp * gpu.sub_partitions
        limits["registers"] = warps_by_regs // warps
    limits["shared memory"] = gpu.shared_per_sm // (smem + gpu.shared_reserved_per_block)
    limits["warps"] = gpu.max_warps_per_sm // warps
    limits["blocks"] = gpu.max_blocks_per_sm
    return limits


def blocks_per_sm(regs: int, threads: int, smem: int, gpu: Gpu = H100_SXM) -> tuple[int, str]:
    """Resident blocks per SM of ``gpu``, and the limit that binds (the first of equals in
    :func:`block_limits`' order)."""
    limits = block_limits(threads, smem, regs, gpu)
    binding = min(limits, key=limits.get)
    return limits[binding], binding
