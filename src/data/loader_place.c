/* The prepared data loader, device placement (a loader prepared by an accelerator that trains on
 * a device): the slots' host buffers are the staging buffers (page-locked on CUDA), every slot
 * also owns device buffers. When a batch is taken from the ring it is copied host to device on
 * the loader's copy stream (so batch k+1 is copied while the program works on batch k) and an
 * event recorded after the copy makes the compute stream wait for it. A slot goes back to the
 * producer only after its copy has run (the host buffer is the copy's source), and its device
 * buffers are written again only after the compute stream has passed the point where the program
 * released the batch (an event recorded on the compute stream at release, waited for by the copy
 * stream). */
#include "data/loader_impl.h"
#include "device/devctx.h"

/* Device placement: queues slot si's host-to-device copy on the copy stream, after the compute
 * stream has finished with the slot's previous batch. */
acc_result acc__loader_place_slot(acc_dataloader *dl, int si) {
  dl_slot *s = &dl->slots[si];
  acc__device *d = dl->dev->dev;
  if (s->used_pending) {
    ACC_CHECK(acc__dstream_wait(d, dl->cstream, s->used));
    s->used_pending = 0;
  }
  for (int f = 0; f < dl->ds->num_fields; f++)
    if (s->bytes[f])
      ACC_CHECK(acc__device_copy(d, s->dfields[f], s->fields[f], s->bytes[f], ACC__COPY_H2D,
                                 dl->cstream));
  ACC_CHECK(acc__devent_record(d, s->copied, dl->cstream));
  s->copy_pending = 1;
  return ACC_OK;
}

/* Device placement: the program is done with slot si (it called next again or the epoch
 * stopped): mark the point on the compute stream after its work, and wait (host) until the
 * slot's copy has read the host buffers, which the producer may now overwrite. */
acc_result acc__loader_unplace_slot(acc_dataloader *dl, int si) {
  dl_slot *s = &dl->slots[si];
  acc__device *d = dl->dev->dev;
  acc_result rc = acc__devent_record(d, s->used, dl->dev->stream);
  if (rc == ACC_OK) s->used_pending = 1;
  if (s->copy_pending) {
    acc_result r2 = acc__devent_sync(d, s->copied);
    if (r2 != ACC_OK) { /* the copy may still read the buffer: wait for the whole stream */
      (void)acc__dstream_sync(d, dl->cstream);
      if (rc == ACC_OK) rc = r2;
    }
    s->copy_pending = 0;
  }
  return rc;
}

/* Device placement: the copy stream, and per slot two events and device buffers. */
acc_result acc__loader_place_create(acc_dataloader *dl) {
  acc__device *d = dl->dev->dev;
  ACC_CHECK(acc__dstream_create(d, &dl->cstream));
  for (int i = 0; i < dl->nslots; i++) {
    dl_slot *s = &dl->slots[i];
    ACC_CHECK(acc__devent_create(d, &s->copied));
    ACC_CHECK(acc__devent_create(d, &s->used));
    for (int f = 0; f < dl->ds->num_fields; f++)
      ACC_CHECK(acc__device_alloc(d, dl->capacity[f] ? dl->capacity[f] : 1, &s->dfields[f]));
  }
  return ACC_OK;
}

/* Frees the device side (after both streams are done with it). */
void acc__loader_place_destroy(acc_dataloader *dl) {
  acc__device *d = dl->dev->dev;
  if (dl->cstream) (void)acc__dstream_sync(d, dl->cstream);
  (void)acc__dstream_sync(d, dl->dev->stream);
  for (int i = 0; dl->slots && i < dl->nslots; i++) {
    dl_slot *s = &dl->slots[i];
    for (int f = 0; f < ACC_DATA_MAX_FIELDS; f++) {
      (void)acc__device_free(d, s->dfields[f]);
      s->dfields[f] = NULL;
    }
    (void)acc__devent_destroy(d, s->copied);
    (void)acc__devent_destroy(d, s->used);
    s->copied = s->used = NULL;
    s->copy_pending = s->used_pending = 0;
  }
  if (dl->cstream) (void)acc__dstream_destroy(d, dl->cstream);
  dl->cstream = NULL;
}
