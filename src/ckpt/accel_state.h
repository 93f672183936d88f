/* save_state / load_state's state inside an accelerator (src/ckpt/accel_state.c). The accelerator
 * hands its prepared objects over as acc__accel_parts (train/accel.h). Not API. */
#ifndef ACC_ACCEL_STATE_H
#define ACC_ACCEL_STATE_H

#include "train/accel.h"


void acc__accel_ckpt_free(acc__accel_ckpt *c);

#endif
