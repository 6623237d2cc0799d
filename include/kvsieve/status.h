/* kvsieve — status codes and error messages.
 *
 * Every fallible function returns a kvs_status. KVS_OK is 0; every other value is an error. The
 * details of the last error raised on the calling thread (file offset, tensor name, expected vs got)
 * are available from kvs_last_error() until the next error on that thread.
 * Thread-safety: the message buffer is thread-local; all functions here are thread-safe.
 */
#ifndef KVSIEVE_STATUS_H
#define KVSIEVE_STATUS_H

#include "kvsieve/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description) — one list generates the enum and kvs_status_str(). */
#define KVS_STATUS_LIST(X)                                                                          \
    X(KVS_OK, 0, "success")                                                                        \
    X(KVS_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                             \
    X(KVS_ERR_SHAPE, 2, "tensor shape mismatch")                                                   \
    X(KVS_ERR_DTYPE, 3, "unsupported or mismatched dtype")                                         \
    X(KVS_ERR_UNSUPPORTED, 4, "operation not supported on this device")                            \
    X(KVS_ERR_OUT_OF_MEMORY, 5, "out of memory")                                                   \
    X(KVS_ERR_OUT_OF_RANGE, 6, "value out of range")                                               \
    X(KVS_ERR_NOT_FOUND, 7, "not found")                                                           \
    X(KVS_ERR_IO, 8, "input/output error")                                                         \
    X(KVS_ERR_FORMAT, 9, "malformed file")                                                         \
    X(KVS_ERR_NO_DEVICE, 10, "no such device")                                                     \
    X(KVS_ERR_BACKEND_NOT_BUILT, 11, "backend not compiled into this build")                      \
    X(KVS_ERR_BACKEND, 12, "backend driver error")                                                 \
    X(KVS_ERR_COMPILE, 13, "kernel compilation failed")                                            \
    X(KVS_ERR_BUDGET, 14, "impossible budget")                                                     \
    X(KVS_ERR_STATE, 15, "object in the wrong state for this call")                                \
    X(KVS_ERR_INTERNAL, 16, "internal error")                                                      \
    X(KVS_ERR_NUMERIC, 17, "non-finite values (NaN or infinity)")

typedef enum kvs_status {
#define KVS_X_ENUM(name, value, desc) name = value,
    KVS_STATUS_LIST(KVS_X_ENUM)
#undef KVS_X_ENUM
} kvs_status;

/* Short description of a status code ("tensor shape mismatch"). Never NULL; unknown codes give
 * "unknown status". */
KVS_API const char *kvs_status_str(kvs_status s);

/* The symbolic name of a status code ("KVS_ERR_SHAPE"). Never NULL. */
KVS_API const char *kvs_status_name(kvs_status s);

/* The detailed message of the last error raised on this thread, e.g.
 * "kvs_attention: k ne[0]=64 but q head_dim=32". Empty string when none. Valid until the next
 * kvsieve call on this thread that fails. */
KVS_API const char *kvs_last_error(void);

/* Clears this thread's last error message. */
KVS_API void kvs_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
