#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// y = l == 0 ? -inf : m + log(l), element-wise, F32 (kvs_log_mass: an attention call's log softmax
// mass from its row max m and row sum l). m, l, y: [n] (y may alias m or l).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint d[]; } a;
layout(std430, binding = 1) readonly buffer B { uint d[]; } b;
layout(std430, binding = 2) buffer Y { uint d[]; } y;
KVS_VK_PUSH(KVS_VK_PC_BINARY)
void main() {
    uint i = LIN_GROUP * WGX + TID;
    if (i >= p.n) return;
    float l = F32(b, p.ob + i);
    y.d[p.oy + i] = l == 0.0 ? 0xff800000u : floatBitsToUint(F32(a, p.oa + i) + log(l));
}
