// The gloo backend (libaccelerate-gloo.so): CPU collectives across machines through gloo
// (Debian libgloo-dev, the library PyTorch uses on CPU), bootstrapped through the rendezvous
// store (src/backend/store.h) that the library hands over in acc__proc_info. A thin shim: each
// backend op is one gloo collective; gloo's exceptions become acc_result errors naming the
// operation, its number and gloo's text. Timeouts: the state's timeout is gloo's context and
// per-operation timeout.
//
// Mismatch detection (checks_tags 1: this file compares the call tags, comm.c does not). Every
// collective starts with a header exchange: each rank sends every peer one message of its own (slot
// kHdrPrefix + the exchange's number) holding the call tag and, when the collective is small enough
// ((n - 1) x its bytes <= kInline; between 2 processes up to kInline2; a broadcast, whose root
// alone sends data, up to the same capacity per message), the collective's data itself. The
// receives of each exchange are posted during the one before (two sets of buffers): in an exchange
// that carries the whole collective or precedes a broadcast's or an all_gather's direct transfer,
// before this rank's messages (after a payload of more than 256 KiB, once the peers' arrived);
// otherwise once the collective's data has moved (NextPost). The peers' sends then go out at once
// (gloo's tcp transport sends an unbound buffer straight away only when the receiver is known to
// wait for it; otherwise it first asks, and the data waits for the answer): the exchange costs one
// one-way message, where comparing the tags with a gloo all_reduce first cost a whole collective.
// Every rank sees every rank's tag, so all decide alike: a difference fails every rank with
// ACC_ERR_MISMATCH naming every call (their records, exchanged by a gloo all_gather of one fixed
// size). Only then does the data move: small collectives complete from the messages (all_reduce,
// reduce and reduce_scatter reduce in rank order, so every rank gets the same bits), larger ones
// run gloo's collective, but for broadcast (a tree of direct transfers between the callers'
// buffers, broadcast_tree) and all_gather between 2 processes from 256 KiB on (one direct transfer
// each way, direct()). A message is never larger than the receive posted for it (gloo fails a
// larger one in its I/O thread), whatever the peers called: headers are fixed-size and payloads at
// most the capacity. Between 2 processes (one per machine, or the leaders of two machines) the
// exchange moves no more bytes than gloo's own algorithms would, in one message instead of their
// steps, hence the larger capacity there; with more processes each rank sends its data to every
// peer, so only small collectives ride along. The buffers are allocated without being written, so
// their pages cost memory only once a collective of that size ran.
//
// Two lanes. Every two ranks are connected twice (two gloo contexts over one device, ctx and
// ctx2): what a rank sends to a higher rank travels on ctx, what it sends to a lower rank on
// ctx2 (lane()), so that each connection carries data one way and only gloo's small notices the
// other way. gloo's I/O thread reads a connection only while it can take that connection's lock,
// and the calling thread holds the lock while it writes to it; on one connection for both ways,
// the peer's data arriving during a write made the I/O thread re-poll in a loop for as long as
// the write lasted (tens of thousands of empty polls a second, measured), taking the CPU from the
// processes' other threads. gloo's own collectives (the mid sizes) run on ctx alone.
#include <chrono>
#include <csignal>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <cstdarg>

// The library's internal headers are C11: its thread-local declarations use C's keyword.
#define _Thread_local thread_local
extern "C" {
#include "backend/module.h"
#include "backend/gloo_be.h"
}

static const acc__module_host *H;

extern "C" void acc__gloo_set_host(const acc__module_host *host) { H = host; }

static acc_result fail(acc_result rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static acc_result fail(acc_result rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  H->verror(rc, fmt, ap);
  va_end(ap);
  return rc;
}

namespace {

// gloo's Store over the library's rendezvous store.
class AccStore : public gloo::rendezvous::Store {
 public:
  AccStore(acc__store *s, double timeout_s) : s_(s), timeout_s_(timeout_s) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    if (H->store_set(s_, key.c_str(), data.data(), data.size()) != ACC_OK)
      throw std::runtime_error(H->last_error());
  }
  std::vector<char> get(const std::string &key) override { return fetch(key, timeout_s_); }
  void wait(const std::vector<std::string> &keys) override {
    for (const auto &k : keys) fetch(k, timeout_s_);
  }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &t) override {
    for (const auto &k : keys) fetch(k, t.count() > 0 ? t.count() / 1000.0 : timeout_s_);
  }

 private:
  std::vector<char> fetch(const std::string &key, double t) {
    void *v = nullptr;
    size_t n = 0;
    if (H->store_get(s_, key.c_str(), &v, &n, t) != ACC_OK)
      throw std::runtime_error(H->last_error());
    std::vector<char> out(static_cast<char *>(v), static_cast<char *>(v) + n);
    H->free(v);
    return out;
  }
  acc__store *s_;
  double timeout_s_;
};

