#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// dst = convert(src), F32/F16/BF16 any pair, round-to-nearest-even. [n] elements.
// 16-bit destinations: one invocation per destination word (halves outside the tensor kept).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SD = 0;  // src dtype
layout(constant_id = 2) const uint DD = 0;  // dst dtype
layout(std430, binding = 0) readonly buffer S { uint d[]; } s;
layout(std430, binding = 1) buffer D { uint d[]; } dst;
KVS_VK_PUSH(KVS_VK_PC_COPY)
uint conv(uint i) {
    float f = LDF(s, p.os + i, SD);
    return DD == KVS_VK_DT_F16 ? f2h(f) : f2bf(f);
}
void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (DD == KVS_VK_DT_F32) {
        if (t >= p.n) return;
        dst.d[p.od + t] = floatBitsToUint(LDF(s, p.os + t, SD));
    } else {
        // word t covers dst elements 2*(w0+t) - od and +1, w0 = od/2
        uint w = (p.od >> 1u) + t;
        int e0 = int(2u * w) - int(p.od);
        if (e0 >= int(p.n)) return;
        uint old = dst.d[w];
        uint lo = old & 0xffffu, hi = old >> 16u;
        if (e0 >= 0) lo = conv(uint(e0));
        if (e0 + 1 < int(p.n)) hi = conv(uint(e0 + 1));
        dst.d[w] = lo | (hi << 16u);
    }
}
