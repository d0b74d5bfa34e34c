"""Every exercise of the course, declared module by module (importing this registers them)."""
from . import (  # noqa: F401
    m00_launching_kernels,
    m01_naive_attention,
    m02_tiled_matmul,
    m03_online_softmax,
    m04_flash_forward,
    m05_masking,
    m06_backward,
    m07_memory_and_precision,
    m08_tensor_cores,
    m09_pipelines,
    m10_decoding,
    m11_capstone,
    m12_triton,
)
