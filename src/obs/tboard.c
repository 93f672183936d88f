/* TensorBoard event files written natively: TFRecord framing (length, masked CRC-32C of the
 * length, payload, masked CRC-32C of the payload) around hand-encoded Event protocol buffers.
 *
 * Messages used (field numbers of TensorFlow's event.proto / summary.proto / tensor.proto and
 * TensorBoard's hparams plugin):
 *   Event            1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary
 *   Summary          1 value (repeated Value)
 *   Value            1 tag, 2 simple_value (float), 8 tensor (TensorProto), 9 metadata
 *   SummaryMetadata  1 plugin_data { 1 plugin_name, 2 content (bytes) }
 *   TensorProto      1 dtype (DT_FLOAT = 1), 2 tensor_shape (empty: a scalar), 5 float_val (packed)
 *   HParamsPluginData 1 version, 2 experiment, 3 session_start_info, 4 session_end_info
 *   SessionStartInfo 1 hparams (map<string, google.protobuf.Value>), 5 start_time_secs
 *   SessionEndInfo   1 status (STATUS_SUCCESS = 1, STATUS_FAILURE = 2), 2 end_time_secs
 *   Experiment       3 time_created_secs, 4 hparam_infos { 1 name, 4 type }, 5 metric_infos
 *                    { 1 name { 1 group, 2 tag } }
 *   google.protobuf.Value  2 number_value, 3 string_value, 4 bool_value
 * A map entry is a message { 1 key, 2 value }. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/log.h"
#include "obs/tboard.h"

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table driven ------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    crc_table[i] = c;
  }
}

uint32_t acc__crc32c(const void *data, size_t n) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, crc_init);
  const uint8_t *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t acc__crc32c_masked(const void *data, size_t n) {
  uint32_t c = acc__crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- a minimal protocol-buffer encoder ------------------------------------------------------ */

typedef struct pb {
  uint8_t *p;
  size_t n, cap;
  int oom;
} pb;

static void pb_raw(pb *b, const void *d, size_t n) {
  if (b->oom || n == 0) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->n + n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void pb_varint(pb *b, uint64_t v) {
  uint8_t tmp[10];
  size_t k = 0;
  do {
    tmp[k++] = (uint8_t)((v & 0x7fu) | (v > 0x7fu ? 0x80u : 0u));
    v >>= 7;
  } while (v);
  pb_raw(b, tmp, k);
}

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static void pb_key(pb *b, int field, int wt) {
  pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wt);
}

static void pb_int(pb *b, int field, int64_t v) {
  pb_key(b, field, WT_VARINT);
  pb_varint(b, (uint64_t)v);
}

static void pb_double(pb *b, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  uint8_t le[8];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(u >> (8 * i));
  pb_key(b, field, WT_I64);
  pb_raw(b, le, 8);
}

static void put_float_le(uint8_t le[4], float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  for (int i = 0; i < 4; i++) le[i] = (uint8_t)(u >> (8 * i));
}

static void pb_float(pb *b, int field, float v) {
  uint8_t le[4];
  put_float_le(le, v);
  pb_key(b, field, WT_I32);
  pb_raw(b, le, 4);
}

static void pb_bytes(pb *b, int field, const void *d, size_t n) {
  pb_key(b, field, WT_LEN);
  pb_varint(b, n);
  pb_raw(b, d, n);
}

static void pb_str(pb *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

/* Appends sub as a length-delimited field and frees it. */
static void pb_msg(pb *b, int field, pb *sub) {
  if (sub->oom) b->oom = 1;
  pb_bytes(b, field, sub->p, sub->n);
  free(sub->p);
  *sub = (pb){0};
}

/* ---- the writer ---------------------------------------------------------------------------- */

struct acc__tb {
  FILE *f;
  char path[4200];
  char **metrics; /* scalar tags seen, for the experiment summary */
  size_t nmetrics;
  acc_kv *hparams; /* copied for the experiment summary */
  size_t nhparams;
  char *hp_strings; /* backing store of the copied keys and strings */
};

static double wall_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static acc_result write_record(acc__tb *t, pb *event) {
  if (event->oom) {
    free(event->p);
    return acc__error(ACC_ERR_NOMEM, "tensorboard: out of memory encoding an event for %s",
                      t->path);
  }
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)event->n >> (8 * i));
  uint8_t c1[4], c2[4];
  uint32_t lc = acc__crc32c_masked(len, 8), dc = acc__crc32c_masked(event->p, event->n);
  for (int i = 0; i < 4; i++) {
    c1[i] = (uint8_t)(lc >> (8 * i));
    c2[i] = (uint8_t)(dc >> (8 * i));
  }
  int ok = fwrite(len, 1, 8, t->f) == 8 && fwrite(c1, 1, 4, t->f) == 4 &&
           fwrite(event->p, 1, event->n, t->f) == event->n && fwrite(c2, 1, 4, t->f) == 4;
  free(event->p);
  *event = (pb){0};
  if (!ok)
    return acc__error(ACC_ERR_IO, "tensorboard: writing \"%s\" failed: %s", t->path,
                      strerror(errno));
  return ACC_OK;
}

