/*
 * accelerate-c: Hugging Face Accelerate for training programs written in C.
 *
 * One header for the whole public API. Conventions (docs/api.md):
 *  - every fallible call returns acc_result; acc_last_error() says what went wrong;
 *  - handles are opaque, created with acc_X_create(&out, ...) and freed with acc_X_destroy(NULL ok);
 *  - "Collective" functions must be called by every process of the group, in the same order;
 *  - threads: a handle is used from one thread at a time (each header says what more it allows);
 *    the last error is per thread.
 */
#ifndef ACCELERATE_H
#define ACCELERATE_H

#include "accelerate/version.h"
#include "accelerate/common.h"
#include "accelerate/state.h"
#include "accelerate/device.h"
#include "accelerate/control.h"
#include "accelerate/comm.h"
#include "accelerate/launch.h"
#include "accelerate/model.h"
#include "accelerate/precision.h"
#include "accelerate/optim.h"
#if defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#include "accelerate/tensor.h"
#endif
#endif
#include "accelerate/rng.h"
#include "accelerate/data.h"
#include "accelerate/accelerator.h"
#include "accelerate/fsdp.h"
#include "accelerate/checkpoint.h"
#include "accelerate/program_state.h"
#include "accelerate/obs.h"
#include "accelerate/call_site.h" /* last: its macros follow every declaration */

#endif
