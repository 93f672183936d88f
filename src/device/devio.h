/* Host staging of device buffers for the CPU collectives (comm.c, the accelerator's metrics
 * helpers). Not API.
 *
 * The rule: a buffer passed to a collective is staged when it is device memory of a device that
 * a live accelerator of this process trains on (the accelerators register their device when
 * they open it, accel_device.c). Such a buffer is copied to a host buffer on that accelerator's
 * compute stream (after the work the program queued there), the host waits for the copy, the
 * CPU backend runs the collective on host memory, and the result is copied back on the compute
 * stream, which the host waits for again (the call returns with the device buffer written, as a
 * host collective returns with its buffer written). Without such an accelerator (every CPU
 * program) nothing is looked up: one relaxed atomic load per call. */
#ifndef ACC_DEVICE_DEVIO_H
#define ACC_DEVICE_DEVIO_H

#include <stddef.h>

#include "comm/stage.h"
#include "device/devctx.h"

/* Accelerators that train off the host register their device (open) and drop it (close): the
 * one registry of live devices, used by the collectives and by acc_save_model /
 * acc_load_checkpoint_in_model (train_ckpt.c) to find the device of a buffer. */
acc_result acc__devio_register(acc__devctx *d);
void acc__devio_unregister(acc__devctx *d);
/* The registered device whose memory holds p (NULL: host memory, or no device registered). */
acc__devctx *acc__devio_find(const void *p);

/* The staging the collectives call through comm/stage.h (set once, at the first registration).
 * Stages: a (a_bytes, copied in when copy_a) and b (b_bytes, copied in when copy_b_in: its
 * current contents matter, e.g. a broadcast's root). NULL or 0-byte buffers are left alone. */
acc_result acc__devio_begin(acc__devio *io, const void *a, size_t a_bytes, int copy_a, void *b,
                            size_t b_bytes, int copy_b_in);
/* Ends the staging: when rc is ACC_OK and copy_b_out, b's host buffer is copied back to the
 * device; host buffers freed. Returns rc, or the copy's error. */
acc_result acc__devio_end(acc__devio *io, acc_result rc, int copy_b_out);

/* memcpy where src (dst) may be device memory of a registered device: a copy on its compute
 * stream, waited for. */
acc_result acc__devio_to_host(void *dst, const void *src, size_t bytes);
acc_result acc__devio_from_host(void *dst, const void *src, size_t bytes);

#endif
