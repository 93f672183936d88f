/* The program's own stream (issue 33 item 4): streams of the accelerator's device for the
 * program's kernels and copies, and the rule of torch's "current stream": once the program names
 * its stream (acc_accelerator_set_program_stream), every library call that touches the program's
 * buffers (backward, unscale, clipping, optimizer step, zero_grad, refresh) queues its device work
 * after the work the program has queued on that stream so far, and the program's stream waits for
 * the library's work before running what the program queues next; events, no host
 * synchronization (train_device.c, train_optim.c). */
#include "accelerate.h"
#include "train/accel.h"
#include "train/train.h"

static acc_result on_device(acc_accelerator *acc, const char *fn, acc__devctx **d) {
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  *d = acc->dev;
  return ACC_OK;
}

acc_result acc_accelerator_stream_create(acc_accelerator *acc, void **out) {
  static const char fn[] = "acc_accelerator_stream_create";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  acc__devctx *d;
  ACC_CHECK(on_device(acc, fn, &d));
  if (!acc__devctx_offhost(d)) return ACC_OK; /* the CPU: operations run at once, no stream */
  acc__dstream *s = NULL;
  ACC_CHECK(acc__dstream_create(d->dev, &s));
  *out = s;
  return ACC_OK;
}

acc_result acc_accelerator_stream_destroy(acc_accelerator *acc, void *stream) {
  static const char fn[] = "acc_accelerator_stream_destroy";
  acc__devctx *d;
  ACC_CHECK(on_device(acc, fn, &d));
  if (!stream || !acc__devctx_offhost(d)) return ACC_OK;
  if (acc__dev_prog_stream(d) == stream) ACC_CHECK(acc__dev_prog_stream_set(d, NULL));
  return acc__dstream_destroy(d->dev, stream);
}

acc_result acc_accelerator_stream_synchronize(acc_accelerator *acc, void *stream) {
  acc__devctx *d;
  ACC_CHECK(on_device(acc, "acc_accelerator_stream_synchronize", &d));
  if (!acc__devctx_offhost(d)) return ACC_OK;
  return acc__dstream_sync(d->dev, stream);
}

acc_result acc_accelerator_set_program_stream(acc_accelerator *acc, void *stream) {
  static const char fn[] = "acc_accelerator_set_program_stream";
  acc__devctx *d;
  ACC_CHECK(on_device(acc, fn, &d));
  if (!acc__devctx_offhost(d)) {
    if (stream)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: this accelerator trains on the CPU, which has no streams; pass NULL (or train on a "
                        "device)", fn);
    return ACC_OK;
  }
  if (stream && stream == (void *)d->stream)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: the stream is the library's own (acc_accelerator_stream): work queued there is "
                      "ordered already; pass the program's stream, or NULL", fn);
  return acc__dev_prog_stream_set(d, stream);
}

void *acc_accelerator_program_stream(const acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR)) return NULL;
  return acc__dev_prog_stream(acc->dev);
}

acc_result acc_accelerator_memcpy_async(acc_accelerator *acc, void *dst, const void *src, size_t bytes,
                                        acc_copy_kind kind, void *stream) {
  static const char fn[] = "acc_accelerator_memcpy_async";
  acc__devctx *d;
  ACC_CHECK(on_device(acc, fn, &d));
  if (kind < ACC_COPY_HOST_TO_DEVICE || kind > ACC_COPY_DEVICE_TO_DEVICE)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: unknown copy kind %d", fn, (int)kind);
  if (bytes == 0) return ACC_OK;
  if (!dst || !src) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, dst ? "src" : "dst");
  return acc__device_copy(d->dev, dst, src, bytes, (acc__copy_kind)kind, acc__devctx_offhost(d) ? stream : NULL);
}
