/* Map-style and iterable datasets: fixed-size samples made of typed fields. */
#include <string.h>

#include "data/data_internal.h"

static acc_result dataset_create(acc_dataset **out, int64_t length, const acc_field_desc *fields,
                                 int num_fields, const char *fn) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  if (num_fields < 1 || num_fields > ACC_DATA_MAX_FIELDS || !fields)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: num_fields is %d, expected 1..%d with a field array",
                      fn, num_fields, ACC_DATA_MAX_FIELDS);
  for (int f = 0; f < num_fields; f++) {
    if (acc_dtype_size(fields[f].dtype) == 0 || fields[f].count == 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: field %d has dtype %d and count %zu; expected a known dtype and count >= 1",
                        fn, f, (int)fields[f].dtype, fields[f].count);
  }
  acc_dataset *ds = acc__calloc(1, sizeof *ds);
  if (!ds) return ACC_ERR_NOMEM;
  ds->magic = ACC__MAGIC_DATASET;
  ds->length = length;
  ds->num_fields = num_fields;
  size_t off = 0;
  for (int f = 0; f < num_fields; f++) {
    ds->fields[f] = fields[f];
    ds->sample_bytes[f] = acc_dtype_size(fields[f].dtype) * fields[f].count;
    ds->record_offset[f] = off;
    off += (ds->sample_bytes[f] + 15) & ~(size_t)15; /* keep every field 16-byte aligned */
  }
  ds->record_bytes = off;
  *out = ds;
  return ACC_OK;
}

acc_result acc_dataset_create_map(acc_dataset **out, int64_t length, const acc_field_desc *fields,
                                  int num_fields, acc_dataset_fetch_fn fetch, void *payload) {
  static const char fn[] = "acc_dataset_create_map";
  if (out) *out = NULL;
  if (length < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: length is %lld, expected >= 0", fn, (long long)length);
  if (!fetch) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: fetch callback is NULL", fn);
  ACC_CHECK(dataset_create(out, length, fields, num_fields, fn));
  (*out)->fetch = fetch;
  (*out)->payload = payload;
  return ACC_OK;
}

acc_result acc_dataset_create_iterable(acc_dataset **out, int64_t length,
                                       const acc_field_desc *fields, int num_fields,
                                       acc_dataset_next_fn next, acc_dataset_reset_fn reset,
                                       void *payload) {
  static const char fn[] = "acc_dataset_create_iterable";
  if (out) *out = NULL;
  if (length < -1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: length is %lld, expected >= 0 or -1 (unknown)",
                      fn, (long long)length);
  if (!next) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: next callback is NULL", fn);
  ACC_CHECK(dataset_create(out, length, fields, num_fields, fn));
  (*out)->next = next;
  (*out)->reset = reset;
  (*out)->payload = payload;
  return ACC_OK;
}

static int memory_fetch(int64_t index, void *const *fields, void *payload) {
  const acc_dataset *ds = payload;
  for (int f = 0; f < ds->num_fields; f++)
    memcpy(fields[f], (const uint8_t *)ds->mem[f] + (size_t)index * ds->sample_bytes[f],
           ds->sample_bytes[f]);
  return 0;
}

acc_result acc_dataset_create_memory(acc_dataset **out, int64_t length,
                                     const acc_field_desc *fields, int num_fields,
                                     const void *const *data) {
  static const char fn[] = "acc_dataset_create_memory";
  if (out) *out = NULL;
  if (length < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: length is %lld, expected >= 0", fn, (long long)length);
  if (!data) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: data is NULL", fn);
  for (int f = 0; f < num_fields && f < ACC_DATA_MAX_FIELDS; f++)
    if (!data[f] && length > 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: data[%d] (field %d's array) is NULL", fn, f, f);
  ACC_CHECK(dataset_create(out, length, fields, num_fields, fn));
  for (int f = 0; f < num_fields; f++) (*out)->mem[f] = data[f];
  (*out)->fetch = memory_fetch;
  (*out)->payload = *out;
  return ACC_OK;
}

int64_t acc_dataset_length(const acc_dataset *ds) {
  return acc__handle_ok(ds, ACC__HANDLE_DATASET) ? ds->length : -1;
}

void acc_dataset_destroy(acc_dataset *ds) {
  if (!acc__handle_ok(ds, ACC__HANDLE_DATASET)) return;
  ds->magic = ACC__MAGIC_DEAD;
  if (ds->free_payload) ds->free_payload(ds->payload);
  acc__free(ds);
}

const char *acc__dataset_fetch_error(const acc_dataset *ds) {
  const char *e = ds && ds->fetch_error ? ds->fetch_error(ds->payload) : NULL;
  return e ? e : "";
}
