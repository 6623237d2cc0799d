// Top-k helpers shared by the topk_*.comp passes (radix select + bitonic sort, deterministic).
// Order: larger score first, equal scores lower index first, NaN below every number; -0 == +0.
// fkey maps a float to a uint whose unsigned order is that score order (NaN -> 0).
// Scratch per row r (offsets in words, from push constants): state[r][4] = {prefix (the
// threshold key once all 4 digits are known), krem (entries still to take among keys equal to the
// prefix), cgt (entries taken with a larger key), unused}; hist[r][chunk][256]; cnt[r][chunk][2]
// (gt, eq; turned into exclusive offsets by the scan pass); selected keys/indices [r][P]
// (P = next power of two >= k; unused slots hold key 0, index KVS_VK_TOPK_EMPTY).
uint fkey(float f) {
    uint u = floatBitsToUint(f);
    if (isnan(f)) return 0u;
    if (u == 0x80000000u) u = 0u;
    return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}
// a before b in the output order (by score, or by index when by_index)
bool before(uint ka, uint ia, uint kb, uint ib, uint by_index) {
    if (by_index != 0u) return ia < ib;
    return ka > kb || (ka == kb && ia < ib);
}
