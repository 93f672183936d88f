/* load_snapshot.c: what load_state may change, taken before it reads anything and put back when
 * it fails (on any process), so a failed load_state leaves the prepared objects as they were.
 * Not API. */
#ifndef ACC_LOAD_SNAPSHOT_H
#define ACC_LOAD_SNAPSHOT_H

#include "ckpt/accel_state.h"

typedef struct acc__load_snapshot acc__load_snapshot;

acc_result acc__load_snapshot_take(const acc__accel_parts *p, acc__load_snapshot **out);
/* Puts everything back; keeps acc_last_error() (the failure being reported). */
void acc__load_snapshot_restore(const acc__load_snapshot *s, const acc__accel_parts *p);
void acc__load_snapshot_free(acc__load_snapshot *s, const acc__accel_parts *p);

#endif
