// Reductions gathered and folded in rank order (gathered.h).
#include "gathered.h"

#include "alltoall.h"
#include "tensors.h"

namespace shmtrain {

static bool library_dtype(at::ScalarType type)
{
    switch (type) {
    case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf: case at::kInt: case at::kLong:
        return true;
    default:
        return false;
    }
}

static bool folded_dtype(at::ScalarType type)
{
    return library_dtype(type) || type == at::kChar || type == at::kByte || type == at::kShort ||
           type == at::kBool;
}

ReduceRoute route_of(at::ScalarType type, const c10d::ReduceOp &op, const char *what)
{
    TORCH_CHECK(folded_dtype(type), "shm backend: ", what, " of ", type, " is not supported (float32, float64, "
                "bfloat16, float16, int8, uint8, int16, int32, int64, bool)");
    switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::MAX:
    case c10d::ReduceOp::MIN:
        return library_dtype(type) ? ReduceRoute::library : ReduceRoute::gathered;
    case c10d::ReduceOp::AVG:
        TORCH_CHECK(at::isFloatingType(type), "shm backend: ", what, " with reduce op AVG of ", type,
                    " is not supported (floating types only: SUM, then divide)");
        return ReduceRoute::library;
    case c10d::ReduceOp::PRODUCT:
        return ReduceRoute::gathered;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        TORCH_CHECK(at::isIntegralType(type, /*includeBool=*/true), "shm backend: ", what, " with reduce op ",
                    op_name(op), " of ", type, " is not supported (integers and bool only)");
        return ReduceRoute::gathered;
    default:
        TORCH_CHECK(false, "shm backend: ", what, " with reduce op ", op_name(op),
                    " is not supported (SUM, AVG, MAX, MIN, PRODUCT, BAND, BOR, BXOR)");
    }
}

// A library call's layout (agreement.h), the element count above bit 8
// where the refusal reads it, with bit 7 set (a library call's dtype and
// op stay below it), the dtype's place in this list and the op below.
uint64_t gathered_signature(const at::Tensor &t, const c10d::ReduceOp &op)
{
    static const at::ScalarType kinds[] = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kChar,
                                           at::kByte,  at::kShort,  at::kInt,      at::kLong, at::kBool};
    uint64_t kind = 0;
    while (kind < sizeof kinds / sizeof *kinds && kinds[kind] != t.scalar_type())
        kind++;
    return ((uint64_t)t.numel() << 8) | 0x80 | (kind << 3) | ((uint64_t)op.op_ & 7);
}

// acc = acc op row, as gloo's: integers wrap, bool's SUM and MAX are OR,
// its PRODUCT and MIN are AND.
static void fold(at::Tensor &acc, const at::Tensor &row, const c10d::ReduceOp &op)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM: acc.add_(row); break;
    case c10d::ReduceOp::PRODUCT: acc.mul_(row); break;
    case c10d::ReduceOp::MAX: at::maximum_out(acc, acc, row); break;
    case c10d::ReduceOp::MIN: at::minimum_out(acc, acc, row); break;
    case c10d::ReduceOp::BAND: acc.bitwise_and_(row); break;
    case c10d::ReduceOp::BOR: acc.bitwise_or_(row); break;
    case c10d::ReduceOp::BXOR: acc.bitwise_xor_(row); break;
    default: TORCH_CHECK(false, "shm backend: no fold for reduce op ", op_name(op));  // route_of passed it
    }
}

// out = rows[0] op rows[1] op ... in rank order: every rank the same bits.
static void fold_rows(const at::Tensor &rows, at::Tensor &out, const c10d::ReduceOp &op)
{
    out.copy_(rows[0]);
    for (int64_t q = 1; q < rows.size(0); q++)
        fold(out, rows[q], op);
}

void all_reduce_gathered(st_group *g, int world, at::Tensor &t, const c10d::ReduceOp &op, const char *what)
{
    at::Tensor flat = t.view({-1});
    at::Tensor rows = at::empty({world, flat.numel()}, t.options());
    if (flat.numel() > 0)  // the ranks agreed on the count: all skip alike
        check(st_allgather(g, flat.data_ptr(), rows.data_ptr(), (size_t)flat.nbytes()), what);
    fold_rows(rows, flat, op);
}

void reduce_scatter_gathered(st_group *g, int world, at::Tensor &out, const at::Tensor &in,
                             const c10d::ReduceOp &op, const char *what)
{
    at::Tensor flat = out.view({-1});
    at::Tensor rows = at::empty({world, flat.numel()}, out.options());
    if (flat.numel() > 0)
        run_alltoall(g, blocks_of_splits(rows, in.view({world, flat.numel()}), {}, {}, world), what);
    fold_rows(rows, flat, op);
}

}  // namespace shmtrain
