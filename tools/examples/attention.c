/* Attention with statistics through the public kvsieve API (the example in README.md).
 * Build: cc attention.c $(pkg-config --cflags --libs kvsieve)   Run: ./a.out [cpu|opencl|vulkan[:i]] */
#include <kvsieve/kvsieve.h>
#include <stdio.h>

#define CHECK(call)                                                                     \
    do {                                                                                \
        kvs_status s_ = (call);                                                         \
        if (s_ != KVS_OK) {                                                             \
            fprintf(stderr, "%s: %s\n", kvs_status_str(s_), kvs_last_error());          \
            return s_ == KVS_ERR_UNSUPPORTED ? 77 : 1; /* 77: "skipped" for meson test */ \
        }                                                                               \
    } while (0)

enum { N_Q = 4, N_KV = 6, HEADS = 4, KV_HEADS = 2, D = 8 };

int main(int argc, char **argv) {
    /* 1. Open a device: "cpu", "opencl", "vulkan", optionally ":index". */
    kvs_device_params dp = kvs_device_params_default();
    CHECK(kvs_device_params_parse(argc > 1 ? argv[1] : "cpu", &dp));
    kvs_device *dev = NULL;
    CHECK(kvs_device_open(&dev, &dp));
    printf("device: %s\n", kvs_device_get_info(dev)->name);

    /* 2. Tensors, ne[0] fastest: q [N_Q][HEADS][D], k/v [KV_HEADS][N_KV][D] (KV-cache layout). */
    static float q[N_Q * HEADS * D], k[KV_HEADS * N_KV * D], v[KV_HEADS * N_KV * D];
    for (int i = 0; i < N_Q * HEADS * D; i++) q[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < KV_HEADS * N_KV * D; i++) {
        k[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
        v[i] = (float)(i % D) + (float)(i / D);
    }
    kvs_tensor *tq, *tk, *tv, *out, *mass, *top;
    CHECK(kvs_tensor_new(&tq, dev, KVS_F32, D, HEADS, N_Q, 0));
    CHECK(kvs_tensor_new(&tk, dev, KVS_F32, D, N_KV, KV_HEADS, 0));
    CHECK(kvs_tensor_new(&tv, dev, KVS_F32, D, N_KV, KV_HEADS, 0));
    CHECK(kvs_tensor_new(&out, dev, KVS_F32, D, HEADS, N_Q, 0));
    CHECK(kvs_tensor_new(&mass, dev, KVS_F32, N_KV, KV_HEADS, 0, 0)); /* [KV_HEADS][N_KV] */
    CHECK(kvs_tensor_new(&top, dev, KVS_I32, HEADS, N_Q, 0, 0));      /* [N_Q][HEADS] */
    CHECK(kvs_tensor_upload(tq, q, 0, sizeof q));
    CHECK(kvs_tensor_upload(tk, k, 0, sizeof k));
    CHECK(kvs_tensor_upload(tv, v, 0, sizeof v));

    /* 3. Causal GQA attention; the same pass writes per-key attention mass (what H2O-style
     *    eviction scores) and the most-attended key of every query row and head. */
    kvs_attention_params ap = kvs_attention_params_default();
    ap.causal = 1;        /* query i (at position N_KV - N_Q + i) sees keys 0..its position */
    ap.key_mass = mass;
    ap.argmax = top;
    CHECK(kvs_attention(dev, tq, tk, tv, out, &ap));

    /* 4. Read back (download waits for the device). */
    float o[N_Q * HEADS * D], m[KV_HEADS * N_KV];
    int32_t am[N_Q * HEADS];
    CHECK(kvs_tensor_download(out, o, 0, sizeof o));
    CHECK(kvs_tensor_download(mass, m, 0, sizeof m));
    CHECK(kvs_tensor_download(top, am, 0, sizeof am));
    for (int h = 0; h < KV_HEADS; h++) {
        double sum = 0;
        printf("kv head %d key mass:", h);
        for (int j = 0; j < N_KV; j++) printf(" %.3f", m[h * N_KV + j]), sum += m[h * N_KV + j];
        printf("  (sum %.3f)\n", sum);
        if (sum < N_Q - 1e-3 || sum > N_Q + 1e-3) return 1; /* each query row's weights sum to 1 */
    }
    printf("out[0][0][0..3] = %.4f %.4f %.4f %.4f, most-attended key of row 0 head 0: %d\n", o[0], o[1], o[2],
           o[3], am[0]);

    kvs_tensor *all[] = {tq, tk, tv, out, mass, top};
    for (int i = 0; i < 6; i++) kvs_tensor_destroy(&all[i]);
    kvs_device_destroy(&dev);
    return 0;
}
