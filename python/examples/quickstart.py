# kvsieve from Python: attention with statistics, then a diffusion decode with the elastic cache.
import numpy as np
import kvsieve

with kvsieve.Device("cpu") as dev:  # or "opencl", "vulkan:0"
    q = np.random.default_rng(0).standard_normal((4, 4, 8), dtype=np.float32)  # [n_q][heads][dim]
    k = v = np.random.default_rng(1).standard_normal((2, 6, 8), dtype=np.float32)  # [kv_heads][keys][dim]
    r = kvsieve.ops.attention(dev, q, k, v, causal=True, key_mass=True, argmax=True)
    print("key mass per kv head:", r["key_mass"].round(3), "argmax:", r["argmax"][0])

    model = kvsieve.Model(dev, "stories260K-llada-f32.gguf")  # found in models/ or $KVSIEVE_MODELS
    base = model.generate_dlm("Once upon a time", gen_len=64, threshold=0.9)
    fast = model.generate_dlm("Once upon a time", gen_len=64, threshold=0.9, schedule="elastic")
    print(fast["text"])
    print("compute fraction %.3f, speedup %.2fx" % (fast["stats"]["compute_fraction"],
                                                    base["stats"]["seconds"] / fast["stats"]["seconds"]))
