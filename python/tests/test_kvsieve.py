"""Tests of the kvsieve Python binding (python/kvsieve) on the CPU device: struct layouts against the
compiler's, attention equal to the C example's printed numbers and to a float64 numpy reference,
the other ops against numpy, models (tokenize, forward, AR with eviction, diffusion with schedules,
eval) against the C library's own results, and bad arguments raising KvsError, never crashing."""
import ctypes
import os
import re
import subprocess
import sys
import unittest

import numpy as np

import kvsieve
from kvsieve import _lib as L

N_Q, N_KV, HEADS, KV_HEADS, D = 4, 6, 4, 2, 8


def example_inputs():
    """The inputs of tools/examples/attention.c, computed the same way."""
    i = np.arange(N_Q * HEADS * D)
    q = (((i * 7) % 11) / np.float32(11.0) - np.float32(0.5)).astype(np.float32).reshape(N_Q, HEADS, D)
    j = np.arange(KV_HEADS * N_KV * D)
    k = (((j * 5) % 13) / np.float32(13.0) - np.float32(0.5)).astype(np.float32).reshape(KV_HEADS, N_KV, D)
    v = ((j % D) + (j // D)).astype(np.float32).reshape(KV_HEADS, N_KV, D)
    return q, k, v


def reference_attention(q, k, v, causal, probs=False):
    """float64 GQA attention: out, key mass (group mean, summed over rows), argmax (and the
    attention weights (n_q, heads, n_kv) with probs=True)."""
    n_q, heads, d = q.shape
    kvh, n_kv, _ = k.shape
    g = heads // kvh
    out = np.zeros((n_q, heads, d))
    mass = np.zeros((kvh, n_kv))
    am = np.zeros((n_q, heads), dtype=np.int32)
    pp = np.zeros((n_q, heads, n_kv))
    for i in range(n_q):
        for h in range(heads):
            s = k[h // g].astype(np.float64) @ q[i, h].astype(np.float64) / np.sqrt(d)
            if causal:
                s[n_kv - n_q + i + 1:] = -np.inf
            p = np.exp(s - s.max())
            p /= p.sum()
            out[i, h] = p @ v[h // g]
            mass[h // g] += p / g
            am[i, h] = int(np.argmax(p))
            pp[i, h] = p
    return (out, mass, am, pp) if probs else (out, mass, am)


class Layout(unittest.TestCase):
    def test_struct_sizes_match_the_compiler(self):
        exe = os.environ.get("KVSIEVE_PYTHON_LAYOUT")
        if not exe:
            self.skipTest("KVSIEVE_PYTHON_LAYOUT not set (run through meson test)")
        rows = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split("\n")
        n = 0
        for line in filter(None, rows):
            name, size, last = line.split()
            cls = getattr(L, name)
            last_field = cls._fields_[-1][0]
            self.assertEqual(ctypes.sizeof(cls), int(size), name)
            self.assertEqual(getattr(cls, last_field).offset, int(last), name + "." + last_field)
            n += 1
        self.assertEqual(n, 22)


class Devices(unittest.TestCase):
    def test_version_backends_devices(self):
        self.assertRegex(kvsieve.version(), r"^\d+\.\d+\.\d+")
        self.assertTrue(kvsieve.backends()["cpu"])
        self.assertTrue(any(d["backend"] == "cpu" for d in kvsieve.devices()))
        with kvsieve.Device("cpu", threads=2) as dev:
            self.assertEqual(dev.backend, "cpu")
            self.assertEqual(dev.caps["n_threads"], 2)

    def test_module_level_objects_exit_cleanly(self):
        """A script that keeps a device, a tensor and a model at module level and defines a function
        (a reference cycle through the module's globals) must exit 0: at interpreter exit the garbage
        collector may finalize the device before its children, which then must not call the native
        destroy on memory the device already freed (it segfaulted: found by a fresh-clone tester)."""
        script = ("import numpy as np, kvsieve\n"
                  "dev = kvsieve.Device('cpu')\n"
                  "t = dev.tensor(np.zeros(4, 'float32'))\n"
                  "m = kvsieve.Model(dev, 'stories260K-f32.v3.gguf')\n"
                  "c = m.cache(8)\n"
                  "def f():\n    pass\n"
                  "print('done')\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(kvsieve.__file__)),
                                                                      os.environ.get("PYTHONPATH", "")) if p))
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "done")

    def test_bad_device_raises(self):
        with self.assertRaises(kvsieve.KvsError) as e:
            kvsieve.Device("nosuchbackend")
        self.assertEqual(e.exception.name, "KVS_ERR_INVALID_ARGUMENT")
        self.assertIn("nosuchbackend", e.exception.message)
        with self.assertRaises(kvsieve.KvsError) as e:
            kvsieve.Device("cpu:7")
        self.assertEqual(e.exception.name, "KVS_ERR_NO_DEVICE")
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.Device("cpu", threads=-1)


class Tensors(unittest.TestCase):
    def setUp(self):
        self.dev = kvsieve.Device("cpu")

    def tearDown(self):
        self.dev.close()

    def test_round_trip_and_checks(self):
        a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        t = self.dev.tensor(a)
        self.assertEqual(t.shape, (2, 3, 4))
        np.testing.assert_array_equal(t.numpy(), a)
        h = self.dev.tensor(a.astype(np.float16))
        self.assertEqual(h.dtype, "f16")
        np.testing.assert_array_equal(h.numpy(), a.astype(np.float16))
        with self.assertRaises(kvsieve.KvsError) as e:
            t.upload(np.zeros((2, 3, 5), np.float32))
        self.assertEqual(e.exception.status, 2)  # KVS_ERR_SHAPE
        with self.assertRaises(kvsieve.KvsError) as e:
            t.upload(np.zeros((2, 3, 4), np.int32))
        self.assertEqual(e.exception.name, "KVS_ERR_DTYPE")
        with self.assertRaises(kvsieve.KvsError) as e:
            self.dev.tensor(np.zeros(3, np.float64))
        self.assertEqual(e.exception.name, "KVS_ERR_DTYPE")
        with self.assertRaises(kvsieve.KvsError):
            self.dev.tensor(shape=(1, 2, 3, 4, 5))
        with self.assertRaises(kvsieve.KvsError) as e:
            self.dev.tensor(shape=(32, 3), dtype="q8_0")  # ne[0] = 3 is not a multiple of 32
        self.assertEqual(e.exception.name, "KVS_ERR_DTYPE")

    def test_tensors_free_themselves(self):
        import gc
        before = self.dev.bytes_allocated()
        t = self.dev.tensor(shape=(256, 64))
        self.assertEqual(self.dev.bytes_allocated(), before + 256 * 64 * 4)
        del t
        gc.collect()
        self.assertEqual(self.dev.bytes_allocated(), before)
        t = self.dev.tensor(shape=(8,))
        self.dev.close()  # closes what is still open on it first
        with self.assertRaises(kvsieve.KvsError) as e:
            t.numpy()
        self.assertEqual(e.exception.name, "KVS_ERR_STATE")
        self.dev = kvsieve.Device("cpu")

    def test_closed_objects_say_so(self):
        # a call on a closed device, or on what it closed, names the call and what is closed (it
        # was "device is closed", and a model's methods passed NULL to C: "bad argument", or -1)
        dev = kvsieve.Device("cpu")
        t = dev.tensor(shape=(4,))
        m = kvsieve.Model(dev, "stories260K-f32.v3.gguf")
        c = m.cache(16)
        dev.close()
        for call, want in ((dev.sync, "Device.sync: the Device 'cpu' is closed"),
                           (lambda: dev.tensor(shape=(2,)), "the Device 'cpu' is closed"),
                           (t.numpy, "Tensor.numpy: the Tensor f32 (4,) is closed"),
                           (lambda: m.tokenize("Once"), "Model.tokenize: the Model stories260K-f32.v3.gguf is closed"),
                           (lambda: m.forward(c, [1]), "Model.forward: the Model stories260K-f32.v3.gguf is closed"),
                           (c.length, "Cache.length: the Cache is closed")):
            with self.assertRaises(kvsieve.KvsError) as e:
                call()
            self.assertEqual(e.exception.name, "KVS_ERR_STATE")
            self.assertIn(want, e.exception.message)


class Ops(unittest.TestCase):
    def setUp(self):
        self.dev = kvsieve.Device("cpu")

    def tearDown(self):
        self.dev.close()

    def test_attention_equals_the_c_example(self):
        q, k, v = example_inputs()
        r = kvsieve.ops.attention(self.dev, q, k, v, causal=True, key_mass=True, argmax=True)
        exe = os.environ.get("KVSIEVE_EXAMPLE_ATTENTION")
        if exe:  # the numbers tools/examples/attention.c prints, to its printed precision
            text = subprocess.run([exe, "cpu"], check=True, capture_output=True, text=True).stdout
            masses = [[float(x) for x in m.split()] for m in re.findall(r"key mass:((?: [-\d.]+)+)  \(sum", text)]
            self.assertEqual(len(masses), KV_HEADS)
            np.testing.assert_allclose(r["key_mass"], np.array(masses), atol=5e-4)
            o = re.search(r"out\[0\]\[0\]\[0\.\.3\] = (\S+) (\S+) (\S+) (\S+), most-attended key of row 0 head 0: (-?\d+)",
                          text)
            np.testing.assert_allclose(r["out"][0, 0, :4], [float(x) for x in o.groups()[:4]], atol=5e-5)
            self.assertEqual(int(r["argmax"][0, 0]), int(o.group(5)))
        out, mass, am = reference_attention(q, k, v, causal=True)
        np.testing.assert_allclose(r["out"], out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(r["key_mass"], mass, atol=1e-5)
        # argmax: equal wherever the float64 reference's top two weights are not tied to float32
        # rounding (row 0 head 3 has two keys within 1e-7)
        _, _, _, p = reference_attention(q, k, v, causal=True, probs=True)
        top2 = np.sort(p, axis=2)[:, :, -2:]
        clear = (top2[:, :, 1] - top2[:, :, 0]) > 1e-5
        np.testing.assert_array_equal(r["argmax"][clear], am[clear])
        self.assertGreaterEqual(int(clear.sum()), N_Q * HEADS - 1)
        np.testing.assert_allclose(r["key_mass"].sum(axis=1), [N_Q, N_Q], atol=1e-4)

    def test_attention_probs_and_row_stats(self):
        q, k, v = example_inputs()
        r = kvsieve.ops.attention(self.dev, q, k, v, probe_rows=[1, 3], row_stats=True)
        self.assertEqual(r["probs"].shape, (2, HEADS, N_KV))
        np.testing.assert_allclose(r["probs"].sum(axis=2), np.ones((2, HEADS)), atol=1e-5)
        self.assertTrue(np.all(r["row_sum"] >= 1.0))

    def test_attention_bad_arguments_raise(self):
        q, k, v = example_inputs()
        kvsieve.ops.attention(self.dev, q, k, v)  # the device's scratch grows once
        before = self.dev.bytes_allocated()
        cases = [
            dict(q=q[:, :3], k=k, v=v),                        # 3 heads over 2 kv heads
            dict(q=q, k=k[:, :, :4], v=v[:, :, :4]),            # head_dim mismatch
            dict(q=q.astype(np.int32), k=k, v=v),               # dtype
            dict(q=q, k=k, v=v[:1]),                            # k/v differ
            dict(q=q, k=k, v=v, kv_len=[1, 2, 3]),              # kv_len shape
            dict(q=q, k=k, v=v, n_kv=N_KV + 1),                 # n_kv > capacity
            dict(q=q, k=k, v=v, mask=np.zeros((N_Q, 2), np.float32)),
            dict(q=None, k=k, v=v),
        ]
        for kw in cases:
            with self.assertRaises(kvsieve.KvsError, msg=str({a: getattr(b, "shape", b) for a, b in kw.items()})) as e:
                kvsieve.ops.attention(self.dev, **kw)
            self.assertTrue(e.exception.message)
        self.assertEqual(self.dev.bytes_allocated(), before)  # no tensor left behind on the error paths

    def test_dtypes_converted_or_refused(self):
        """float64 (numpy's default) becomes float32 wherever float32 is taken, k and v as q (k/v
        float64 was refused while q float64 was converted); every other dtype is refused naming the
        argument; integers never become floats."""
        q, k, v = example_inputs()
        ref = kvsieve.ops.attention(self.dev, q, k, v)["out"]
        got = kvsieve.ops.attention(self.dev, q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))["out"]
        np.testing.assert_array_equal(got, ref)  # the inputs are exact in float32: the same bits
        W = np.random.default_rng(9).standard_normal((5, 16))
        x = np.random.default_rng(10).standard_normal((2, 16))
        np.testing.assert_array_equal(kvsieve.ops.matmul(self.dev, W, x),
                                      kvsieve.ops.matmul(self.dev, W.astype(np.float32), x.astype(np.float32)))
        before = self.dev.bytes_allocated()
        refused = [
            ("q", lambda: kvsieve.ops.attention(self.dev, q.astype(np.int64), k, v)),
            ("q", lambda: kvsieve.ops.attention(self.dev, q.astype(np.float16), k, v)),
            ("k", lambda: kvsieve.ops.attention(self.dev, q, k.astype(np.int32), v)),
            ("x", lambda: kvsieve.ops.rope(self.dev, np.arange(16).reshape(1, 2, 8), [0])),  # was cast to float32
            ("x", lambda: kvsieve.ops.softmax(self.dev, np.ones((2, 3), np.int32))),
            ("src", lambda: kvsieve.ops.gather(self.dev, np.zeros((4, 2)), [0, 1])),
            ("ids", lambda: kvsieve.ops.embedding(self.dev, np.zeros((4, 2), np.float32), [0.5, 1.7])),  # was truncated
        ]
        for what, call in refused:
            with self.assertRaises(kvsieve.KvsError) as e:
                call()
            self.assertEqual(e.exception.name, "KVS_ERR_DTYPE", e.exception.message)
            self.assertTrue(e.exception.message.startswith(what + ":") or ("%s dtype" % what) in e.exception.message,
                            e.exception.message)
        with self.assertRaises(kvsieve.KvsError) as e:  # int64 positions that do not fit int32: not wrapped
            kvsieve.ops.attention(self.dev, q, k, v, causal=True, q_pos=np.full(N_Q, 2**40))
        self.assertEqual(e.exception.name, "KVS_ERR_OUT_OF_RANGE")
        self.assertEqual(self.dev.bytes_allocated(), before)

    def test_dwt_idwt(self):
        x = np.random.default_rng(3).standard_normal((3, 40)).astype(np.float32)
        y = kvsieve.ops.dwt(self.dev, x, "db2", 3)
        self.assertEqual(y.shape, (3, int(L.lib.kvs_dwt_length(40, 3))))
        np.testing.assert_allclose(np.sum(y ** 2, axis=1), np.sum(x ** 2, axis=1), rtol=1e-4)  # orthonormal
        h = kvsieve.ops.dwt(self.dev, np.array([[1, 3, 5, 7]], np.float32), "haar", 1)
        np.testing.assert_allclose(h, [[4 / np.sqrt(2), 12 / np.sqrt(2), -2 / np.sqrt(2), -2 / np.sqrt(2)]], rtol=1e-6)
        np.testing.assert_allclose(kvsieve.ops.idwt(self.dev, y, 40, "db2", 3), x, atol=1e-5)
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.ops.dwt(self.dev, x, "db3", 1)
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.ops.dwt(self.dev, x, "haar", 99)

    def test_topk(self):
        x = np.array([[0.5, 3.0, -1.0, 3.0, 2.0], [np.nan, 1.0, 0.0, -np.inf, 7.0]], np.float32)
        idx, val = kvsieve.ops.topk(self.dev, x, 3)
        np.testing.assert_array_equal(idx, [[1, 3, 4], [4, 1, 2]])
        np.testing.assert_array_equal(val[0], [3.0, 3.0, 2.0])
        idx, _ = kvsieve.ops.topk(self.dev, x, 2, order_by_index=True, row_len=[5, 3], values=False)
        np.testing.assert_array_equal(idx, [[1, 3], [1, 2]])
        gi, gv = kvsieve.ops.topk(self.dev, x, 2, global_=True)
        np.testing.assert_array_equal(gi, [9, 1])
        for bad in (0, 6):
            with self.assertRaises(kvsieve.KvsError) as e:
                kvsieve.ops.topk(self.dev, x, bad)
            self.assertEqual(e.exception.name, "KVS_ERR_OUT_OF_RANGE")

    def test_gather_scatter_compact(self):
        src = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
        idx = np.array([[4, 0], [1, 1]], np.int32)
        g = kvsieve.ops.gather(self.dev, src, idx)
        np.testing.assert_array_equal(g, np.stack([src[0, [4, 0]], src[1, [1, 1]]]))
        dst = np.zeros((2, 5, 3), np.float32)
        s = kvsieve.ops.scatter(self.dev, g, np.array([[0, 2], [3, 4]], np.int32), dst)
        np.testing.assert_array_equal(s[0, 2], src[0, 0])
        np.testing.assert_array_equal(s[1, 3], src[1, 1])
        c = kvsieve.ops.compact(self.dev, src, np.array([1, 3, 4], np.int32))
        np.testing.assert_array_equal(c[:, :3], src[:, [1, 3, 4]])
        with self.assertRaises(kvsieve.KvsError) as e:
            kvsieve.ops.gather(self.dev, src, np.array([[9, 0], [0, 0]], np.int32))  # index out of range (CPU)
        self.assertEqual(e.exception.name, "KVS_ERR_OUT_OF_RANGE")
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.ops.gather(self.dev, src, np.array([[0.5]], np.float32))

    def test_softmax_rmsnorm_matmul(self):
        x = np.random.default_rng(5).standard_normal((3, 16)).astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(kvsieve.ops.softmax(self.dev, x), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
        w = np.linspace(0.5, 1.5, 16).astype(np.float32)
        ref = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True) + 1e-5) * w
        np.testing.assert_allclose(kvsieve.ops.rmsnorm(self.dev, x, w), ref, rtol=1e-5, atol=1e-6)
        W = np.random.default_rng(6).standard_normal((5, 16)).astype(np.float32)
        np.testing.assert_allclose(kvsieve.ops.matmul(self.dev, W, x), x @ W.T, rtol=1e-4, atol=1e-5)

    def test_add_swiglu_copy_embedding(self):
        a = np.random.default_rng(7).standard_normal((4, 8)).astype(np.float32)
        b = np.random.default_rng(8).standard_normal((4, 8)).astype(np.float32)
        np.testing.assert_allclose(kvsieve.ops.add(self.dev, a, b), a + b, rtol=1e-6)
        np.testing.assert_allclose(kvsieve.ops.swiglu(self.dev, a, b), a / (1 + np.exp(-a)) * b, rtol=1e-5, atol=1e-6)
        l = np.abs(b) + 1.0
        l[0, :2] = 0.0  # no visible key: -inf
        want = np.where(l == 0, -np.inf, a.astype(np.float64) + np.log(l.astype(np.float64)))
        np.testing.assert_allclose(kvsieve.ops.log_mass(self.dev, a, l), want, rtol=1e-6, atol=1e-6)
        # kvs_device_bytes_peak: at least what is held; reset to what is held
        self.assertGreaterEqual(self.dev.bytes_peak(), self.dev.bytes_allocated())
        self.dev.reset_peak()
        self.assertEqual(self.dev.bytes_peak(), self.dev.bytes_allocated())
        np.testing.assert_array_equal(kvsieve.ops.copy(self.dev, a, "f16"), a.astype(np.float16))
        bf = kvsieve.ops.copy(self.dev, np.array([1.0, -2.5, 3.0e38], np.float32), "bf16")
        np.testing.assert_array_equal(bf, [0x3F80, 0xC020, 0x7F62])
        e = kvsieve.ops.embedding(self.dev, a, [3, 0, 3])
        np.testing.assert_array_equal(e, a[[3, 0, 3]])
        with self.assertRaises(kvsieve.KvsError) as err:
            kvsieve.ops.embedding(self.dev, a, [4])
        self.assertEqual(err.exception.name, "KVS_ERR_OUT_OF_RANGE")
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.ops.add(self.dev, a, b[:2])


class Models(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dev = kvsieve.Device("cpu", threads=1)
        cls.ar = kvsieve.Model(cls.dev, "stories260K-f32.v3.gguf")
        cls.dlm = kvsieve.Model(cls.dev, "stories260K-llada-f32.gguf")

    @classmethod
    def tearDownClass(cls):
        cls.dev.close()

    def test_hparams_and_tokenizer(self):
        hp = self.ar.hparams
        self.assertEqual((hp["arch"], hp["n_layers"], hp["dim"], hp["n_heads"], hp["n_kv_heads"], hp["vocab"]),
                         ("llama", 5, 64, 8, 4, 512))
        self.assertEqual(self.dlm.arch, "llada")
        ids = self.dlm.tokenize("Once upon a time")
        self.assertEqual(ids.tolist(), [1, 403, 407, 261, 378])  # stories260K-llada-ref.json's prompt tokens
        self.assertEqual(self.dlm.detokenize(ids), "Once upon a time")

    def test_qwen_and_dream(self):
        # the tiny random-weight fixtures of issue 15 (models/tiny-*.gguf, test qwen-arch): the
        # architecture and its hparams reach Python; dream decodes like llada (shifted logits inside)
        import json
        ref = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                                          "qwen", "ref.json")))
        q3 = kvsieve.Model(self.dev, "tiny-qwen3.gguf")
        self.assertEqual((q3.arch, q3.hparams["head_dim"], q3.hparams["qk_norm"], q3.hparams["tied_output"]),
                         ("qwen3", 32, 1, 0))
        r = q3.generate(ref["greedy_prompt"], max_new=8)
        self.assertEqual(r["tokens"].tolist(), ref["models"]["qwen3"]["greedy"][:8])
        dr = kvsieve.Model(self.dev, "tiny-dream.gguf")
        self.assertEqual((dr.arch, dr.hparams["logit_shift"], dr.hparams["qkv_bias"]), ("dream", 1, 1))
        c = ref["models"]["dream"]["cases"][0]
        r = dr.generate_dlm(c["prompt"], gen_len=c["gen"], block_len=c["block"], steps=c["steps"])
        self.assertEqual(r["tokens"].tolist(), c["tokens"])
        with self.assertRaises(kvsieve.KvsError):
            dr.generate_ar(c["prompt"], max_new=4)

    def test_generate_ar_reproduces_the_published_text(self):
        import json
        ref = json.load(open(kvsieve.locate("ref_greedy_256.json")))["generated_ids"]
        r = self.ar.generate_ar("", max_new=64)
        self.assertEqual(r["tokens"].tolist(), ref[:64])
        self.assertTrue(r["text"].startswith("Once upon a time, there was a little girl named Lily."))
        self.assertEqual(r["stats"]["steps"], 64)

    def test_generate_ar_with_eviction(self):
        r = self.ar.generate_ar("", max_new=128, policy="h2o", budget=0.25)
        self.assertGreater(r["stats"]["evictions"], 0)
        self.assertLess(r["stats"]["cache_bytes_peak"], 128 * 5 * 2 * 4 * 8 * 4)
        full = self.ar.generate_ar("", max_new=128)
        self.assertEqual(r["tokens"][:40].tolist(), full["tokens"][:40].tolist())  # the budget is not hit before

    def test_speculative_greedy_equals_plain(self):
        # QuantSpec: qh8 cache (head_dim 64 fixture), drafts from its 4-bit view, greedy == plain greedy
        m = kvsieve.Model(self.dev, "tiny-llama-mixed-q.gguf")
        plain = m.generate_ar([1, 17, 230], max_new=30, cache_dtype="qh8")
        spec = m.generate_ar([1, 17, 230], max_new=30, cache_dtype="qh8", draft=3)
        self.assertEqual(spec["tokens"].tolist(), plain["tokens"].tolist())
        self.assertGreater(spec["stats"]["spec_verify_steps"], 0)
        self.assertLessEqual(spec["stats"]["spec_accepted"], spec["stats"]["spec_drafted"])
        # the draft's q4_0 weight copy: the verify keeps the model's weights, so still plain greedy
        self.assertGreater(m.set_draft_weights("q4_0"), 0)
        spec4 = m.generate_ar([1, 17, 230], max_new=30, cache_dtype="qh8", draft=3)
        self.assertEqual(spec4["tokens"].tolist(), plain["tokens"].tolist())
        with self.assertRaises(kvsieve.KvsError):  # no row encoder for f16
            m.set_draft_weights("f16")
        self.assertEqual(m.set_draft_weights("f32"), 0)
        with self.assertRaises(kvsieve.KvsError):  # drafts need a qh8 cache
            m.generate_ar([1], max_new=4, draft=2)
        for bad in (2.5, "3", True, 2**40, -1):  # draft is a token count, not silently converted or wrapped
            with self.assertRaises(kvsieve.KvsError):
                m.generate_ar([1], max_new=4, cache_dtype="qh8", draft=bad)
        with self.assertRaises(kvsieve.KvsError):  # stories260K: head_dim 8
            self.ar.generate_ar("", max_new=4, cache_dtype="qh8", draft=2)

    def test_learned_policy(self):
        pol = kvsieve.Policy.learned(self.ar, kind="retention", seed=3)
        r = self.ar.generate_ar("", max_new=96, policy=pol, budget=0.25)
        self.assertGreater(r["stats"]["evictions"], 0)
        self.assertEqual(len(r["tokens"]), 96)
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.Policy.learned(self.ar, kind="no-such-kind")
        with self.assertRaises(kvsieve.KvsError) as e:
            kvsieve.Policy.learned(self.ar, "/nonexistent/policy.gguf")
        self.assertIn("/nonexistent/policy.gguf", e.exception.message)

    def test_forward_step_plan_with_statistics(self):
        c = self.ar.cache(16, "append")
        ids = self.ar.tokenize("Once upon a time")
        layers = [dict(stat_all_rows=1, want_argmax=1)] * 5
        r = self.ar.forward(c, ids, layers=layers, logit_rows=[len(ids) - 1])
        self.assertEqual(r["logits"].shape, (1, 512))
        self.assertEqual(r["rows_computed"], 5 * len(ids))
        self.assertEqual(r["layers"][0]["key_mass"].shape, (4, len(ids)))
        np.testing.assert_allclose(r["layers"][0]["key_mass"].sum(axis=1), [len(ids)] * 4, rtol=1e-4)
        self.assertEqual(r["layers"][2]["argmax"].shape, (len(ids), 8))
        # the next greedy token equals generate_ar's first token after the same prompt
        g = self.ar.generate_ar(ids, max_new=1)
        self.assertEqual(int(np.argmax(r["logits"][0])), int(g["tokens"][0]))
        with self.assertRaises(kvsieve.KvsError) as e:
            self.ar.forward(c, [600])  # outside the vocabulary
        self.assertEqual(e.exception.name, "KVS_ERR_INVALID_ARGUMENT")
        c.close()

    def test_generate_dlm_reference_and_schedules(self):
        base = self.dlm.generate_dlm("Once upon a time", gen_len=64, block_len=32, steps=64)
        self.assertEqual(base["tokens"][:8].tolist(), [432, 383, 286, 261, 376, 298, 315, 421])  # ref case 1
        self.assertEqual(base["stats"]["compute_fraction"], 1.0)
        for name in ("prefix", "dual", "delayed", "elastic"):
            r = self.dlm.generate_dlm("Once upon a time", gen_len=64, threshold=0.9, schedule=name)
            self.assertLess(r["stats"]["compute_fraction"], 1.0, name)
        s = kvsieve.Schedule("elastic", gamma=1.0)  # gamma 1: never reuses, equals no cache
        r = self.dlm.generate_dlm("Once upon a time", gen_len=64, block_len=32, steps=64, schedule=s)
        self.assertEqual(r["tokens"].tolist(), base["tokens"].tolist())
        wf = kvsieve.Schedule("prefix", wavefilter=dict(budget=1.0))
        r = self.dlm.generate_dlm("Once upon a time", gen_len=64, threshold=0.9, schedule=wf)
        self.assertEqual(len(r["tokens"]), 64)

    def test_generate_dlm_block_causal(self):
        # block diffusion: prefix is exact under block-causal attention (same tokens, fewer rows)
        a = self.dlm.generate_dlm("Once upon a time", gen_len=32, block_len=8, steps=32, block_causal=True)
        b = self.dlm.generate_dlm("Once upon a time", gen_len=32, block_len=8, steps=32, block_causal=True,
                                  schedule="prefix")
        self.assertEqual(a["tokens"].tolist(), b["tokens"].tolist())
        self.assertEqual(a["stats"]["compute_fraction"], 1.0)
        self.assertLess(b["stats"]["compute_fraction"], 0.6)
        with self.assertRaises(kvsieve.KvsError) as e:
            self.dlm.generate_dlm("Once upon a time", gen_len=32, block_len=8, block_causal=True, schedule="dual")
        self.assertIn("block-causal", str(e.exception))

    def test_eval_matches_the_cli_numbers(self):
        text = open(kvsieve.locate("ref_greedy_256.txt")).read()
        e = self.ar.eval_eviction(text, "h2o", budget=0.25, ctx=256)
        # `kvsieve eval --policies h2o --budgets 0.25 --windows 1` on the same text prints these
        self.assertAlmostEqual(e["kl"], 0.00771, places=5)
        self.assertAlmostEqual(e["top1_agreement"], 0.9294, places=4)
        full = self.ar.eval_eviction(text, "h2o", budget=1.0, ctx=64)
        self.assertEqual(full["kl"], 0.0)
        self.assertEqual(full["top1_agreement"], 1.0)
        # the weight-reading policies are bound to the model (they raised KVS_ERR_STATE before)
        for name in ("critical", "critical:h2o", "expected"):
            e = self.ar.eval_eviction(text, name, budget=0.5, ctx=64)
            self.assertGreater(e["top1_agreement"], 0.5, name)
        # a diffusion model has no next-token perplexity: refused, not garbage
        with self.assertRaises(kvsieve.KvsError) as e:
            self.dlm.eval_eviction(text, "h2o", budget=0.5, ctx=64)
        self.assertIn("autoregressive", str(e.exception))

    def test_model_errors_raise(self):
        with self.assertRaises(kvsieve.KvsError) as e:
            kvsieve.Model(self.dev, "no-such-model.gguf")
        self.assertEqual(e.exception.name, "KVS_ERR_NOT_FOUND")
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.Policy("no-such-policy")
        with self.assertRaises(kvsieve.KvsError):
            kvsieve.Schedule("no-such-schedule")
        with self.assertRaises(kvsieve.KvsError):
            self.ar.generate_dlm("x")  # not a diffusion model
        with self.assertRaises(kvsieve.KvsError):
            self.dlm.generate_dlm("x", gen_len=50, block_len=32)  # block does not divide gen_len
        with self.assertRaises(kvsieve.KvsError):
            self.ar.generate_ar("", max_new=8, policy="h2o", budget=-1)
        with self.assertRaises(kvsieve.KvsError):
            self.ar.tokenize(b"bytes")


if __name__ == "__main__":
    unittest.main()
