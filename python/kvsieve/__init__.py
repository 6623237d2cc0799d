"""kvsieve for Python: ctypes over the kvsieve C library, numpy arrays in and out.

    import kvsieve
    with kvsieve.Device("cpu") as dev:
        r = kvsieve.ops.attention(dev, q, k, v, causal=True, key_mass=True, argmax=True)
        m = kvsieve.Model(dev, "stories260K-llada-f32.gguf")
        print(m.generate_dlm("Once upon a time", schedule="elastic", threshold=0.9)["text"])

Errors raise kvsieve.KvsError (.status, .name, .message from the C library's kvs_last_error()).
"""
from . import ops
from ._lib import LIBRARY_PATH
from .core import Device, KvsError, Tensor, backends, devices, version
from .model import Cache, Model, Policy, Schedule, locate

__version__ = version()
__all__ = ["Device", "Tensor", "KvsError", "Model", "Cache", "Policy", "Schedule", "ops", "devices", "backends",
           "locate", "version", "LIBRARY_PATH"]
