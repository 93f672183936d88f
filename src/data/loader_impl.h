/* Between the files of the prepared data loader (loader*.c): the loader and its slots, and what
 * each file offers the others. Not API.
 *   loader.c           create, destroy, next, length; the epoch plans
 *   loader_join.c      join_uneven_inputs' even_batches override (begin/end)
 *   loader_state.c     the position: epoch, skipping, state get/set (checkpoints)
 *   loader_prefetch.c  the ring of slots and the loader thread that fills it
 *   loader_dispatch.c  the dispatching mode: process 0 reads, every process gets a slice
 *   loader_batch.c     one batch of this process: map-style plan, iterable shard, collate
 *   loader_place.c     device placement: the slots' device buffers and their copies
 * A file calls only files below it in this list, never one above it. */
#ifndef ACC_DATA_LOADER_IMPL_H
#define ACC_DATA_LOADER_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data_internal.h"
#include "device/device.h"

typedef struct dl_slot {
  void *fields[ACC_DATA_MAX_FIELDS];
  size_t bytes[ACC_DATA_MAX_FIELDS];
  int64_t *indices;
  int64_t size;
  int64_t index;
  int64_t observed; /* dispatching: samples in the global batch this slice came from */
  /* device placement */
  void *dfields[ACC_DATA_MAX_FIELDS];
  acc__devent *copied;  /* recorded on the copy stream after this slot's host-to-device copy */
  acc__devent *used;    /* recorded on the compute stream when the program released the batch */
  int copy_pending;     /* a copy from the host buffers is queued and not known to have run */
  int used_pending;     /* `used` was recorded: the next copy into dfields must wait for it */
} dl_slot;

struct acc_dataloader {
  uint32_t magic;
  void (*owner_forget)(void *owner, acc_dataloader *dl); /* the accelerator that prepared it */
  void *owner;
  acc_dataset *ds;
  int owns_ds; /* destroy ds with the loader (acc__dataloader_own_dataset) */
  acc_dataloader_options o;
  size_t capacity[ACC_DATA_MAX_FIELDS];
  int np, split;
  int64_t per_bs;   /* samples in a full batch of this process */
  int64_t total_bs; /* samples in a full batch over all processes */
  int iterable;
  int batched;                             /* map-style over a given list of batches */
  int64_t nb, *bl_idx, *bl_counts;         /* the list as given */
  int64_t *bl_perm, *bl_pidx, *bl_pcounts; /* the epoch's (shuffled) list */
  int dispatch;                            /* DataLoaderDispatcher */
  int64_t cur_skip; /* batches skipped at the start of the epoch in progress */
  int join_saved;   /* inside acc_join_uneven_inputs_begin/end: o.shard.even_batches before it;
                       -1 outside */
  int epoch_even;   /* even_batches of the epoch in progress (its plan) */
  struct acc__devctx *dev; /* device placement: the accelerator's device (NULL: host only) */
  acc__dstream *cstream;   /* its copy stream */
  acc__device *host_dev;   /* the device whose acc__device_host_alloc made the slots' buffers */
  int dead;                /* detaching from the device failed: every call fails */

  /* ring */
  int nslots;
  dl_slot *slots;
  int *ready_q, rq_head, rq_count;
  int *free_stack, nfree;

  /* producer state: touched by the producer only while active, by the consumer when idle */
  int64_t p_epoch, p_skip;
  int64_t *order;
  acc_batch_shard *plan;
  int64_t p_cursor;             /* map-style: next plan batch */
  acc_iterable_shard *ishard;   /* iterable */
  uint8_t *rec_cur, *rec_first; /* staged records: current real batch, first real batch */
  int64_t real_bs, stream_pos, cur_start, p_batches;
  int p_need_reset, p_ended, p_finished;
  uint8_t *stage;               /* custom collate: per_bs staged records */
  const void **sample_ptrs;     /* per_bs * num_fields */
  char perr[512];
  acc_result perr_rc;
  /* dispatching: global batches (records + positions); process 0 reads one ahead into the
   * other buffer. first_*: the first num_processes samples of the epoch's first global batch. */
  uint8_t *g_rec[2];
  int64_t *g_idx[2];
  int64_t g_count[2];
  int g_cur, g_started;
  uint8_t *first_rec;
  int64_t *first_idx, first_count;
  int64_t src_pos; /* map-style: next position in the epoch's order */

