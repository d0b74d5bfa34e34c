// Probe for the emulator's math headers: `probe OP` reads an array of input records from stdin
// and writes, per record, a fixed row of results to stdout (raw little-endian binary). The
// tests in test_emu_math.py feed inputs from NumPy and compare the rows with references.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using u16 = std::uint16_t;
using u32 = std::uint32_t;
using u64 = std::uint64_t;
using i64 = std::int64_t;

// Run f on every record of stdin and write each returned std::array to stdout.
template <class In, class F>
static void each(F f) {
    std::vector<char> buf;
    char chunk[1 << 16];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, stdin)) > 0;) buf.insert(buf.end(), chunk, chunk + n);
    for (std::size_t i = 0; i + sizeof(In) <= buf.size(); i += sizeof(In)) {
        In x;
        std::memcpy(&x, buf.data() + i, sizeof x);
        const auto row = f(x);
        std::fwrite(row.data(), sizeof row[0], row.size(), stdout);
    }
}

struct U3 { u16 a, b, c; };
struct F3 { float a, b, c; };
struct W3 { u32 x, y, s; };
struct L2 { u64 x, y; };
struct D2 { double a, b; };

static u16 hb(__half h) { return __half_as_ushort(h); }
static u16 bb(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }
static i64 as_i64(i64 v) { return v; }
// The low lane of a comparison pair, for either type.
static __half low_lane(__half2 h) { return __low2half(h); }
static __nv_bfloat16 low_lane(__nv_bfloat162 h) { return __low2bfloat16(h); }

// The arithmetic of one 16-bit type: T scalar, T2 pair, B its bits accessor, A/B operands.
// Columns: add sub mul div fma max min max_nan min_nan neg abs add_sat fma_relu fma_sat
// mul_sat, operators + - * / (binary) - (unary), +=, ++, pair lanes of __hadd2/__hmul2/__hfma2/
// __h2div/__hmax2 (low lane a,b,c; high lane b,c,a), __hcmadd x/y, comparison bits.
template <class T, class T2, class Bits>
static std::array<u16, 34> arith(T a, T b, T c, Bits bits) {
    const T2 p(a, b), q(b, c), r(c, a);
    T inc = a;
    ++inc;
    T acc = a;
    acc += b;
    const T2 cm = __hcmadd(p, q, r);
    unsigned cmp = __heq(a, b) | __hne(a, b) << 1 | __hlt(a, b) << 2 | __hle(a, b) << 3 | __hgt(a, b) << 4 |
                   __hge(a, b) << 5 | __hequ(a, b) << 6 | __hneu(a, b) << 7 | __hltu(a, b) << 8 |
                   __hleu(a, b) << 9 | __hgtu(a, b) << 10 | __hgeu(a, b) << 11 | (a == b) << 12 |
                   (a != b) << 13 | (a < b) << 14 | (a >= b) << 15;
    // Pair comparisons must agree with the scalar ones lane by lane.
    const unsigned m = __hlt2_mask(p, q);
    const bool pair_ok = (m == ((__hlt(a, b) ? 0xFFFFu : 0u) | (__hlt(b, c) ? 0xFFFF0000u : 0u))) &&
                         (__hblt2(p, q) == (__hlt(a, b) && __hlt(b, c))) && ((p < q) == __hblt2(p, q)) &&
                         (bits(low_lane(__hle2(p, q))) == bits(__hle(a, b) ? T(1.0f) : T(0.0f)));
    return {bits(__hadd(a, b)), bits(__hsub(a, b)), bits(__hmul(a, b)), bits(__hdiv(a, b)),
            bits(__hfma(a, b, c)), bits(__hmax(a, b)), bits(__hmin(a, b)), bits(__hmax_nan(a, b)),
            bits(__hmin_nan(a, b)), bits(__hneg(a)), bits(__habs(a)), bits(__hadd_sat(a, b)),
            bits(__hfma_relu(a, b, c)), bits(__hfma_sat(a, b, c)), bits(__hmul_sat(a, b)),
            bits(a + b), bits(a - b), bits(a * b), bits(a / b), bits(-a), bits(acc), bits(inc),
            bits(__hadd2(p, q).x), bits(__hadd2(p, q).y), bits(__hmul2(p, q).y), bits(__hfma2(p, q, r).y),
            bits(__h2div(p, q).y), bits(__hmax2(p, q).y), bits((p * q + r).y), bits(cm.x), bits(cm.y),
            static_cast<u16>(cmp), static_cast<u16>(pair_ok), 0};
}

