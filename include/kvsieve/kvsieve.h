/* kvsieve — one include for the whole public API. */
#ifndef KVSIEVE_KVSIEVE_H
#define KVSIEVE_KVSIEVE_H

#include "kvsieve/version.h"
#include "kvsieve/status.h"
#include "kvsieve/device.h"
#include "kvsieve/tensor.h"
#include "kvsieve/ops.h"

#endif