// The header exchange (see the top): the header, the largest payload that rides along, the
// slot prefix of the exchanges (gloo's own collectives use prefixes 0x01..0x08).
struct Hdr {
  uint64_t tag, seq, len, reserved;
};
constexpr size_t kHdr = sizeof(Hdr);
constexpr size_t kInline = 64 * 1024;
constexpr size_t kInline2 = 1024 * 1024; // 2 processes
constexpr uint8_t kHdrPrefix = 0xac;
constexpr size_t kPostEarly = 256 * 1024; // see hx
// Between 2 processes, broadcast and all_gather of at least kDirect bytes move their data
// straight between the callers' buffers (see direct()) on slot kDataPrefix + the exchange's number.
constexpr size_t kDirect = 256 * 1024;
constexpr uint8_t kDataPrefix = 0xad;
constexpr size_t kPiece = 1024 * 1024, kPieces = 16; // broadcast_tree's pieces
constexpr uint64_t kPairMin = 1u << 20; // all_reduce_pair from here (ACCELERATE_GLOO_PAIR_BYTES)

struct GlooBe {
  acc__backend base;
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::shared_ptr<gloo::rendezvous::Context> ctx2; // the second lane (see lane())
  std::chrono::milliseconds timeout;
  uint32_t tag = 0;
  std::vector<char> scratch;
  char name[32];
  // header exchanges: number of the last one, receive buffers [parity][peer] (kHdr + cap
  // each), the send buffer
  uint64_t hseq = 0;
  size_t cap = 0; // payload capacity of one message: kInline, or kInline2 for 2 processes
  std::unique_ptr<char[]> hin[2];
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> inb[2];
  std::unique_ptr<char[]> hout;
  // the send buffer's two views: [0] on lane ctx (to higher ranks), [1] on ctx2 (to lower ones)
  std::unique_ptr<gloo::transport::UnboundBuffer> outb[2];
  // ACCELERATE_GLOO_PAIR_BYTES: all_reduce_pair from this size on (2 processes); every header
  // carries it, so that processes started with different values fail instead of pairing
  // different algorithms
  uint64_t pair_min = kPairMin;
};

GlooBe *self(acc__backend *be) { return reinterpret_cast<GlooBe *>(be); }

// The context whose connections carry the data of rank `from` to rank `to`.
gloo::rendezvous::Context *lane(GlooBe *g, int from, int to) {
  return from < to ? g->ctx.get() : g->ctx2.get();
}
gloo::transport::UnboundBuffer *outb(GlooBe *g, int to) {
  return g->outb[to > g->base.rank ? 0 : 1].get();
}

uint64_t hslot(uint64_t seq) { return (uint64_t)gloo::Slot::build(kHdrPrefix, (uint32_t)seq); }

// Posts the receives of exchange seq (buffers of parity seq & 1, free since exchange seq - 2).
void hx_post(GlooBe *g, uint64_t seq) {
  int p = (int)(seq & 1);
  for (int r = 0; r < g->base.size; r++)
    if (r != g->base.rank) g->inb[p][r]->recv(r, hslot(seq), 0, kHdr + g->cap);
}

// Rank r's message of the exchange just made (r != me), or this rank's own.
const char *hmsg(GlooBe *g, int r) {
  if (r == g->base.rank) return g->hout.get();
  return g->hin[g->hseq & 1].get() + (size_t)r * (kHdr + g->cap);
}
const char *hpayload(GlooBe *g, int r) { return hmsg(g, r) + kHdr; }

// Whether a collective moving `bytes` to each peer rides in the exchange.
bool small(GlooBe *g, size_t bytes) { return bytes * (size_t)(g->base.size - 1) <= g->cap; }

// Direct transfers (2 processes, broadcast and all_gather of at least kDirect bytes): the
// receiver posts its receive into the caller's own buffer before sending its header, so that the
// receive's notice leaves ahead of the header; the sender sends straight from the caller's buffer
// once the tags matched, the receive almost always already known to it (no round trip, as in the
// exchange; the notice travels on the other lane, so it can arrive after the header, and then the
// data waits for it). Against riding in the exchange this saves the two copies
// through the exchange's buffers (a tenth of the time of a 1 MiB broadcast here) for one one-way
// message of waiting; against gloo's own collective, the round trip gloo's receiver posts at the
// call. Nothing is sent before every tag matched: after a mismatch the posted receive is never
// matched (its slot is this exchange's) and is dropped with its buffer object.
bool direct(GlooBe *g, size_t bytes) { return g->base.size == 2 && bytes >= kDirect; }
// the slot of piece p (< 64) of exchange seq's data
uint64_t dslot(uint64_t seq, size_t p) {
  return (uint64_t)gloo::Slot::build(kDataPrefix, (uint32_t)(seq << 6 | p));
}

acc_result gloo_error(acc__backend *be, const char *what, const std::exception &e);

// The mismatch error: every rank's call record, by a gloo all_gather of one size.
acc_result hx_mismatch(GlooBe *g) {
  const acc__call *c = g->base.call;
  acc__call_rec mine;
  memset(&mine, 0, sizeof mine);
  if (c) {
    acc__call_rec_fields(&mine, c);
    H->call_rec_site(&mine, c->file);
  }
  std::vector<acc__call_rec> all((size_t)g->base.size);
  try {
    gloo::AllgatherOptions o(g->ctx);
    o.setInput(reinterpret_cast<uint8_t *>(&mine), sizeof mine);
    o.setOutput(reinterpret_cast<uint8_t *>(all.data()), sizeof mine * all.size());
    o.setTag(++g->tag);
    o.setTimeout(g->timeout);
    gloo::allgather(o);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "the exchange of call records after a mismatch", e);
  }
  return H->mismatch_error(g->base.op_name ? g->base.op_name : "collective", g->base.rank, &mine,
                           all.data(), g->base.size, 0);
}