// Math functions, and a check that the pair versions agree with the scalar ones.
template <class T, class T2, class Bits>
static std::array<u16, 18> math(T a, Bits bits) {
    const T2 p(a, a);
    const bool pair_ok = bits(h2exp(p).y) == bits(hexp(a)) && bits(h2sqrt(p).x) == bits(hsqrt(a)) &&
                         bits(h2rcp(p).y) == bits(hrcp(a)) && bits(h2floor(p).x) == bits(hfloor(a));
    return {bits(hexp(a)), bits(hexp2(a)), bits(hexp10(a)), bits(hlog(a)), bits(hlog2(a)), bits(hlog10(a)),
            bits(hsqrt(a)), bits(hrsqrt(a)), bits(hrcp(a)), bits(hsin(a)), bits(hcos(a)), bits(htanh(a)),
            bits(hceil(a)), bits(hfloor(a)), bits(htrunc(a)), bits(hrint(a)), static_cast<u16>(pair_ok), 0};
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const std::string op = argv[1];
    if (op == "f2h") {  // float -> half in every mode, and the implicit/pair spellings
        each<float>([](float x) {
            const __half implicit = x;
            return std::array<u16, 8>{hb(__float2half_rn(x)), hb(__float2half_rz(x)), hb(__float2half_ru(x)),
                                      hb(__float2half_rd(x)), hb(__float2half(x)), hb(implicit),
                                      hb(__float2half2_rn(x).y), hb(__floats2half2_rn(0.0f, x).y)};
        });
    } else if (op == "d2h") {
        each<double>([](double x) { const __half h(x); return std::array<u16, 2>{hb(__double2half(x)), hb(h)}; });
    } else if (op == "h2f") {
        each<u16>([](u16 u) {
            const __half h = __ushort_as_half(u);
            const float implicit = h;
            const float2 f2 = __half22float2(__halves2half2(h, __hneg(h)));
            return std::array<float, 4>{__half2float(h), implicit, __low2float(__half2half2(h)), f2.y};
        });
    } else if (op == "f2b") {
        each<float>([](float x) {
            const __nv_bfloat16 implicit = x;
            return std::array<u16, 8>{bb(__float2bfloat16_rn(x)), bb(__float2bfloat16_rz(x)), bb(__float2bfloat16_ru(x)),
                                      bb(__float2bfloat16_rd(x)), bb(__float2bfloat16(x)), bb(implicit),
                                      bb(__float2bfloat162_rn(x).y), bb(__float22bfloat162_rn(make_float2(0.0f, x)).y)};
        });
    } else if (op == "d2b") {
        each<double>([](double x) { const __nv_bfloat16 h(x); return std::array<u16, 2>{bb(__double2bfloat16(x)), bb(h)}; });
    } else if (op == "b2f") {
        each<u16>([](u16 u) {
            const __nv_bfloat16 h = __ushort_as_bfloat16(u);
            const float implicit = h;
            return std::array<float, 3>{__bfloat162float(h), implicit, __bfloat1622float2(__bfloat162bfloat162(h)).y};
        });
    } else if (op == "h2b") {  // explicit conversions between the two 16-bit types
        each<u16>([](u16 u) {
            return std::array<u16, 2>{bb(__nv_bfloat16(__ushort_as_half(u))), hb(__half(__ushort_as_bfloat16(u)))};
        });
    } else if (op == "h_arith") {
        each<U3>([](U3 r) { return arith<__half, __half2>(__ushort_as_half(r.a), __ushort_as_half(r.b), __ushort_as_half(r.c), hb); });
    } else if (op == "b_arith") {
        each<U3>([](U3 r) {
            return arith<__nv_bfloat16, __nv_bfloat162>(__ushort_as_bfloat16(r.a), __ushort_as_bfloat16(r.b),
                                                        __ushort_as_bfloat16(r.c), bb);
        });
    } else if (op == "h_math") {
        each<u16>([](u16 u) { return math<__half, __half2>(__ushort_as_half(u), hb); });
    } else if (op == "b_math") {
        each<u16>([](u16 u) { return math<__nv_bfloat16, __nv_bfloat162>(__ushort_as_bfloat16(u), bb); });
    } else if (op == "h2i") {  // 16-bit -> integer conversions (saturating)
        each<u16>([](u16 u) {
            const __half h = __ushort_as_half(u);
            const __nv_bfloat16 b = __ushort_as_bfloat16(u);
            return std::array<i64, 14>{__half2int_rn(h), __half2int_rz(h), __half2int_ru(h), __half2int_rd(h),
                                       as_i64(__half2uint_rn(h)), __half2short_rn(h), __half2ushort_rz(h),
                                       __half2ll_rz(h), __half2char_rz(h), static_cast<int>(h),
                                       __bfloat162int_rn(b), __bfloat162short_rz(b), as_i64(__bfloat162uint_rd(b)),
                                       __bfloat162ll_ru(b)};
        });
    } else if (op == "i2h") {  // integer -> 16-bit conversions in every mode
        each<i64>([](i64 v) {
            const int i = static_cast<int>(v);
            const u64 uv = static_cast<u64>(v);
            const __half implicit = v;  // long long constructor
            return std::array<u16, 16>{hb(__int2half_rn(i)), hb(__int2half_rz(i)), hb(__int2half_ru(i)), hb(__int2half_rd(i)),
                                       hb(__ll2half_rn(v)), hb(__ll2half_rd(v)), hb(__ull2half_ru(uv)), hb(implicit),
                                       bb(__int2bfloat16_rn(i)), bb(__int2bfloat16_rz(i)), bb(__int2bfloat16_ru(i)),
                                       bb(__int2bfloat16_rd(i)), bb(__ll2bfloat16_rn(v)), bb(__ll2bfloat16_rz(v)),
                                       bb(__ull2bfloat16_rn(uv)), bb(__ull2bfloat16_ru(uv))};
        });
    } else if (op == "f_math") {  // float functions of x (and y)
        each<F3>([](F3 r) {
            const float x = r.a, y = r.b;
            float s1, c1, s2, c2, s3, c3;
            sincosf(x, &s1, &c1);
            __sincosf(x, &s2, &c2);
            sincospif(x, &s3, &c3);
            return std::array<float, 34>{__expf(x), __exp10f(x), exp10f(x), __logf(x), __log2f(x), __log10f(x),
                                         __powf(x, y), __sinf(x), __cosf(x), __tanf(x), s1, c1, s2, c2,
                                         rsqrtf(x), __frsqrt_rn(x), __fdividef(x, y), fdividef(x, y), __frcp_rn(x),
                                         __fsqrt_rn(x), sinpif(x), cospif(x), s3, c3, norm3df(x, y, x),
                                         rnorm3df(x, y, x), rcbrtf(x), __saturatef(x), exp2f(x), normcdff(x),
                                         min(x, y), max(x, y), static_cast<float>(rsqrt(double(x))),
                                         static_cast<float>(exp10(double(x)))};
        });
    } else if (op == "f_round") {  // arithmetic in rz, ru, rd (7 ops each) and rn (7 ops)
        each<F3>([](F3 r) {
            const float a = r.a, b = r.b, c = r.c;
#define ROW(S) __fadd_##S(a, b), __fsub_##S(a, b), __fmul_##S(a, b), __fdiv_##S(a, b), __fmaf_##S(a, b, c), __fsqrt_##S(a), __frcp_##S(a)
            return std::array<float, 28>{ROW(rz), ROW(ru), ROW(rd), ROW(rn)};
#undef ROW
        });
    } else if (op == "d_round") {  // double arithmetic in rz, ru, rd (6 ops each)
        each<D2>([](D2 r) {
            const double a = r.a, b = r.b;
#define ROW(S) __dadd_##S(a, b), __dsub_##S(a, b), __dmul_##S(a, b), __ddiv_##S(a, b), __dsqrt_##S(a), __drcp_##S(a)
            return std::array<double, 21>{ROW(rz), ROW(ru), ROW(rd), __double2float_rz(a), __double2float_ru(a),
                                          __double2float_rd(a)};
#undef ROW
        });
    } else if (op == "f2i") {  // float -> integer (saturating, NaN -> 0 / 0x8000000000000000)
        each<float>([](float x) {
            return std::array<i64, 14>{__float2int_rn(x), __float2int_rz(x), __float2int_ru(x), __float2int_rd(x),
                                       as_i64(__float2uint_rn(x)), as_i64(__float2uint_rz(x)), __float2ll_rn(x),
                                       __float2ll_rd(x), static_cast<i64>(__float2ull_rz(x)),
                                       __double2int_rn(double(x) * 3), as_i64(__double2uint_ru(double(x) * 3)),
                                       __double2ll_rz(double(x) * 3), __float_as_int(x), as_i64(__float_as_uint(x))};
        });
    } else if (op == "i2f") {  // integer -> float/double in every mode
        each<i64>([](i64 v) {
            const int i = static_cast<int>(v);
            const u64 uv = static_cast<u64>(v);
            const unsigned ui = static_cast<unsigned>(v);
            return std::array<double, 16>{__int2float_rn(i), __int2float_rz(i), __int2float_ru(i), __int2float_rd(i),
                                          __uint2float_rz(ui), __uint2float_ru(ui), __ll2float_rn(v), __ll2float_rz(v),
                                          __ll2float_ru(v), __ll2float_rd(v), __ull2float_rn(uv), __ull2float_rd(uv),
                                          __ll2double_rz(v), __ll2double_ru(v), __ull2double_rd(uv), __int2double_rn(i)};
        });
    } else if (op == "int32") {  // 32-bit integer intrinsics of x, y, s
        each<W3>([](W3 r) {
            const u32 x = r.x, y = r.y, s = r.s;
            const int xi = static_cast<int>(x), yi = static_cast<int>(y);
            return std::array<u32, 24>{
                u32(__clz(xi)), u32(__popc(x)), u32(__ffs(xi)), __brev(x), __byte_perm(x, y, s),
                __funnelshift_l(x, y, s), __funnelshift_lc(x, y, s), __funnelshift_r(x, y, s), __funnelshift_rc(x, y, s),
                u32(__mul24(xi, yi)), __umul24(x, y), u32(__mulhi(xi, yi)), __umulhi(x, y), __sad(xi, yi, s),
                __usad(x, y, s), u32(__hadd(xi, yi)), u32(__rhadd(xi, yi)), __uhadd(x, y), __urhadd(x, y),
                u32(__dp4a(xi, yi, static_cast<int>(s))), __dp4a(x, y, s), u32(min(xi, yi)), min(xi, y), u32(max(xi, yi))};
        });
    } else if (op == "int64") {  // 64-bit integer intrinsics of x, y
        each<L2>([](L2 r) {
            const u64 x = r.x, y = r.y;
            const long long xl = static_cast<long long>(x), yl = static_cast<long long>(y);
            return std::array<u64, 8>{u64(__clzll(xl)), u64(__popcll(x)), u64(__ffsll(xl)), __brevll(x),
                                      u64(__mul64hi(xl, yl)), __umul64hi(x, y), u64(llmin(xl, yl)), ullmax(x, y)};
        });
    } else {
        return 2;
    }
    return 0;
}
