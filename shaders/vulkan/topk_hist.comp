#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "topk.glsl"
// Radix-select pass (one of 4, digit = bits [shift, shift+8) of fkey): per (row, chunk) workgroup,
// a 256-bin histogram (shared-memory integer atomics) of the keys of valid entries (j < row_len)
// whose higher digits equal the row's prefix so far. x: [rows][n] F32.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { uint d[]; } x;
layout(std430, binding = 1) readonly buffer RL { uint d[]; } rl;
layout(std430, binding = 2) readonly buffer ST { uint d[]; } st;
layout(std430, binding = 3) writeonly buffer H { uint d[]; } hist;
KVS_VK_PUSH(KVS_VK_PC_TOPK_HIST)
shared uint sh[256];
void main() {
    uint g = LIN_GROUP;
    if (g >= p.rows * p.nchunks) return;
    uint row = g / p.nchunks, ch = g % p.nchunks;
    for (uint b = TID; b < 256u; b += WGX) sh[b] = 0u;
    barrier();
    uint len = p.n;
    if (p.has_rl != 0u) len = uint(clamp(int(rl.d[p.orl + row]), 0, int(p.n)));
    uint prefix = st.d[p.ost + row * 4u], krem = st.d[p.ost + row * 4u + 1u];
    uint hm = p.shift >= 24u ? 0u : (0xffffffffu << (p.shift + 8u));
    uint end = min(len, (ch + 1u) * p.chunk);
    if (krem > 0u)
        for (uint j = ch * p.chunk + TID; j < end; j += WGX) {
            uint key = fkey(F32(x, p.ox + row * p.n + j));
            if ((key & hm) == (prefix & hm)) atomicAdd(sh[(key >> p.shift) & 255u], 1u);
        }
    barrier();
    for (uint b = TID; b < 256u; b += WGX) hist.d[p.oh + g * 256u + b] = sh[b];
}
