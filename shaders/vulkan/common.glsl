// Shared helpers for kvsieve Vulkan compute shaders. Every buffer is `uint d[]` (std430); f32/i32
// are reinterpreted, f16/bf16 are 16-bit halves of words, block types are addressed by bytes (quant.glsl), so the
// shaders need no 16-bit storage extension (Vulkan 1.1 baseline). Element offsets of tensors within
// their binding come in push constants. Workgroup size: specialization constant 0 (local_size_x_id).
// Push-constant blocks, flags, dtype codes and MODE values: vk_params.h (shared with the C host).
#ifndef KVS_COMMON_GLSL
#define KVS_COMMON_GLSL

#include "vk_params.h"

#define FLT_MAX_ 3.402823466e+38
#define WGX gl_WorkGroupSize.x
#define LIN_GROUP (gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y)
#define TID gl_LocalInvocationID.x

// 16-bit half e of a word array (e in 16-bit units)
#define H16(buf, e) ((buf.d[(e) >> 1u] >> (((e) & 1u) * 16u)) & 0xffffu)
#define BYTE8(buf, b) ((buf.d[(b) >> 2u] >> (((b) & 3u) * 8u)) & 0xffu)
#define F32(buf, e) uintBitsToFloat(buf.d[e])

// f16 bits -> f32, exact (denormals included)
float h2f(uint h) {
    uint s = (h & 0x8000u) << 16u;
    uint e = (h >> 10u) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 0u) return ((s != 0u) ? -1.0 : 1.0) * float(m) * 5.9604644775390625e-8;
    if (e == 31u) return uintBitsToFloat(s | 0x7f800000u | (m << 13u));
    return uintBitsToFloat(s | ((e + 112u) << 23u) | (m << 13u));
}
float bf2f(uint h) { return uintBitsToFloat(h << 16u); }

// f32 -> f16 bits, round to nearest even (as kvs_f32_to_f16)
uint f2h(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16u) & 0x8000u;
    uint ex = (x >> 23u) & 0xffu;
    uint mant = x & 0x7fffffu;
    if (ex == 0xffu) return sign | 0x7c00u | ((mant != 0u) ? (0x200u | (mant >> 13u)) : 0u);
    int e = int(ex) - 112;
    if (e >= 31) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        mant |= 0x800000u;
        uint shift = uint(14 - e);
        uint hv = mant >> shift;
        uint rem = mant & ((1u << shift) - 1u);
        uint mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (hv & 1u) != 0u)) hv++;
        return sign | hv;
    }
    uint h = (uint(e) << 10u) | (mant >> 13u);
    uint rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}
// f32 -> bf16 bits, round to nearest even, NaN stays NaN (as kvs_f32_to_bf16)
uint f2bf(float f) {
    uint x = floatBitsToUint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16u) | 0x40u;
    x += 0x7fffu + ((x >> 16u) & 1u);
    return x >> 16u;
}

// Load element e of a float tensor of dtype dt (f32/f16/bf16: e in element units incl. the
// tensor's offset). Block types: quant.glsl.
#define LDF(buf, e, dt) ((dt) == KVS_VK_DT_F32 ? F32(buf, e) : ((dt) == KVS_VK_DT_F16 ? h2f(H16(buf, e)) : bf2f(H16(buf, e))))

#endif