// The header exchange of one collective: this rank's tag, and `len` bytes of `data` to every
// peer (to = -1) or to rank `to` only (the others get the header alone). Fails on every rank
// alike when a tag differs. With `post`, the receives of the next exchange are posted here; a
// collective whose data moves after the exchange may pass false and post them when its data has
// moved (NextPost).
acc_result hx(GlooBe *g, const void *data, size_t len, int to, bool post) {
  const acc__call *c = g->base.call;
  uint64_t seq = ++g->hseq;
  Hdr h = {c ? c->tag : 0, seq, len, g->pair_min};
  try {
    // a small exchange posts first (the peers' next messages then never wait, and the notices
    // leave ahead of this header); after a large one, whose peers may still be writing on the
    // lanes that would carry the notices, once their messages arrived
    const bool early = post && len <= kPostEarly;
    if (early) hx_post(g, seq + 1);
    memcpy(g->hout.get(), &h, kHdr);
    if (len) memcpy(g->hout.get() + kHdr, data, len);
    for (int r = 0; r < g->base.size; r++)
      if (r != g->base.rank)
        outb(g, r)->send(r, hslot(seq), 0, kHdr + (to < 0 || r == to ? len : 0));
    for (int r = 0; r < g->base.size; r++)
      if (r != g->base.rank) g->inb[seq & 1][r]->waitRecv(g->timeout);
    if (post && !early) hx_post(g, seq + 1);
    for (int r = 0; r < g->base.size; r++)
      if (r != g->base.rank) outb(g, r)->waitSend(g->timeout);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, g->base.op_name ? g->base.op_name : "collective", e);
  }
  for (int r = 0; r < g->base.size; r++) {
    Hdr o;
    memcpy(&o, hmsg(g, r), kHdr);
    if (o.reserved != h.reserved)
      return fail(ACC_ERR_INVALID_ARGUMENT,
                  "gloo backend: %s (collective #%llu): process %d runs with "
                  "ACCELERATE_GLOO_PAIR_BYTES=%llu, process %d with %llu; the processes would pair "
                  "different all_reduce algorithms: set it alike on every machine (or unset it)",
                  g->base.op_name ? g->base.op_name : "collective",
                  (unsigned long long)g->base.op_seq, g->base.rank, (unsigned long long)h.reserved,
                  r, (unsigned long long)o.reserved);
    if (o.tag != h.tag) return hx_mismatch(g);
  }
  return ACC_OK;
}

// Posts the next exchange's receives when the collective it guards returns, on every path, if
// that collective's exchange ran without posting them (hx with post false). A peer's message
// sent before they are posted still arrives: gloo then asks for the receive first.
struct NextPost {
  GlooBe *g;
  uint64_t h0;
  bool on;
  NextPost(GlooBe *g_, bool on_) : g(g_), h0(g_->hseq), on(on_) {}
  ~NextPost() {
    if (!on || g->hseq != h0 + 1) return;
    try {
      hx_post(g, g->hseq + 1);
    } catch (...) { /* the pair failed: the next collective reports it */
    }
  }
};

// The error of a failed gloo call: a peer that closed its connection (died) is ACC_ERR_REMOTE,
// a timeout ACC_ERR_TIMEOUT, anything else ACC_ERR_BACKEND.
acc_result gloo_error(acc__backend *be, const char *what, const std::exception &e) {
  const char *m = e.what();
  acc_result rc = ACC_ERR_BACKEND;
  if (strstr(m, "imed out") || strstr(m, "imeout")) rc = ACC_ERR_TIMEOUT;
  else if (strstr(m, "closed") || strstr(m, "reset") || strstr(m, "Connection") ||
           strstr(m, "Broken pipe") || strstr(m, "EOF"))
    rc = ACC_ERR_REMOTE;
  return fail(rc, "gloo backend: %s (collective #%llu) failed on rank %d of %d: %s", what,
              (unsigned long long)be->op_seq, be->rank, be->size, m);
}

// Element-wise reduction of (dtype, op) through the library's reduce_inplace.
gloo::AllreduceOptions::Func reducer(acc_dtype dtype, acc_op op) {
  return [dtype, op](void *c, const void *a, const void *b, size_t n) {
    size_t es = dtype == ACC_F64 || dtype == ACC_I64 ? 8
                : dtype == ACC_F32 || dtype == ACC_I32 ? 4
                : dtype == ACC_U8 ? 1
                                  : 2;
    if (c == b) {
      H->reduce_inplace(c, a, n, dtype, op);
    } else {
      if (c != a) memmove(c, a, n * es);
      H->reduce_inplace(c, b, n, dtype, op);
    }
  };
}

size_t esize(acc_dtype d) {
  switch (d) {
    case ACC_F64:
    case ACC_I64:
    case ACC_U64: return 8;
    case ACC_F32:
    case ACC_I32: return 4;
    case ACC_U8: return 1;
    default: return 2;
  }
}

// The exchange is a barrier: every rank waits for every rank's message.
acc_result op_barrier(acc__backend *be) { return hx(self(be), nullptr, 0, -1, true); }

// Pieces of a run of n elements of es bytes: at most `most`, each at least `least` bytes (the
// last may be shorter), the same on every rank for the same n.
void cut(size_t n, size_t es, size_t least, size_t most, size_t *np, size_t *ps) {
  size_t k = (n * es + least - 1) / least;
  if (k > most) k = most;
  if (k < 1) k = 1;
  size_t each = (n + k - 1) / k;
  while (k > 1 && (k - 1) * each >= n) k--;
  *np = k;
  *ps = each;
}

