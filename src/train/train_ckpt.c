/* Training on a device (train.h): checkpoints. Parameters and optimizer state in device memory
 * go through host staging buffers, so the files are the same as a CPU run's (a checkpoint saved
 * on a device loads on the CPU and the reverse, bit for bit).
 *
 * acc_save_model / acc_load_checkpoint_in_model take a model, not an accelerator: the
 * accelerators training off the host are registered (devio.h, the registry the collectives use
 * too), and a model whose memory belongs to one of their devices is saved from (loaded into) a
 * host copy with the same names and shapes. */
#include <string.h>

#include "device/devio.h"
#include "train/train.h"

void acc__dev_host_model_free(acc_model *h) {
  if (!h) return;
  for (size_t i = 0; i < acc_model_num_parameters(h); i++) {
    const acc_param *p = acc_model_parameter(h, i);
    acc__free(p->data);
    acc__free(p->grad);
  }
  acc_model_destroy(h);
}

acc_result acc__dev_host_model_of(acc__devctx *d, const acc_model *m, int grads,
                                  acc_model **out) {
  *out = NULL;
  acc_model *h = NULL;
  ACC_CHECK(acc_model_create(&h));
  acc_result rc = ACC_OK;
  for (size_t i = 0; i < acc_model_num_parameters(m) && rc == ACC_OK; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    size_t bytes = (p->numel ? p->numel : 1) * sizeof(float);
    float *data = acc__malloc(bytes);
    float *grad = grads && p->grad ? acc__malloc(bytes) : NULL;
    if (!data || (grads && p->grad && !grad)) rc = ACC_ERR_NOMEM;
    if (rc == ACC_OK) rc = acc_model_add_parameter(h, p->name, data, grad, p->ndim, p->shape);
    if (rc != ACC_OK) {
      acc__free(data);
      acc__free(grad);
      break;
    }
    size_t n = p->numel * sizeof(float);
    rc = acc__device_copy(d->dev, data, p->data, n, ACC__COPY_D2H, d->stream);
    if (rc == ACC_OK && grad)
      rc = acc__device_copy(d->dev, grad, p->grad, n, ACC__COPY_D2H, d->stream);
  }
  if (rc == ACC_OK) rc = acc__dstream_sync(d->dev, d->stream);
  if (rc != ACC_OK) {
    acc__dstream_sync(d->dev, d->stream); /* no queued copy may still write the buffers */
    acc__dev_host_model_free(h);
    return rc;
  }
  *out = h;
  return ACC_OK;
}

acc_result acc__dev_host_model_push(acc__devctx *d, const acc_model *h, acc_model *m,
                                    int grads) {
  acc_result rc = ACC_OK;
  for (size_t i = 0; i < acc_model_num_parameters(m) && rc == ACC_OK; i++) {
    const acc_param *p = acc_model_parameter(m, i), *q = acc_model_parameter(h, i);
    size_t n = p->numel * sizeof(float);
    rc = acc__device_copy(d->dev, p->data, q->data, n, ACC__COPY_H2D, d->stream);
    if (rc == ACC_OK && grads && p->grad && q->grad)
      rc = acc__device_copy(d->dev, p->grad, q->grad, n, ACC__COPY_H2D, d->stream);
  }
  acc_result sr = acc__dstream_sync(d->dev, d->stream); /* the host copy is freed next */
  return rc != ACC_OK ? rc : sr;
}

acc_result acc__dev_host_model(const acc_model *m, int grads, acc_model **out,
                               acc__devctx **dev) {
  *out = NULL;
  if (dev) *dev = NULL;
  const acc_param *first = NULL;
  size_t np = acc_model_num_parameters(m);
  for (size_t i = 0; i < np && !first; i++)
    if (acc_model_parameter(m, i)->numel) first = acc_model_parameter(m, i);
  if (!first) return ACC_OK;
  acc__devctx *d = acc__devio_find(first->data);
  if (!d) return ACC_OK; /* host memory */
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    int yes = 0;
    if (!p->numel) continue;
    ACC_CHECK(acc__device_is_device_ptr(d->dev, p->data, &yes));
    if (!yes)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "parameter '%s' is host memory but parameter '%s' is memory of the device "
                        "%s: a model's parameters must all be on one device",
                        p->name, first->name, acc__device_name(d->dev));
  }
  if (dev) *dev = d;
  return acc__dev_host_model_of(d, m, grads, out);
}
