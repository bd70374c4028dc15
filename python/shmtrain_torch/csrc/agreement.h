// What every rank's call must agree on (its size, dtype, op and
// collective), as one number, checked by one all-reduce on every rank: a
// rank whose call differs is refused on every rank, as gloo refuses one,
// never left with partial results; and the name of the job's segments,
// agreed through the group's Store.
//
// Ownership: nothing kept; the group is the caller's.
#ifndef SHMTRAIN_TORCH_AGREEMENT_H
#define SHMTRAIN_TORCH_AGREEMENT_H

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>

extern "C" {
#include "shmtrain/coll.h"
}

namespace shmtrain {

inline uint64_t call_signature(const at::Tensor &t, st_dtype type, st_reduce_op op)
{
    return ((uint64_t)t.numel() << 8) | ((uint64_t)type << 4) | (uint64_t)op;
}

// True on every rank when every rank of the group passed the same `sig`,
// false on every rank otherwise; a failed exchange (a dead peer) raises
// DistBackendError naming `what`.
bool ranks_agree(st_group *g, int world, uint64_t sig, const char *what);

// Rank 0 names the job's segments under this incarnation's number (a
// counter every rank adds to: each incarnation takes world numbers, so
// all its ranks read the same one); the others read the name.
std::string job_of_incarnation(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size);

}  // namespace shmtrain

#endif
