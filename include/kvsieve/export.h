/* kvsieve — symbol export macro. The library is built with hidden visibility; KVS_API marks the ABI. */
#ifndef KVSIEVE_EXPORT_H
#define KVSIEVE_EXPORT_H

#if defined(_WIN32) && defined(KVS_BUILDING_DLL)
#define KVS_API __declspec(dllexport)
#elif defined(__GNUC__) && __GNUC__ >= 4
#define KVS_API __attribute__((visibility("default")))
#else
#define KVS_API
#endif

#endif