// A broadcast past the exchange (2 processes from kDirect on; more processes when it is too
// large to ride in it): a binomial tree over the ranks counted from the root, the farthest child
// first (two machines of K processes each, ranks placed by machine: the root's first send
// crosses, then each machine proceeds on its own), every rank's receives from its parent posted
// before its header (see direct()). With more than 2 processes the data moves in pieces of about
// kPiece (at most kPieces), so a rank forwards piece p while p + 1 arrives.
acc_result broadcast_tree(GlooBe *g, void *buf, size_t nbytes, int root) {
  const int n = g->base.size, v = (g->base.rank - root + n) % n;
  const int low = v ? (v & -v) : INT_MAX; /* children are v + m for the powers of 2 m < low */
  const int parent = v ? (v - low + root) % n : -1;
  std::vector<int> kids;
  int top = 1;
  while (top * 2 < n) top *= 2;
  for (int m = top; m >= 1; m >>= 1)
    if (m < low && v + m < n) kids.push_back((v + m + root) % n);
  size_t np, ps;
  cut(nbytes, 1, kPiece, n > 2 ? kPieces : 1, &np, &ps);
  auto len = [&](size_t p) { return p + 1 < np ? ps : nbytes - p * ps; };
  const uint64_t seq = g->hseq + 1; /* the number hx gives this exchange */
  const int me = g->base.rank;
  // the receive from the parent, and the sends on each lane (to higher and to lower ranks)
  std::unique_ptr<gloo::transport::UnboundBuffer> in, up, down;
  auto to = [&](int k) -> std::unique_ptr<gloo::transport::UnboundBuffer> & {
    return k > me ? up : down; // the send buffer for child k
  };
  try {
    if (parent >= 0) {
      in = lane(g, parent, me)->createUnboundBuffer(buf, nbytes);
      for (size_t p = 0; p < np; p++) in->recv(parent, dslot(seq, p), p * ps, len(p));
    }
    for (int k : kids)
      if (!to(k)) to(k) = lane(g, me, k)->createUnboundBuffer(buf, nbytes);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "broadcast", e);
  }
  // The next exchange's receives are posted in this one's (a broadcast's data moves one way:
  // posting them only after it was measured slower, at 4 MiB between the leaders of 2 machines)
  ACC_CHECK(hx(g, nullptr, 0, -1, true));
  try {
    for (size_t p = 0; p < np; p++) {
      if (in) in->waitRecv(g->timeout); /* pieces arrive in order: this is piece p */
      for (int k : kids) to(k)->send(k, dslot(seq, p), p * ps, len(p));
    }
    for (size_t p = 0; p < np; p++)
      for (int k : kids) to(k)->waitSend(g->timeout);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "broadcast", e);
  }
  return ACC_OK;
}

acc_result op_broadcast(acc__backend *be, void *buf, size_t nbytes, int root) {
  GlooBe *g = self(be);
  // Only the root's messages carry data, one copy per peer: the broadcast rides in the exchange
  // whenever it fits one message (a 64 KiB broadcast over 4 processes: one step, where the tree
  // after a header-only exchange took three).
  if (direct(g, nbytes) || nbytes > g->cap) return broadcast_tree(g, buf, nbytes, root);
  ACC_CHECK(hx(g, buf, be->rank == root ? nbytes : 0, -1, true));
  if (be->rank != root) memcpy(buf, hpayload(g, root), nbytes);
  return ACC_OK;
}

// Typed buffers: gloo keeps the element size of the pointer type; the reducer knows the dtype.
template <typename T>
void set_io(gloo::AllreduceOptions &o, const void *send, void *recv, size_t count) {
  if (send != recv) o.setInput(static_cast<T *>(const_cast<void *>(send)), count);
  o.setOutput(static_cast<T *>(recv), count);
}

// The small all_reduce / reduce / reduce_scatter: every rank's `count` elements at byte offset
// `off` of its message, reduced in rank order into out.
void reduce_messages(GlooBe *g, void *out, size_t off, size_t count, acc_dtype dt, acc_op op) {
  size_t es = esize(dt);
  memcpy(out, hpayload(g, 0) + off, count * es);
  for (int r = 1; r < g->base.size; r++) H->reduce_inplace(out, hpayload(g, r) + off, count, dt, op);
}

