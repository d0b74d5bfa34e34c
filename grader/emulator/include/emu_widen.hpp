// emu_widen.hpp: the exact value of a 16-bit float, for the tensor-core models of the kernel side
// (emu_tensor.hpp) and of the launcher (hopper.cpp, wgmma).
#pragma once
#include <bit>

namespace emu {

// The low 16 bits of `bits` as half (BF16 false) or bfloat16.
template <bool BF16>
inline double widen(unsigned bits) {
    bits &= 0xffffu;
    if constexpr (BF16) {
        return std::bit_cast<float>(bits << 16);
    } else {
        const unsigned mag = bits & 0x7fffu;
        // Finite binary16 values, subnormals included, become exact floats by moving the bits
        // into float position and rescaling by 2^(127 - 15); inf and NaN keep their exponent.
        const float v = mag >= 0x7c00u ? std::bit_cast<float>(0x7f800000u | (mag & 0x3ffu) << 13)
                                       : std::bit_cast<float>(mag << 13) * 0x1p112f;
        return bits & 0x8000u ? -v : v;
    }
}

}  // namespace emu
