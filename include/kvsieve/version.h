/* kvsieve — version macros (read by meson for the project version) and the runtime version. */
#ifndef KVSIEVE_VERSION_H
#define KVSIEVE_VERSION_H

#include "kvsieve/export.h"

#define KVS_VERSION_MAJOR 0
#define KVS_VERSION_MINOR 1
#define KVS_VERSION_PATCH 0

/* Packed version: (major << 16) | (minor << 8) | patch. */
#define KVS_VERSION_NUMBER ((KVS_VERSION_MAJOR << 16) | (KVS_VERSION_MINOR << 8) | KVS_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library actually linked, as "MAJOR.MINOR.PATCH". Never NULL, static storage. */
KVS_API const char *kvs_version(void);
/* The same as KVS_VERSION_NUMBER of the linked library. */
KVS_API unsigned kvs_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
