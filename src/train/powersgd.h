/* PowerSGD gradient compression (torch DDP's powerSGD_hook, Vogels et al. 2019), as a bucket
 * reducer of the gradient buckets (train/grad_sync.h). Internal; docs/mixed-precision.md has the
 * user's view ("PowerSGD gradient compression"). */
#ifndef ACC_TRAIN_POWERSGD_H
#define ACC_TRAIN_POWERSGD_H

#include "core/internal.h"

typedef struct acc__powersgd acc__powersgd;

/* State for model m's parameters: `rank` (matrix_approximation_rank, >= 1) and `start_iter`
 * (start_powerSGD_iter: the first start_iter steps average uncompressed). Nothing is allocated
 * per parameter before the first compressed step. */
acc_result acc__powersgd_create(acc__powersgd **out, acc_state *st, acc_model *m, int rank,
                                long start_iter);
void acc__powersgd_destroy(acc__powersgd *p);

/* The bucket reducer (acc__bucket_reduce_fn; ctx is the acc__powersgd): leaves in every gradient
 * of the bucket the same approximation of the mean over processes on every process. Before
 * start_iter, and for 1-D tensors and matrices that rank-r factors would not shrink by 2x
 * (min_compression_rate 2), the exact mean. A matrix (dimension 0 x the rest) M, with this
 * process's error of the last step added (error feedback): P = M Q (Q of the last step, re-
 * orthogonalized: warm start; random the first time, the same on every process), P summed over
 * processes and orthogonalized, Q = M^T P summed and divided by the number of processes, the
 * gradient becomes P Q^T and the error M - P Q^T. Collective. */
acc_result acc__powersgd_reduce_bucket(void *ctx, const size_t *params, size_t count, size_t numel);

/* The same on gradients in host memory given per parameter of the bucket (grads[k] for
 * params[k]): the host staging of gradients in device memory (train_sync.c). Collective. */
acc_result acc__powersgd_reduce_host(void *ctx, const size_t *params, size_t count, float *const *grads);

/* After every bucket of a synchronizing backward: counts the step (start_iter). */
void acc__powersgd_step_done(acc__powersgd *p);
/* Steps counted so far (tests). */
long acc__powersgd_iter(const acc__powersgd *p);

/* ---- checkpoints (src/ckpt/psgd_state.c) ----------------------------------------------------
 * The state of a process: the step counter, and per compressed parameter its Q (m x r, the warm
 * start) and its error feedback (n x m). The random first Q of a parameter comes from a generator
 * seeded with acc__powersgd_seed() and the parameter's index, the same on every process: there is
 * no running generator to save. */
int acc__powersgd_rank(const acc__powersgd *p);
long acc__powersgd_start_iter(const acc__powersgd *p);
uint64_t acc__powersgd_seed(void);
/* 1 with the shape (n, m, r) and borrowed buffers when parameter i is compressed, else 0. */
int acc__powersgd_param(const acc__powersgd *p, size_t i, size_t dims[3], const float **q, const float **err);
/* A new state for the same model and settings, at step 0, nothing compressed yet (a load stages
 * into it and swaps it in only once every process agreed). */
acc_result acc__powersgd_fresh(const acc__powersgd *p, acc__powersgd **out);
void acc__powersgd_set_iter(acc__powersgd *p, long iter);
/* Classifies parameter i; when it is compressed, its shape and the buffers to fill (Q, error);
 * ACC_ERR_MISMATCH without a message when its shape does not compress at this rank. */
acc_result acc__powersgd_set_param(acc__powersgd *p, size_t i, size_t dims[3], float **q, float **err);
/* Exchanges the contents of two states of the same model (the reducers keep their pointer). */
void acc__powersgd_swap(acc__powersgd *a, acc__powersgd *b);

#endif