acc_result acc__tb_open(acc__tb **out, const char *run_dir) {
  *out = NULL;
  char host[256];
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  acc__tb *t = acc__calloc(1, sizeof *t);
  if (!t) return ACC_ERR_NOMEM;
  static int counter;
  double now = wall_now();
  /* TensorBoard picks up any file whose name contains "tfevents"; this is the name its own
   * writers use: events.out.tfevents.<seconds>.<host>.<pid>.<n>. */
  snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%lld.%s.%ld.%d", run_dir,
           (long long)now, host, (long)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
  t->f = fopen(t->path, "wb");
  if (!t->f) {
    acc_result rc =
        acc__error(ACC_ERR_IO, "tensorboard: cannot create \"%s\": %s", t->path, strerror(errno));
    acc__free(t);
    return rc;
  }
  pb ev = {0};
  pb_double(&ev, 1, now);
  pb_str(&ev, 3, "brain.Event:2");
  acc_result rc = write_record(t, &ev);
  if (rc == ACC_OK && fflush(t->f) != 0)
    rc = acc__error(ACC_ERR_IO, "tensorboard: writing \"%s\" failed", t->path);
  if (rc != ACC_OK) {
    fclose(t->f);
    acc__free(t);
    return rc;
  }
  *out = t;
  return ACC_OK;
}

const char *acc__tb_path(const acc__tb *t) { return t ? t->path : NULL; }

/* A Value holding the hparams plugin's data under tag. */
static void hparams_value(pb *summary, const char *tag, pb *plugin_data) {
  pb meta = {0}, pd = {0}, tensor = {0}, shape = {0}, value = {0};
  pb_str(&pd, 1, "hparams");
  pb_msg(&pd, 2, plugin_data);
  pb_msg(&meta, 1, &pd);
  pb_int(&tensor, 1, 1); /* DT_FLOAT */
  pb_msg(&tensor, 2, &shape);
  uint8_t zero[4];
  put_float_le(zero, 0.0f);
  pb_bytes(&tensor, 5, zero, 4); /* float_val, packed: [0.0] */
  pb_str(&value, 1, tag);
  pb_msg(&value, 8, &tensor);
  pb_msg(&value, 9, &meta);
  pb_msg(summary, 1, &value);
}

static acc_result write_summary_event(acc__tb *t, pb *summary, int64_t step) {
  pb ev = {0};
  pb_double(&ev, 1, wall_now());
  pb_int(&ev, 2, step);
  pb_msg(&ev, 5, summary);
  ACC_CHECK(write_record(t, &ev));
  if (fflush(t->f) != 0)
    return acc__error(ACC_ERR_IO, "tensorboard: writing \"%s\" failed", t->path);
  return ACC_OK;
}

acc_result acc__tb_purge_from(acc__tb *t, int64_t step) {
  pb log = {0}, ev = {0};
  pb_int(&log, 1, 1); /* SessionLog.status = START */
  pb_double(&ev, 1, wall_now());
  pb_int(&ev, 2, step);
  pb_msg(&ev, 6, &log); /* Event.session_log */
  ACC_CHECK(write_record(t, &ev));
  if (fflush(t->f) != 0)
    return acc__error(ACC_ERR_IO, "tensorboard: writing \"%s\" failed", t->path);
  return ACC_OK;
}