// all_reduce between 2 processes past the exchange, as direct transfers (see direct()): rank 0
// reduces the first half of the elements, rank 1 the second. Each rank posts, before its header,
// the receives of the peer's share of its own half (into scratch) and of the peer's reduced half
// (into recv); once the tags matched it sends its share of the peer's half, then reduces its own
// half piece by piece as the peer's share arrives and sends each reduced piece on, so the
// transfers and the reductions overlap. In place (send == recv) the peer's reduced piece p lands
// where this rank's share of it was sent from: the peer sends it only after it received all of
// that share, so its bytes had all left this buffer. Both ranks end with the same bits (each
// half is reduced on one rank only).
constexpr size_t kArPiece = 1024 * 1024, kArPieces = 32; // pieces of each half; slots p and 32 + p
acc_result all_reduce_pair(GlooBe *g, const void *send, void *recv, size_t count, acc_dtype dt,
                           acc_op op) {
  const int me = g->base.rank, peer = 1 - me;
  const size_t es = esize(dt), h0 = count / 2;
  const size_t mlo = me ? h0 : 0, mn = me ? count - h0 : h0; /* this rank's half */
  const size_t plo = me ? 0 : h0, pn = me ? h0 : count - h0; /* the peer's */
  size_t mnp, mps, pnp, pps;
  cut(mn, es, kArPiece, kArPieces, &mnp, &mps);
  cut(pn, es, kArPiece, kArPieces, &pnp, &pps);
  auto mlen = [&](size_t p) { return (p + 1 < mnp ? mps : mn - p * mps) * es; };
  auto plen = [&](size_t p) { return (p + 1 < pnp ? pps : pn - p * pps) * es; };
  char *r = static_cast<char *>(recv);
  char *snd = static_cast<char *>(const_cast<void *>(send));
  const uint64_t seq = g->hseq + 1;
  NextPost later(g, true);
  std::unique_ptr<gloo::transport::UnboundBuffer> share, back, out, mine;
  try {
    if (g->scratch.size() < mn * es) g->scratch.resize(mn * es);
    share = lane(g, peer, me)->createUnboundBuffer(g->scratch.data(), mn * es);
    back = lane(g, peer, me)->createUnboundBuffer(r + plo * es, pn * es);
    for (size_t p = 0; p < mnp; p++) share->recv(peer, dslot(seq, p), p * mps * es, mlen(p));
    for (size_t p = 0; p < pnp; p++) back->recv(peer, dslot(seq, kArPieces + p), p * pps * es, plen(p));
  } catch (const std::bad_alloc &) {
    return fail(ACC_ERR_NOMEM, "gloo backend: all_reduce (collective #%llu): out of memory for "
                               "%zu bytes of scratch",
                (unsigned long long)g->base.op_seq, mn * es);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "all_reduce", e);
  }
  ACC_CHECK(hx(g, nullptr, 0, -1, false));
  try {
    out = lane(g, me, peer)->createUnboundBuffer(snd + plo * es, pn * es);
    for (size_t p = 0; p < pnp; p++) out->send(peer, dslot(seq, p), p * pps * es, plen(p));
    if (send != recv) memcpy(r + mlo * es, snd + mlo * es, mn * es);
    mine = lane(g, me, peer)->createUnboundBuffer(r + mlo * es, mn * es);
    for (size_t p = 0; p < mnp; p++) {
      share->waitRecv(g->timeout); /* pieces arrive in order: this is piece p */
      H->reduce_inplace(r + (mlo + p * mps) * es, g->scratch.data() + p * mps * es, mlen(p) / es, dt, op);
      mine->send(peer, dslot(seq, kArPieces + p), p * mps * es, mlen(p));
    }
    for (size_t p = 0; p < pnp; p++) back->waitRecv(g->timeout);
    for (size_t p = 0; p < pnp; p++) out->waitSend(g->timeout);
    for (size_t p = 0; p < mnp; p++) mine->waitSend(g->timeout);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "all_reduce", e);
  }
  return ACC_OK;
}

acc_result op_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                         acc_dtype dtype, acc_op op) {
  GlooBe *g = self(be);
  size_t bytes = count * esize(dtype);
  bool in = small(g, bytes);
  if (!in && be->size == 2 && bytes >= g->pair_min)
    return all_reduce_pair(g, send, recv, count, dtype, op);
  NextPost later(g, !in);
  ACC_CHECK(hx(g, send, in ? bytes : 0, -1, in));
  if (in) { /* send is in this rank's message: recv may be send */
    reduce_messages(g, recv, 0, count, dtype, op);
    return ACC_OK;
  }
  try {
    gloo::AllreduceOptions o(g->ctx);
    switch (esize(dtype)) {
      case 8: set_io<uint64_t>(o, send, recv, count); break;
      case 4: set_io<uint32_t>(o, send, recv, count); break;
      case 2: set_io<uint16_t>(o, send, recv, count); break;
      default: set_io<uint8_t>(o, send, recv, count); break;
    }
    o.setReduceFunction(reducer(dtype, op));
    o.setTag(++g->tag);
    o.setTimeout(g->timeout);
    gloo::allreduce(o);
  } catch (const std::exception &e) {
    return gloo_error(be, "all_reduce", e);
  }
  return ACC_OK;
}

template <typename T>
void set_rio(gloo::ReduceOptions &o, const void *send, void *out, size_t count) {
  o.setInput(static_cast<T *>(const_cast<void *>(send)), count);
  o.setOutput(static_cast<T *>(out), count);
}

acc_result op_reduce(acc__backend *be, const void *send, void *recv, size_t count, acc_dtype dtype,
                     acc_op op, int root) {
  GlooBe *g = self(be);
  size_t es = esize(dtype);
  bool in = small(g, count * es);
  NextPost later(g, !in);
  ACC_CHECK(hx(g, send, in ? count * es : 0, root, in));
  if (in) {
    if (be->rank == root) reduce_messages(g, recv, 0, count, dtype, op);
    return ACC_OK;
  }
  // gloo's reduce wants an output on every rank: non-roots reduce into scratch.
  void *out = recv;
  if (be->rank != root) {
    if (g->scratch.size() < count * es) g->scratch.resize(count * es);
    out = g->scratch.data();
  }
  try {
    gloo::ReduceOptions o(g->ctx);
    switch (es) {
      case 8: set_rio<uint64_t>(o, send, out, count); break;
      case 4: set_rio<uint32_t>(o, send, out, count); break;
      case 2: set_rio<uint16_t>(o, send, out, count); break;
      default: set_rio<uint8_t>(o, send, out, count); break;
    }
    o.setRoot(root);
    o.setReduceFunction(reducer(dtype, op));
    o.setTag(++g->tag);
    o.setTimeout(g->timeout);
    gloo::reduce(o);
  } catch (const std::exception &e) {
    return gloo_error(be, "reduce", e);
  }
  return ACC_OK;
}

