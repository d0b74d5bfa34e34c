"""The emulator's math headers as kernels use them: every include order with the C/C++ standard
headers compiles, kernel-style code (min/max on ints and floats, __expf, rsqrtf, float4, __half)
compiles and links across translation units, and CUDA's opt-out macros are honoured."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

OURS = ["emu_math.hpp", "cuda_fp16.h", "cuda_bf16.h", "math_constants.h"]
STD = ["cmath", "math.h", "cstdlib", "algorithm"]

# Kernel-style code touching the names most likely to collide with the C/C++ libraries.
KERNEL = r"""
__device__ __forceinline__ float scaled_exp(float x, float m) { return __expf(x - m); }

__host__ __device__ inline float kernel_like(const float* q, const __half* k, __nv_bfloat16* o, int n, float scale) {
    int last = min(n - 1, 7);                       // min(int, int)
    unsigned wide = max(3u, static_cast<unsigned>(n)); // max(unsigned, unsigned)
    float m = -CUDART_INF_F, s = 0.0f;
    for (int j = 0; j < n; ++j) m = max(m, q[j] * scale);  // max(float, float)
    for (int j = 0; j < n; ++j) s += scaled_exp(q[j] * scale, m) * rsqrtf(1.0f + j) + exp2f(-j) * __fdividef(1.0f, 8.0f);
    const float4 v = reinterpret_cast<const float4*>(q)[0];
    const __half h = k[last] * __float2half(scale) + __hmax(k[0], __float2half(0.0f));
    o[0] = __float2bfloat16(__half2float(h) + fminf(s, 1e30f) + fmaxf(v.x, v.w));
    const bool bad = isnan(s) || isinf(m) || signbit(-s) == 0 || std::isnan(v.y);
    return bad ? CUDART_NAN_F : s + min(1.5f, 2.0f) + static_cast<float>(wide % 2) + __ldg(&q[0]) * 0.0f + fabsf(-0.0f) + sqrtf(0.0f) + expf(0.0f) - 1.0f + __saturatef(2.0f) - 1.0f;
}
"""


def translation_unit(order: list[str], prologue: str = "", body: str = KERNEL) -> str:
    lines = [prologue]
    for h in order:
        lines.append(f'#include "{h}"' if h in OURS else f"#include <{h}>")
    return "\n".join(lines) + "\n" + body


ORDERS = {
    "std_first": STD + OURS,
    "ours_first": OURS + STD,
    "interleaved": ["math.h", "cuda_fp16.h", "algorithm", "emu_math.hpp", "cmath", "math_constants.h", "cstdlib", "cuda_bf16.h"],
    "bf16_only_then_std": ["cstdlib", "cuda_bf16.h", "math_constants.h", "cmath", "math.h", "algorithm"],
    # The emulator runtime defines the keywords its own way before including emu_math.hpp.
    "runtime_keywords": OURS + STD,
}


@pytest.mark.parametrize("name", ORDERS)
def test_include_orders_compile(gxx, compile_cpp, tmp_path, name):
    prologue = ""
    if name == "runtime_keywords":
        prologue = "#define __device__\n#define __host__\n#define __forceinline__ inline __attribute__((always_inline))\n"
    src = tmp_path / f"{name}.cpp"
    src.write_text(translation_unit(ORDERS[name], prologue))
    compile_cpp(gxx, [src], None, "-O2")


def test_standard_library_and_using_namespace_std(gxx, compile_cpp, tmp_path):
    """After more of libstdc++ and `using namespace std`, min/max/isnan still resolve as in CUDA."""
    more = ["complex", "random", "valarray", "numeric", "functional", "iostream", "vector", "limits", "cstring"]
    body = "".join(f"#include <{h}>\n" for h in more) + "using namespace std;\n" + KERNEL + r"""
    static_assert(std::is_same_v<decltype(min(1, 2)), int>);
    static_assert(std::is_same_v<decltype(max(2.0f, 1.0f)), float>);
    inline bool f(double d, float x) { return isnan(d) || isinf(x) || abs(-1) != 1 || abs(-1.5f) != 1.5f; }
    """
    src = tmp_path / "stdcpp.cpp"
    src.write_text(translation_unit(OURS, "", body))
    compile_cpp(gxx, [src], None, "-O2")


SOFTMAX = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <cmath>
#include <cstdio>
#include <type_traits>

// What CUDA declares, and how it resolves.
static_assert(std::is_same_v<decltype(min(1, 2)), int>);
static_assert(std::is_same_v<decltype(min(1, 2u)), unsigned>);
static_assert(std::is_same_v<decltype(max(1u, -1)), unsigned>);
static_assert(std::is_same_v<decltype(max(1.0f, 2.0f)), float>);
static_assert(std::is_same_v<decltype(min(1.0f, 2.0)), double>);
static_assert(std::is_same_v<decltype(max(1ll, 2ull)), unsigned long long>);
static_assert(std::is_same_v<decltype(min(sizeof(int), sizeof(long))), unsigned long>);
static_assert(sizeof(float4) == 16 && alignof(float4) == 16 && alignof(float2) == 8 && sizeof(float3) == 12 &&
              alignof(float3) == 4 && alignof(int4) == 16 && alignof(uint2) == 8 && alignof(double2) == 16 &&
              alignof(char4) == 4 && alignof(uchar4) == 4 && alignof(short2) == 4 && alignof(longlong2) == 16);
static_assert(sizeof(__half) == 2 && alignof(__half2) == 4 && sizeof(__nv_bfloat162) == 4 && alignof(__nv_bfloat162) == 4);
static_assert(std::is_trivial_v<__half> && std::is_trivial_v<__half2> && std::is_trivial_v<__nv_bfloat16> &&
              std::is_trivially_copyable_v<__nv_bfloat162> && std::is_trivial_v<float4>);
static_assert(__int_as_float(0x7f800000) == CUDART_INF_F && __float_as_uint(1.0f) == 0x3f800000u);

float row_logsumexp(const __half* x, int n, float scale, float* p);  // other.cpp

int main() {
    __half x[37];
    for (int j = 0; j < 37; ++j) x[j] = __float2half(0.25f * (j % 11) - 1.0f);
    float p[37];
    const float lse = row_logsumexp(x, 37, 0.5f, p);
    std::printf("%.9g\n", lse);
    for (float v : p) std::printf("%.9g\n", v);
}
"""

