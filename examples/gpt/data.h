/* The training text: a file read as bytes (gzip or plain), split into a training part and a
 * validation part, and cut into windows of block_size + 1 bytes (inputs and next-byte targets).
 *
 * Independent of libaccelerate: fallible functions return 0 or -1 with the reason in
 * text_last_error(). */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The Jargon File as Debian's jargon-text package installs it (public domain). */
#define TEXT_DEFAULT_PATH "/usr/share/doc/jargon-text/jargon.txt.gz"

typedef struct text_corpus {
  uint8_t *bytes; /* the whole file */
  size_t len;
  size_t train_len; /* bytes [0, train_len) train, [train_len, len) validate */
} text_corpus;

/**
 * Reads path (NULL: TEXT_DEFAULT_PATH) through zlib, so a .gz file is decompressed and a plain
 * file read as is; the last val_percent (1..50) percent of the bytes become the validation part.
 * Both parts must hold at least one window of window_bytes. Ownership: text_corpus_free.
 */
int text_load(const char *path, int val_percent, size_t window_bytes, text_corpus *out);
void text_corpus_free(text_corpus *c);

/**
 * Writes bytes [begin, end) of the corpus as an llm.c token shard (the format
 * acc_dataset_create_tokens reads as ACC_TOKENS_LLMC): a 256 x int32 little-endian header
 * (magic 20240520, version 1, token count) and then one uint16 token per byte, so the vocabulary
 * is the 256 byte values. max_tokens > 0 keeps only the first max_tokens bytes.
 */
int text_write_shard(const text_corpus *c, size_t begin, size_t end, size_t max_tokens, const char *path);

/** A view of part of the text as windows: window i is bytes[i * step, i * step + window). */
typedef struct text_windows {
  const uint8_t *bytes;
  size_t window, step;
  int64_t count;
} text_windows;

/** Non-overlapping windows (each sharing its last byte with the next one's first) over
 *  [begin, end) of the corpus; at most max_count when max_count > 0, spread evenly. */
text_windows text_windows_of(const text_corpus *c, size_t begin, size_t end, size_t window,
                             int64_t max_count);

/** Copies window i into out (window bytes). The dataset's fetch callback. */
int text_window_fetch(int64_t i, void *const *fields, void *payload);

const char *text_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