// A direct all_gather between 2 processes (see direct()): the peer's block lands in place, at
// recv + peer * stride.
acc_result all_gather_direct(GlooBe *g, const void *send, uint8_t *recv, size_t nbytes,
                             size_t stride) {
  const int me = g->base.rank, peer = 1 - me;
  const uint64_t slot = dslot(g->hseq + 1, 0);
  std::unique_ptr<gloo::transport::UnboundBuffer> in, out;
  try {
    in = lane(g, peer, me)->createUnboundBuffer(recv + (size_t)peer * stride, nbytes);
    in->recv(peer, slot, 0, nbytes);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "all_gather", e);
  }
  // the next exchange's receives posted in this one, as for a broadcast (posting them after the
  // data was slower between the leaders of 2 machines at 256 KiB a process)
  ACC_CHECK(hx(g, nullptr, 0, -1, true));
  try {
    out = lane(g, me, peer)->createUnboundBuffer(const_cast<void *>(send), nbytes);
    out->send(peer, slot, 0, nbytes);
    // this rank's own block while the peer's arrives (memmove: send may overlap it)
    if (send != recv + (size_t)me * stride) memmove(recv + (size_t)me * stride, send, nbytes);
    in->waitRecv(g->timeout);
    out->waitSend(g->timeout);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "all_gather", e);
  }
  return ACC_OK;
}

// all_gather with rank k's block at recv + k * stride (stride >= nbytes): the backend's
// all_gather (stride nbytes), and the hierarchical backend's pipeline pieces, which land in
// place in the program's buffer instead of passing through a scratch buffer there.
acc_result all_gather_at(GlooBe *g, const void *send, void *recv, size_t nbytes, size_t stride) {
  const int me = g->base.rank, n = g->base.size;
  uint8_t *r = static_cast<uint8_t *>(recv);
  if (direct(g, nbytes)) return all_gather_direct(g, send, r, nbytes, stride);
  bool in = small(g, nbytes);
  NextPost later(g, !in);
  ACC_CHECK(hx(g, send, in ? nbytes : 0, -1, in));
  if (in) {
    for (int k = 0; k < n; k++) memmove(r + (size_t)k * stride, hpayload(g, k), nbytes);
    return ACC_OK;
  }
  // gloo's own all_gather wants one run of blocks: a strided output is gathered in scratch
  uint8_t *run = r;
  try {
    if (stride != nbytes) {
      if (g->scratch.size() < nbytes * (size_t)n) g->scratch.resize(nbytes * (size_t)n);
      run = reinterpret_cast<uint8_t *>(g->scratch.data());
    }
    gloo::AllgatherOptions o(g->ctx);
    // in place when send is this rank's block of the output
    if (send != run + (size_t)me * nbytes)
      o.setInput(static_cast<uint8_t *>(const_cast<void *>(send)), nbytes);
    o.setOutput(run, nbytes * (size_t)n);
    o.setTag(++g->tag);
    o.setTimeout(g->timeout);
    gloo::allgather(o);
  } catch (const std::bad_alloc &) {
    return fail(ACC_ERR_NOMEM, "gloo backend: all_gather (collective #%llu): out of memory for "
                               "%zu bytes of scratch",
                (unsigned long long)g->base.op_seq, nbytes * (size_t)n);
  } catch (const std::exception &e) {
    return gloo_error(&g->base, "all_gather", e);
  }
  if (run != r)
    for (int k = 0; k < n; k++)
      if (k != me || send != r + (size_t)me * stride)
        memcpy(r + (size_t)k * stride, run + (size_t)k * nbytes, nbytes);
  return ACC_OK;
}

acc_result op_all_gather(acc__backend *be, const void *send, void *recv, size_t nbytes) {
  return all_gather_at(self(be), send, recv, nbytes, nbytes);
}

acc_result op_all_gather_strided(acc__backend *be, const void *send, void *recv, size_t nbytes,
                                 size_t stride) {
  return all_gather_at(self(be), send, recv, nbytes, stride);
}

acc_result op_gather(acc__backend *be, const void *send, void *recv, size_t nbytes, int root) {
  GlooBe *g = self(be);
  bool in = small(g, nbytes);
  NextPost later(g, !in);
  ACC_CHECK(hx(g, send, in ? nbytes : 0, root, in));
  if (in) {
    if (be->rank == root)
      for (int r = 0; r < be->size; r++)
        memmove(static_cast<uint8_t *>(recv) + (size_t)r * nbytes, hpayload(g, r), nbytes);
    return ACC_OK;
  }
  try {
    gloo::GatherOptions o(g->ctx);
    o.setInput(static_cast<uint8_t *>(const_cast<void *>(send)), nbytes);
    if (be->rank == root) o.setOutput(static_cast<uint8_t *>(recv), nbytes * (size_t)be->size);
    o.setRoot(root);
    o.setTag(++g->tag);
    o.setTimeout(g->timeout);
    gloo::gather(o);
  } catch (const std::exception &e) {
    return gloo_error(be, "gather", e);
  }
  return ACC_OK;
}