OTHER = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>

// Online softmax over one row, as a FlashAttention kernel does it.
__device__ __forceinline__ float lane_max(float a, float b) { return max(a, b); }

float row_logsumexp(const __half* x, int n, float scale, float* p) {
    float m = -CUDART_INF_F, l = 0.0f;
    for (int j = 0; j < n; ++j) {
        const float s = __half2float(x[j]) * scale;
        const float m_new = lane_max(m, s);
        l = l * __expf(m - m_new) + __expf(s - m_new);
        m = m_new;
    }
    const float inv = __frcp_rn(l);
    for (int j = 0; j < min(n, 64); ++j) p[j] = exp2f((__half2float(x[j]) * scale - m) * CUDART_L2E_F) * inv;
    return m + __logf(l);
}
"""


@pytest.mark.parametrize("compiler,opt", [("gxx", "-O0"), ("gxx", "-O2"), ("clang", "-O2")])
def test_kernel_like_code_links_and_runs(request, compile_cpp, tmp_path, compiler, opt):
    """Two translation units include the headers (inline functions, no duplicate symbols, also
    at -O0 where nothing is inlined) and compute an online softmax correctly; with g++ and with
    the clang++ the emulator uses for IO counting."""
    cxx = request.getfixturevalue(compiler)
    (tmp_path / "main.cpp").write_text(SOFTMAX)
    (tmp_path / "other.cpp").write_text(OTHER)
    exe = tmp_path / "softmax"
    compile_cpp(cxx, [tmp_path / "main.cpp", tmp_path / "other.cpp"], exe, opt)
    out = np.array(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split(), float)
    x = (0.25 * (np.arange(37) % 11) - 1.0) * 0.5
    lse = np.log(np.sum(np.exp(x)))
    np.testing.assert_allclose(out[0], lse, rtol=1e-6)
    np.testing.assert_allclose(out[1:], np.exp(x - lse), rtol=1e-5)


def test_cuda_opt_out_macros(gxx, compile_cpp, tmp_path):
    """With CUDA's __CUDA_NO_*_CONVERSIONS__/OPERATORS__ macros the types lose their implicit
    conversions and operators, and the intrinsics still work."""
    prologue = "".join(f"#define __CUDA_NO_{m}__\n" for m in
                       ["HALF_CONVERSIONS", "HALF_OPERATORS", "HALF2_OPERATORS", "BFLOAT16_CONVERSIONS",
                        "BFLOAT16_OPERATORS", "BFLOAT162_OPERATORS"])
    body = r"""
    #include <type_traits>
    static_assert(!std::is_convertible_v<float, __half> && !std::is_convertible_v<__half, float>);
    static_assert(!std::is_convertible_v<float, __nv_bfloat16>);
    inline float f(__half a, __nv_bfloat162 b) {
        return __half2float(__hfma(a, a, hexp(a))) + __low2float(__hmul2(b, b)) + (__hlt(a, a) ? 1.0f : 0.0f);
    }
    """
    src = tmp_path / "optout.cpp"
    src.write_text(translation_unit(OURS, prologue, body))
    compile_cpp(gxx, [src], None, "-O2")


def test_half_operators_mirror_cuda(gxx, emu_include, tmp_path):
    """Mixed __half/float arithmetic is ambiguous in CUDA (both __half(float) and operator float()
    exist); it must be here too, so code that builds on the emulator also builds with NVRTC."""
    src = tmp_path / "ambiguous.cpp"
    src.write_text('#include "cuda_fp16.h"\nfloat f(__half h) { return h * 2.0f; }\n')
    res = subprocess.run([gxx, "-std=c++20", "-fsyntax-only", f"-I{emu_include}", str(src)], capture_output=True, text=True)
    assert res.returncode != 0 and "ambiguous" in res.stderr
