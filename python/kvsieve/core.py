"""Errors, devices and tensors: the objects every op and model call takes.

KvsError carries the C library's status (its code and symbolic name) and kvs_last_error()'s message;
every failing C call raises it. Arguments the binding can check before the C call (dtype, shape,
contiguity of numpy arrays) raise KvsError(KVS_ERR_DTYPE / KVS_ERR_SHAPE / KVS_ERR_INVALID_ARGUMENT)
too, with a message of the same form, so a caller handles one exception type.
"""
import ctypes
import weakref

import numpy as np

from . import _lib as L

_DTYPES = {"f32": L.F32, "f16": L.F16, "bf16": L.BF16, "i32": L.I32, "q8_0": L.Q8_0,
           "q4_0": L.Q4_0, "q4_1": L.Q4_1, "q5_0": L.Q5_0, "q5_1": L.Q5_1, "iq4_nl": L.IQ4_NL,
           "q2_k": L.Q2_K, "q3_k": L.Q3_K, "q4_k": L.Q4_K, "q5_k": L.Q5_K, "q6_k": L.Q6_K, "iq4_xs": L.IQ4_XS}
# numpy dtype of each kvsieve dtype (bf16 travels as its raw uint16 bits; block types as raw bytes)
_NUMPY = {L.F32: np.float32, L.F16: np.float16, L.BF16: np.uint16, L.I32: np.int32}
_NUMPY.update({q: np.uint8 for q in L.QUANT_TYPES})

OK, INVALID_ARGUMENT, SHAPE, DTYPE, UNSUPPORTED = 0, 1, 2, 3, 4
OUT_OF_RANGE, NOT_FOUND, STATE = 6, 7, 15


class KvsError(Exception):
    """A kvsieve failure: .status (int kvs_status), .name ("KVS_ERR_SHAPE"), .message (the library's
    kvs_last_error() text, or the binding's own check)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.name = L.STATUS_NAMES.get(self.status, "KVS_ERR_UNKNOWN")
        self.message = message
        super().__init__("%s: %s" % (self.name, message))


def check(status, what=""):
    """Raises KvsError for a non-zero kvs_status (message: kvs_last_error())."""
    if status != 0:
        msg = L.lib.kvs_last_error().decode(errors="replace") or L.lib.kvs_status_str(status).decode()
        raise KvsError(status, msg if not what or what in msg else "%s: %s" % (what, msg))


def fail(status, message):
    raise KvsError(status, message)


def _closed(what, how):
    """Raises KvsError(KVS_ERR_STATE) for a call on a closed object: "Class.method: WHAT is closed
    HOW", the method being the caller of the .handle property that found no handle."""
    import sys
    f = sys._getframe(2)
    owner = f.f_locals.get("self")
    method = f.f_code.co_name
    call = "%s.%s: " % (type(owner).__name__, method) if owner is not None else ""
    fail(STATE, "%s%s is closed %s" % (call, what, how))


def version():
    """The C library's version string ("0.1.0")."""
    return L.lib.kvs_version().decode()


def backends():
    """{name: built (bool)} for cpu, opencl, vulkan."""
    return {L.lib.kvs_backend_name(b).decode(): bool(L.lib.kvs_backend_built(b)) for b in range(L.BACKEND_COUNT)}


def devices():
    """Every device of every built backend: a list of dicts (backend, index, name, vendor, driver)."""
    out = []
    for b in range(L.BACKEND_COUNT):
        if not L.lib.kvs_backend_built(b):
            continue
        n = ctypes.c_int(0)
        if L.lib.kvs_device_count(b, ctypes.byref(n)) != 0:
            continue
        for i in range(n.value):
            info = L.DeviceInfo()
            if L.lib.kvs_device_describe(b, i, ctypes.byref(info)) == 0:
                out.append({"backend": L.lib.kvs_backend_name(b).decode(), "index": i,
                            "name": info.name.decode(errors="replace"), "vendor": info.vendor.decode(errors="replace"),
                            "driver": info.driver.decode(errors="replace")})
    return out