  /* consumer state */
  int64_t epoch, skip_next, yielded;
  int in_epoch;
  int cur_slot, ahead_slot;
  int end_of_dataloader;
  int64_t remainder;
  acc_batch batch;
  acc_result sticky_rc;
  char sticky_msg[512];

  /* loader thread */
  int threaded;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_prod, cv_cons;
  int active, done, failed, busy, quit;
  uint64_t gen;
};

static inline acc_result acc__loader_check(const acc_dataloader *dl, const char *fn) {
  ACC_CHECK(acc__check_handle(dl, ACC__HANDLE_DATALOADER, fn));
  return ACC_OK;
}

/* ---- loader_prefetch.c --------------------------------------------------------------------- */

/* Starts the loader thread (prefetch > 0); the error names fn. */
acc_result acc__loader_thread_start(acc_dataloader *dl, const char *fn);
/* Stops and joins the loader thread, if any. */
void acc__loader_thread_stop(acc_dataloader *dl);
/* The epoch is planned: the loader thread, if any, may produce. */
void acc__loader_producer_start(acc_dataloader *dl);
/* Takes the next produced slot: 1 (in *si), 0 end of epoch, -1 error (perr). */
int acc__loader_take(acc_dataloader *dl, int *si);
/* Gives slot si (or nothing when si < 0) back to the producer. */
void acc__loader_release_slot(acc_dataloader *dl, int si);
/* Stops the producer (mid-epoch too) and returns every slot to the free list. */
void acc__loader_stop_epoch(acc_dataloader *dl);

/* ---- loader_dispatch.c --------------------------------------------------------------------- */

/* The buffers of the dispatching mode (created with the loader; freed by its destroy). */
acc_result acc__loader_dispatch_alloc(acc_dataloader *dl);
/* Starts an epoch of the dispatching mode. */
acc_result acc__loader_dispatch_begin(acc_dataloader *dl);
/* One slice of a global batch into s: 1 got one, 0 end, -1 error (perr). */
int acc__loader_produce_dispatch(acc_dataloader *dl, dl_slot *s);

/* ---- loader_batch.c ------------------------------------------------------------------------ */

/* Records a producer error (rc and message, handed out by acc_dataloader_next); returns -1. */
int acc__loader_perror(acc_dataloader *dl, acc_result rc, const char *fmt, ...) ACC_PRINTF(3, 4);
/* The stream-record step of an iterable dataset: calls its next callback into the record rec;
 * 1 got a sample (*pos receives its stream position, which is counted), 0 the stream ended (now
 * or before: marked), -1 error (perr). */
int acc__loader_stream_next(acc_dataloader *dl, uint8_t *rec, int64_t *pos);
/* Collates n staged samples (sample_ptrs) into slot s: 0, or -1 on error (perr). */
int acc__loader_collate(acc_dataloader *dl, dl_slot *s, int64_t n);
/* The next batch of the map-style plan into s: 1 got one, 0 end, -1 error (perr). */
int acc__loader_produce_map(acc_dataloader *dl, dl_slot *s);
/* The next batch of an iterable dataset into s (skipped ones included): 1, 0 end, -1 error. */
int acc__loader_produce_iter_once(acc_dataloader *dl, dl_slot *s);

/* ---- loader_place.c ------------------------------------------------------------------------ */

/* The copy stream, and per slot two events and device buffers. */
acc_result acc__loader_place_create(acc_dataloader *dl);
/* Frees the device side (after both streams are done with it). */
void acc__loader_place_destroy(acc_dataloader *dl);
/* Queues slot si's host-to-device copy. */
acc_result acc__loader_place_slot(acc_dataloader *dl, int si);
/* The program is done with slot si: its host buffers may be overwritten on return. */
acc_result acc__loader_unplace_slot(acc_dataloader *dl, int si);

#endif