acc_result op_all_gather_v(acc__backend *be, const void *send, void *recv, const size_t *sizes) {
  GlooBe *g = self(be);
  std::vector<size_t> counts(sizes, sizes + be->size);
  size_t total = 0, most = 0;
  for (size_t c : counts) total += c, most = c > most ? c : most;
  bool in = small(g, most);
  NextPost later(g, !in && total != 0);
  ACC_CHECK(hx(g, send, in ? sizes[be->rank] : 0, -1, in || total == 0));
  if (total == 0) return ACC_OK;
  if (in) {
    size_t at = 0;
    for (int r = 0; r < be->size; r++) {
      memmove(static_cast<uint8_t *>(recv) + at, hpayload(g, r), sizes[r]);
      at += sizes[r];
    }
    return ACC_OK;
  }
  try {
    gloo::AllgathervOptions o(g->ctx);
    static uint8_t empty;
    const void *in = sizes[be->rank] ? send : &empty;
    o.setInput(static_cast<uint8_t *>(const_cast<void *>(in)), sizes[be->rank]);
    o.setOutput(static_cast<uint8_t *>(recv), counts);
    o.setTag(++g->tag);
    o.setTimeout(g->timeout);
    gloo::allgatherv(o);
  } catch (const std::exception &e) {
    return gloo_error(be, "all_gather_v", e);
  }
  return ACC_OK;
}

// reduce_scatter through gloo's ReduceScatterHalvingDoubling (what PyTorch's gloo process group
// runs). The algorithm reduces its buffer in place and leaves this rank's block at its start,
// and it counts in int: the blocks are packed into scratch in pieces of at most 256 MiB in all,
// so the caller's send buffer stays untouched and any count works. Its reduction is the
// library's own (reduce_inplace), so every dtype and op reduces as in the other backends.
template <typename T, acc_dtype D, acc_op O>
void rs_fn(T *x, const T *y, size_t n) {
  H->reduce_inplace(x, y, n, D, O);
}

template <typename T, acc_dtype D>
const gloo::ReductionFunction<T> *rs_red(acc_op op) {
  static const gloo::ReductionFunction<T> sum(gloo::CUSTOM, &rs_fn<T, D, ACC_SUM>);
  static const gloo::ReductionFunction<T> mn(gloo::CUSTOM, &rs_fn<T, D, ACC_MIN>);
  static const gloo::ReductionFunction<T> mx(gloo::CUSTOM, &rs_fn<T, D, ACC_MAX>);
  return op == ACC_MIN ? &mn : op == ACC_MAX ? &mx : &sum;
}

template <typename T, acc_dtype D>
void rs_run(GlooBe *g, const void *send, void *recv, size_t count, acc_op op) {
  const size_t n = (size_t)g->base.size, es = sizeof(T);
  const size_t piece_max = (256u << 20) / (es * n) > 0 ? (256u << 20) / (es * n) : 1;
  const char *s = static_cast<const char *>(send);
  char *r = static_cast<char *>(recv);
  size_t piece = count < piece_max ? count : piece_max;
  if (g->scratch.size() < piece * n * es) g->scratch.resize(piece * n * es);
  T *buf = reinterpret_cast<T *>(g->scratch.data());
  // recv may be this rank's block of send (in place): piece p of it is written only after
  // every piece before it was packed, and no later piece reads it.
  for (size_t off = 0; off < count; off += piece) {
    size_t c = count - off < piece ? count - off : piece;
    for (size_t b = 0; b < n; b++)
      memcpy(reinterpret_cast<char *>(buf) + b * c * es, s + (b * count + off) * es, c * es);
    std::vector<T *> ptrs{buf};
    std::vector<int> elems(n, (int)c);
    gloo::ReduceScatterHalvingDoubling<T> algo(g->ctx, ptrs, (int)(c * n), elems, rs_red<T, D>(op));
    algo.run();
    memcpy(r + off * es, buf, c * es);
  }
}

acc_result op_reduce_scatter(acc__backend *be, const void *send, void *recv, size_t count,
                             acc_dtype dtype, acc_op op) {
  GlooBe *g = self(be);
  size_t es = esize(dtype), all = count * es * (size_t)be->size;
  bool in = small(g, all);
  NextPost later(g, !in);
  ACC_CHECK(hx(g, send, in ? all : 0, -1, in));
  if (in) { /* recv may be this rank's block of send, which is in this rank's message */
    reduce_messages(g, recv, (size_t)be->rank * count * es, count, dtype, op);
    return ACC_OK;
  }
  try {
    switch (dtype) {
      case ACC_F32: rs_run<uint32_t, ACC_F32>(g, send, recv, count, op); break;
      case ACC_F64: rs_run<uint64_t, ACC_F64>(g, send, recv, count, op); break;
      case ACC_F16: rs_run<uint16_t, ACC_F16>(g, send, recv, count, op); break;
      case ACC_BF16: rs_run<uint16_t, ACC_BF16>(g, send, recv, count, op); break;
      case ACC_I32: rs_run<uint32_t, ACC_I32>(g, send, recv, count, op); break;
      case ACC_I64: rs_run<uint64_t, ACC_I64>(g, send, recv, count, op); break;
      case ACC_U8: rs_run<uint8_t, ACC_U8>(g, send, recv, count, op); break;
      case ACC_U64: rs_run<uint64_t, ACC_U64>(g, send, recv, count, op); break;
      default:
        return fail(ACC_ERR_INVALID_ARGUMENT, "gloo backend: reduce_scatter: unknown dtype %d",
                    (int)dtype);
    }
  } catch (const std::bad_alloc &) {
    return fail(ACC_ERR_NOMEM, "gloo backend: reduce_scatter (collective #%llu): out of memory "
                               "for %zu elements per rank",
                (unsigned long long)be->op_seq, count);
  } catch (const std::exception &e) {
    return gloo_error(be, "reduce_scatter", e);
  }
  return ACC_OK;
}