class Device:
    """An open kvsieve device: Device("cpu"), Device("opencl:1"), Device("vulkan", threads=...).
    threads: CPU worker threads (0 = all cores). Close with .close() or a with-block: that first
    closes the tensors, caches and models still open on it. Each of those also frees itself when
    garbage-collected (it keeps its device alive until then)."""

    def __init__(self, spec="cpu", threads=0):
        p = L.lib.kvs_device_params_default()
        if not isinstance(spec, str):
            fail(INVALID_ARGUMENT, "Device: spec must be a string such as 'cpu' or 'vulkan:0', got %r" % (spec,))
        check(L.lib.kvs_device_params_parse(spec.encode(), ctypes.byref(p)), "device '%s'" % spec)
        if not isinstance(threads, int) or threads < 0:
            fail(INVALID_ARGUMENT, "Device: threads must be an int >= 0, got %r" % (threads,))
        p.n_threads = threads
        h = ctypes.c_void_p()
        check(L.lib.kvs_device_open(ctypes.byref(h), ctypes.byref(p)), "device '%s'" % spec)
        self._h, self._spec = h, spec
        self._children = weakref.WeakSet()  # live tensors, caches, models: closed before the device

    @property
    def handle(self):
        if not self._h:
            _closed("the Device '%s'" % self._spec, "(by .close() or the end of its with-block, which also "
                    "closes its tensors, caches and models): open a new kvsieve.Device")
        return self._h

    @property
    def name(self):
        return L.lib.kvs_device_get_info(self.handle).contents.name.decode(errors="replace")

    @property
    def backend(self):
        return L.lib.kvs_backend_name(L.lib.kvs_device_get_info(self.handle).contents.backend).decode()

    @property
    def caps(self):
        c = L.lib.kvs_device_caps(self.handle).contents
        return {f: getattr(c, f) for f, _ in L.Caps._fields_}

    def set_threads(self, n):
        check(L.lib.kvs_device_set_threads(self.handle, int(n)))

    def sync(self):
        check(L.lib.kvs_device_sync(self.handle))

    def bytes_allocated(self):
        return int(L.lib.kvs_device_bytes_allocated(self.handle))

    def bytes_peak(self):
        """The most device bytes held at once since open or reset_peak() (kvs_device_bytes_peak)."""
        return int(L.lib.kvs_device_bytes_peak(self.handle))

    def reset_peak(self):
        L.lib.kvs_device_reset_peak(self.handle)

    def tensor(self, array=None, *, shape=None, dtype="f32"):
        """A tensor on this device: from a numpy array (uploaded; dtype from the array: float32,
        float16, int32) or empty with shape (slowest-first, numpy order) and dtype."""
        return Tensor(self, array, shape=shape, dtype=dtype)

    def close(self):
        for c in list(self._children):
            c.close()
        self._children = weakref.WeakSet()
        if self._h:
            L.lib.kvs_device_destroy(ctypes.byref(self._h))
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _numpy_kind(arr):
    if arr.dtype == np.float32:
        return L.F32
    if arr.dtype == np.float16:
        return L.F16
    if arr.dtype == np.int32:
        return L.I32
    fail(DTYPE, "numpy dtype %s has no kvsieve tensor type (float32, float16, int32)" % arr.dtype)


