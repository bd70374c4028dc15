// The reductions the library does not do, done as gloo does them, so that a
// script written for gloo runs on shm unchanged: PRODUCT of any dtype, the
// bitwise ops (BAND, BOR, BXOR) of integers and bool, and every op of
// int8, uint8, int16 and bool (a flag or a mask: "has any rank stopped?").
// Every rank's tensor is gathered and folded in rank order, on every rank,
// so every rank holds the same bits.  A rank then holds world x the
// tensor's bytes: these are flags, masks and counters, rarely large, and
// the library's own paths keep every dtype and op they take.  AVG of
// integers or bool, bitwise ops of floats and PREMUL_SUM are refused by
// name, as gloo refuses them.
//
// Ownership: nothing kept; tensors and the group are the caller's.
#ifndef SHMTRAIN_TORCH_GATHERED_H
#define SHMTRAIN_TORCH_GATHERED_H

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>

extern "C" {
#include "shmtrain/coll.h"
}

namespace shmtrain {

enum class ReduceRoute { library, gathered };

// Which path reduces `type` with `op`; a refusal naming `what`, the op
// and the dtype where neither does.  Called in the caller's thread.
ReduceRoute route_of(at::ScalarType type, const c10d::ReduceOp &op, const char *what);

// What the ranks agree on for a gathered call: the count, dtype and op,
// never equal to a library call's signature (agreement.h).
uint64_t gathered_signature(const at::Tensor &t, const c10d::ReduceOp &op);

// all_reduce: t (contiguous) becomes the fold of every rank's t.
void all_reduce_gathered(st_group *g, int world, at::Tensor &t, const c10d::ReduceOp &op, const char *what);

// reduce_scatter: out (contiguous, n elements) becomes the fold of block
// `rank` of every rank's in (contiguous, world x n), each block sent only
// to the rank that folds it.
void reduce_scatter_gathered(st_group *g, int world, at::Tensor &out, const at::Tensor &in,
                             const c10d::ReduceOp &op, const char *what);

}  // namespace shmtrain

#endif
