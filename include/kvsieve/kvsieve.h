/* kvsieve — one include for the whole public API. */
#ifndef KVSIEVE_KVSIEVE_H
#define KVSIEVE_KVSIEVE_H

#include "kvsieve/version.h"
#include "kvsieve/status.h"
#include "kvsieve/device.h"
#include "kvsieve/tensor.h"
#include "kvsieve/ops.h"
#include "kvsieve/gguf.h"
#include "kvsieve/model_file.h"
#include "kvsieve/tokenizer.h"
#include "kvsieve/cache.h"
#include "kvsieve/model.h"
#include "kvsieve/policy.h"
#include "kvsieve/latent.h"
#include "kvsieve/learned.h"
#include "kvsieve/generate.h"
#include "kvsieve/schedule.h"

#endif
