// PyTorch's tensors, dtypes and reduce ops as libshmtrain-coll's, and the
// refusals, by name, of what the library does not do; a failed library
// call as the DistBackendError PyTorch raises for a dead peer.
#ifndef SHMTRAIN_TORCH_TENSORS_H
#define SHMTRAIN_TORCH_TENSORS_H

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>

extern "C" {
#include "shmtrain/coll.h"
#include "shmtrain/status.h"
}

namespace shmtrain {

inline void check(st_status st, const char *what)
{
    if (st != ST_OK)
        C10_THROW_ERROR(DistBackendError, std::string("shm backend: ") + what + ": " + st_last_error());
}

// The library's element type for a tensor's, or a refusal naming both.
inline st_dtype dtype_of(const at::Tensor &t, const char *what)
{
    switch (t.scalar_type()) {
    case at::kFloat: return ST_DTYPE_F32;
    case at::kBFloat16: return ST_DTYPE_BF16;
    case at::kHalf: return ST_DTYPE_F16;
    case at::kInt: return ST_DTYPE_I32;
    case at::kLong: return ST_DTYPE_I64;
    case at::kDouble: return ST_DTYPE_F64;
    default:
        TORCH_CHECK(false, "shm backend: ", what, " of ", t.scalar_type(),
                    " is not supported (float32, float64, bfloat16, float16, int32, int64)");
    }
}

inline const char *op_name(const c10d::ReduceOp &op)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown op";
    }
}

inline st_reduce_op op_of(const c10d::ReduceOp &op, const char *what)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM: return ST_SUM;
    case c10d::ReduceOp::AVG: return ST_AVG;
    case c10d::ReduceOp::MAX: return ST_MAX;
    case c10d::ReduceOp::MIN: return ST_MIN;
    default:
        TORCH_CHECK(false, "shm backend: ", what, " with reduce op ", op_name(op),
                    " is not supported (SUM, AVG, MAX, MIN)");
    }
}

inline void check_cpu(const at::Tensor &t, const char *what)
{
    TORCH_CHECK(t.device().is_cpu(), "shm backend: ", what, " of a tensor on ", t.device(),
                ": shared memory reaches CPU tensors only");
}

// A contiguous tensor to work on: t itself, or a copy written back after.
inline at::Tensor dense(const at::Tensor &t) { return t.is_contiguous() ? t : t.contiguous(); }

inline void give_back(at::Tensor &t, const at::Tensor &worked)
{
    if (!worked.is_same(t))
        t.copy_(worked);
}

}  // namespace shmtrain

#endif