acc_result acc__tb_hparams(acc__tb *t, const acc_kv *config, size_t n) {
  /* keep a copy for the experiment summary written at the end */
  size_t bytes = 0;
  for (size_t i = 0; i < n; i++)
    bytes += strlen(config[i].key) + 1 +
             (config[i].type == ACC_VALUE_STRING ? strlen(config[i].string) + 1 : 0);
  t->hparams = acc__calloc(n ? n : 1, sizeof *t->hparams);
  t->hp_strings = acc__malloc(bytes + 1);
  if (!t->hparams || !t->hp_strings) return ACC_ERR_NOMEM;
  char *s = t->hp_strings;
  for (size_t i = 0; i < n; i++) {
    t->hparams[i] = config[i];
    t->hparams[i].key = strcpy(s, config[i].key);
    s += strlen(s) + 1;
    if (config[i].type == ACC_VALUE_STRING) {
      t->hparams[i].string = strcpy(s, config[i].string);
      s += strlen(s) + 1;
    }
  }
  t->nhparams = n;

  pb start = {0};
  for (size_t i = 0; i < n; i++) {
    pb entry = {0}, v = {0};
    const acc_kv *kv = &config[i];
    switch (kv->type) {
      case ACC_VALUE_NUMBER: pb_double(&v, 2, kv->number); break;
      case ACC_VALUE_INT: pb_double(&v, 2, (double)kv->integer); break;
      case ACC_VALUE_STRING: pb_str(&v, 3, kv->string); break;
      case ACC_VALUE_BOOL: pb_int(&v, 4, kv->integer != 0); break;
    }
    pb_str(&entry, 1, kv->key);
    pb_msg(&entry, 2, &v);
    pb_msg(&start, 1, &entry);
  }
  pb_double(&start, 5, wall_now());
  pb data = {0}, summary = {0};
  pb_msg(&data, 3, &start);
  hparams_value(&summary, "_hparams_/session_start_info", &data);
  return write_summary_event(t, &summary, 0);
}

static acc_result note_metric(acc__tb *t, const char *tag) {
  for (size_t i = 0; i < t->nmetrics; i++)
    if (strcmp(t->metrics[i], tag) == 0) return ACC_OK;
  char **m = acc__realloc(t->metrics, (t->nmetrics + 1) * sizeof *m);
  if (!m) return ACC_ERR_NOMEM;
  t->metrics = m;
  if (!(m[t->nmetrics] = acc__strdup(tag))) return ACC_ERR_NOMEM;
  t->nmetrics++;
  return ACC_OK;
}

acc_result acc__tb_scalars(acc__tb *t, const acc_kv *values, size_t n, int64_t step) {
  pb summary = {0};
  size_t added = 0;
  for (size_t i = 0; i < n; i++) {
    const acc_kv *kv = &values[i];
    double x;
    if (kv->type == ACC_VALUE_NUMBER)
      x = kv->number;
    else if (kv->type == ACC_VALUE_INT || kv->type == ACC_VALUE_BOOL)
      x = (double)kv->integer;
    else
      continue; /* strings have no scalar form */
    pb value = {0};
    pb_str(&value, 1, kv->key);
    pb_float(&value, 2, (float)x);
    pb_msg(&summary, 1, &value);
    ACC_CHECK(note_metric(t, kv->key));
    added++;
  }
  if (!added) {
    free(summary.p);
    return ACC_OK;
  }
  return write_summary_event(t, &summary, step);
}

acc_result acc__tb_close(acc__tb *t, int success) {
  if (!t) return ACC_OK;
  acc_result rc = ACC_OK;
  if (t->f && t->hparams) {
    /* The experiment: the hyperparameters and every scalar logged, so the HParams dashboard
     * lists them as columns. */
    pb exp = {0};
    pb_double(&exp, 3, wall_now());
    for (size_t i = 0; i < t->nhparams; i++) {
      pb info = {0};
      pb_str(&info, 1, t->hparams[i].key);
      int type = t->hparams[i].type == ACC_VALUE_STRING ? 1
                 : t->hparams[i].type == ACC_VALUE_BOOL ? 2
                                                        : 3;
      pb_int(&info, 4, type);
      pb_msg(&exp, 4, &info);
    }
    for (size_t i = 0; i < t->nmetrics; i++) {
      pb info = {0}, name = {0};
      pb_str(&name, 2, t->metrics[i]);
      pb_msg(&info, 1, &name);
      pb_msg(&exp, 5, &info);
    }
    pb data = {0}, summary = {0};
    pb_msg(&data, 2, &exp);
    hparams_value(&summary, "_hparams_/experiment", &data);
    rc = write_summary_event(t, &summary, 0);
    pb end = {0}, data2 = {0}, summary2 = {0};
    pb_int(&end, 1, success ? 1 : 2);
    pb_double(&end, 2, wall_now());
    pb_msg(&data2, 4, &end);
    hparams_value(&summary2, "_hparams_/session_end_info", &data2);
    if (rc == ACC_OK) rc = write_summary_event(t, &summary2, 0);
  }
  if (t->f && fclose(t->f) != 0 && rc == ACC_OK)
    rc = acc__error(ACC_ERR_IO, "tensorboard: closing \"%s\" failed: %s", t->path, strerror(errno));
  for (size_t i = 0; i < t->nmetrics; i++) acc__free(t->metrics[i]);
  acc__free(t->metrics);
  acc__free(t->hparams);
  acc__free(t->hp_strings);
  acc__free(t);
  return rc;
}