class Tensor:
    """A dense kvsieve tensor. Shapes are numpy order (slowest first): a numpy array of shape
    (n_q, n_heads, head_dim) is the C tensor [n_q][n_heads][head_dim] (ne = {head_dim, n_heads, n_q}).
    .numpy() downloads a copy; .upload(array) writes one of the same shape and dtype."""

    def __init__(self, device, array=None, *, shape=None, dtype="f32"):
        if not isinstance(device, Device):
            fail(INVALID_ARGUMENT, "Tensor: device must be a kvsieve.Device")
        if array is not None:
            array = np.asarray(array)
            kind = _numpy_kind(array)
            shape = array.shape
        else:
            if dtype not in _DTYPES:
                fail(DTYPE, "unknown dtype %r (want one of %s)" % (dtype, ", ".join(_DTYPES)))
            kind = _DTYPES[dtype]
            if shape is None:
                fail(INVALID_ARGUMENT, "Tensor: give an array or a shape")
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if not 1 <= len(shape) <= 4 or any(s < 1 for s in shape):
            fail(INVALID_ARGUMENT, "Tensor: shape %r must have 1..4 dimensions, each >= 1" % (shape,))
        ne = (ctypes.c_int64 * len(shape))(*reversed(shape))
        h = ctypes.c_void_p()
        check(L.lib.kvs_tensor_create(ctypes.byref(h), device.handle, kind, len(shape), ne))
        self._h, self.device, self.shape, self.kind = h, device, shape, kind
        device._children.add(self)
        if array is not None:
            self.upload(array)

    @property
    def handle(self):
        if not self._h:
            _closed("the Tensor %s %s" % (self.dtype, self.shape), "(by .close() or by closing its Device)")
        return self._h

    @property
    def dtype(self):
        return {v: k for k, v in _DTYPES.items()}[self.kind]

    @property
    def numpy_dtype(self):
        return np.dtype(_NUMPY[self.kind])

    def _host_shape(self):
        if self.kind in L.QUANT_TYPES:
            return (int(L.lib.kvs_tensor_nbytes(self.handle)),)
        return self.shape

    def upload(self, array):
        a = np.ascontiguousarray(array)
        if a.dtype != self.numpy_dtype:
            fail(DTYPE, "upload: array dtype %s, tensor dtype %s (%s)" % (a.dtype, self.dtype, self.numpy_dtype))
        if a.shape != self._host_shape():
            fail(SHAPE, "upload: array shape %s, tensor shape %s" % (a.shape, self.shape))
        check(L.lib.kvs_tensor_upload(self.handle, a.ctypes.data, 0, a.nbytes))

    def numpy(self):
        out = np.empty(self._host_shape(), dtype=self.numpy_dtype)
        check(L.lib.kvs_tensor_download(self.handle, out.ctypes.data, 0, out.nbytes))
        return out

    def fill(self, value):
        check(L.lib.kvs_tensor_fill(self.handle, float(value)))

    def close(self):
        if self._h:
            # a device already destroyed took this tensor's memory with it (at interpreter exit the
            # garbage collector may finalize the device before its children): drop the handle only
            if getattr(self.device, "_h", None):
                L.lib.kvs_tensor_destroy(ctypes.byref(self._h))
            self._h = None
            self.device._children.discard(self)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "Tensor(%s, shape=%s, device=%s)" % (self.dtype, self.shape, self.device.backend)


_NUMPY_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bf16 (uint16 bits)", "i32": "int32"}


def as_tensor(device, x, what, dtype=None, shape=None):
    """A Tensor for op argument `what`: a Tensor on `device` is used as is, a numpy array (or a
    list) is uploaded. dtype ('f32'/'i32'/... or a tuple of them; None = float32, float16 or int32)
    and shape (tuple, None entries = any) are checked.

    The conversions, the only ones: a float64 array (numpy's default, a list of floats) becomes
    float32 (a rounded copy) where the argument takes float32; an integer array becomes int32 where
    the argument takes int32, its values checked to fit (KVS_ERR_OUT_OF_RANGE). Any other dtype
    raises KvsError(KVS_ERR_DTYPE) naming the argument; a Tensor is never converted."""
    want = () if dtype is None else dtype if isinstance(dtype, tuple) else (dtype,)
    if isinstance(x, Tensor):
        if x.device is not device:
            fail(INVALID_ARGUMENT, "%s lives on another device" % what)
        t = x
    elif x is None:
        fail(INVALID_ARGUMENT, "%s is required" % what)
    else:
        a = np.asarray(x)
        if "i32" in want and a.dtype.kind in "iu" and a.dtype != np.int32:
            if a.size and (int(a.min()) < -2**31 or int(a.max()) >= 2**31):
                fail(OUT_OF_RANGE, "%s: a value does not fit int32 (range %d..%d)" % (what, a.min(), a.max()))
            a = a.astype(np.int32)
        elif "f32" in want and a.dtype == np.float64:
            a = a.astype(np.float32)
        ok = want or ("f32", "f16", "i32")
        if a.dtype not in [np.dtype(_NUMPY[_DTYPES[d]]) for d in ok if d in ("f32", "f16", "i32", "bf16")]:
            fail(DTYPE, "%s: numpy dtype %s, want %s%s" % (
                what, a.dtype, " or ".join(_NUMPY_NAMES.get(d, d) for d in ok),
                " (float64 is converted to float32)" if "f32" in ok else ""))
        t = Tensor(device, a)
    try:
        if dtype is not None and t.dtype not in (dtype if isinstance(dtype, tuple) else (dtype,)):
            fail(DTYPE, "%s: dtype %s, want %s" % (what, t.dtype, dtype))
        if shape is not None:
            if len(shape) != len(t.shape) or any(w is not None and w != g for w, g in zip(shape, t.shape)):
                want = tuple("*" if w is None else w for w in shape)
                fail(SHAPE, "%s: shape %s, want %s" % (what, t.shape, want))
    except KvsError:
        if t is not x:  # made here: not left behind
            t.close()
        raise
    return t
