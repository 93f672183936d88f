/* A process's compute device (devctx.h): placement, device, compute stream, devio registration. */
#include "core/log.h"
#include "device/devctx.h"
#include "device/devio.h"
#include "state/state.h"

acc_result acc__devctx_open(acc_state *st, int want, acc__devctx **out) {
  *out = NULL;
  acc__placement where;
  ACC_CHECK(acc__placement_resolve(st, want, &where));
  acc__devctx *d = acc__calloc(1, sizeof *d);
  if (!d) return ACC_ERR_NOMEM;
  d->where = where;
  if (want == ACC_DEVICE_AUTO && where.why[0] && acc_state_is_main_process(st))
    acc__log(ACC_LOG_INFO, "training on the CPU: %s", where.why);
  d->type = where.kind == ACC__DEVICE_CUDA   ? ACC_DEVICE_CUDA
            : where.kind == ACC__DEVICE_FAKE ? ACC_DEVICE_FAKE
                                             : ACC_DEVICE_CPU;
  acc_result rc = acc__device_open(&d->dev, where.kind, where.ordinal < 0 ? 0 : where.ordinal);
  if (rc == ACC_OK && d->type != ACC_DEVICE_CPU) rc = acc__dstream_create(d->dev, &d->stream);
  if (rc == ACC_OK) rc = acc__devio_register(d); /* collectives and save_model find it (devio.h) */
  if (rc != ACC_OK) {
    acc__devctx_close(d);
    return rc;
  }
  *out = d;
  return ACC_OK;
}

void acc__devctx_close(acc__devctx *d) {
  if (!d) return;
  acc__devio_unregister(d);
  if (d->dev) {
    if (d->stream) acc__dstream_destroy(d->dev, d->stream);
    acc__device_close(d->dev);
  }
  acc__free(d);
}