void op_destroy(acc__backend *be) {
  GlooBe *g = self(be);
  try {
    for (auto &b : g->outb) b.reset();
    for (auto &v : g->inb) v.clear();
    g->ctx2.reset();
    g->ctx.reset();
    g->dev.reset();
  } catch (...) {
  }
  delete g;
}

const acc__backend_ops gloo_ops = {
    "gloo",        op_barrier, op_broadcast, op_all_reduce, op_reduce, op_all_gather, op_gather,
    op_all_gather_v, op_destroy, nullptr, 1, op_reduce_scatter, nullptr, nullptr, nullptr,
    nullptr,  // no subgroups: HYBRID across machines needs the hierarchical backend
    op_all_gather_strided,
};

}  // namespace

extern "C" acc_result acc__backend_gloo_create(acc__backend **out, const acc__proc_info *info,
                                               const char *prefix) {
  *out = nullptr;
  if (!info->store)
    return fail(ACC_ERR_INVALID_ARGUMENT,
                "gloo backend: no rendezvous store (the job was not joined through "
                "MASTER_ADDR/MASTER_PORT)");
  char addr[128] = "";
  if (H->store_local_addr(info->store, addr, sizeof addr) != 0)
    return fail(ACC_ERR_SYSTEM, "gloo backend: cannot read the local address of the store "
                                "connection");
  // gloo's TCP pairs write with writev, without MSG_NOSIGNAL: a write to a peer that died raises
  // SIGPIPE, whose default action ends this process before the write's error reaches us (and
  // with it the sentence naming the lost peer). Python (so PyTorch's gloo) ignores SIGPIPE from
  // its start; we do the same, but only where the program left SIGPIPE at its default: a handler
  // the program installed stays (docs/backends.md).
  struct sigaction old_pipe;
  if (sigaction(SIGPIPE, nullptr, &old_pipe) == 0 && !(old_pipe.sa_flags & SA_SIGINFO) &&
      old_pipe.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  GlooBe *g = new (std::nothrow) GlooBe();
  if (!g) return ACC_ERR_NOMEM;
  g->base.ops = &gloo_ops;
  g->base.rank = info->rank;
  g->base.size = info->size;
  long pair = 0;
  int pair_set = 0;
  if (H->env_int("ACCELERATE_GLOO_PAIR_BYTES", &pair, &pair_set) != ACC_OK) {
    delete g;
    return ACC_ERR_INVALID_ARGUMENT;
  }
  if (pair_set) g->pair_min = (uint64_t)pair;
  double t = info->timeout_s > 0 ? info->timeout_s : 1800.0;
  g->timeout = std::chrono::milliseconds((long long)(t * 1000.0));
  try {
    gloo::transport::tcp::attr attr(addr);
    g->dev = gloo::transport::tcp::CreateDevice(attr);
    g->ctx = std::make_shared<gloo::rendezvous::Context>(info->rank, info->size);
    g->ctx->setTimeout(g->timeout);
    AccStore store(info->store, t);
    gloo::rendezvous::PrefixStore ps(prefix ? prefix : "gloo", store);
    g->ctx->connectFullMesh(ps, g->dev);
    g->ctx2 = std::make_shared<gloo::rendezvous::Context>(info->rank, info->size);
    g->ctx2->setTimeout(g->timeout);
    gloo::rendezvous::PrefixStore ps2(std::string(prefix ? prefix : "gloo") + "/lane2", store);
    g->ctx2->connectFullMesh(ps2, g->dev);
    // the header exchanges' buffers, and the receives of the first
    g->cap = info->size == 2 ? kInline2 : kInline;
    const size_t n = (size_t)info->size, cap = kHdr + g->cap;
    g->hout.reset(new char[cap]);
    g->outb[0] = g->ctx->createUnboundBuffer(g->hout.get(), cap);
    g->outb[1] = g->ctx2->createUnboundBuffer(g->hout.get(), cap);
    for (int p = 0; p < 2; p++) {
      g->hin[p].reset(new char[n * cap]);
      g->inb[p].resize(n);
      for (size_t r = 0; r < n; r++)
        g->inb[p][r] =
            lane(g, (int)r, info->rank)->createUnboundBuffer(g->hin[p].get() + r * cap, cap);
    }
    hx_post(g, 1);
  } catch (const std::exception &e) {
    acc_result rc = fail(ACC_ERR_REMOTE,
                         "gloo backend: rank %d of %d could not connect to its peers (local "
                         "address %s): %s",
                         info->rank, info->size, addr, e.what());
    delete g;
    return rc;
  }
  *out = &g->base;
  return ACC_OK;
}
