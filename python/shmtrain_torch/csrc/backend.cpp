// The "shm" backend of torch.distributed: PyTorch's c10d::Backend interface
// over libshmtrain-coll (include/shmtrain/coll.h), which does the work.
// This file only translates: tensors to (pointer, count, dtype), PyTorch's
// ops to the library's, the library's failures to DistBackendError.
//
// Every collective completes before it returns (the library's calls are
// blocking), so a Work is born complete, its future holding the tensors.
// Ranks meet through the Store init_process_group gives this group: rank 0
// names the job's shared memory, the others read the name.  What the
// library does not do (point-to-point, all-to-all, products, bitwise ops,
// other dtypes) is refused by name, never approximated.
#include <pybind11/chrono.h>
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <unistd.h>

extern "C" {
#include "shmtrain/coll.h"
#include "shmtrain/status.h"
}

namespace shmtrain {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;

// A finished collective: complete, successful, its tensors in its future.
class ShmWork : public c10d::Work {
  public:
    ShmWork(OpType op, Tensors result)
        : c10d::Work(-1, op),
          future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get())))
    {
        future_->markCompleted(c10::IValue(result));
        finish();
    }
    bool isCompleted() override { return true; }
    bool isSuccess() const override { return true; }
    bool wait(std::chrono::milliseconds) override { return true; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  private:
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

static void check(st_status st, const char *what)
{
    if (st != ST_OK)
        C10_THROW_ERROR(DistBackendError, std::string("shm backend: ") + what + ": " + st_last_error());
}

// The library's element type for a tensor's, or a refusal naming both.
static st_dtype dtype_of(const at::Tensor &t, const char *what)
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

static st_reduce_op op_of(const c10d::ReduceOp &op, const char *what)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM: return ST_SUM;
    case c10d::ReduceOp::AVG: return ST_AVG;
    case c10d::ReduceOp::MAX: return ST_MAX;
    case c10d::ReduceOp::MIN: return ST_MIN;
    default: TORCH_CHECK(false, "shm backend: ", what, " with this reduce op is not supported (SUM, AVG, MAX, MIN)");
    }
}

static void check_cpu(const at::Tensor &t, const char *what)
{
    TORCH_CHECK(t.device().is_cpu(), "shm backend: ", what, " of a tensor on ", t.device(),
                ": shared memory reaches CPU tensors only");
}

// A contiguous tensor to work on: t itself, or a copy written back after.
static at::Tensor dense(const at::Tensor &t) { return t.is_contiguous() ? t : t.contiguous(); }

static void give_back(at::Tensor &t, const at::Tensor &worked)
{
    if (!worked.is_same(t))
        t.copy_(worked);
}

class ShmBackend : public c10d::Backend {
  public:
    ShmBackend(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size, std::chrono::duration<float> timeout)
        : c10d::Backend(rank, size)
    {
        job_ = meet(store, rank);
        st_group_config cfg{};
        cfg.rank = rank;
        cfg.world_size = size;
        cfg.job_id = job_.c_str();
        cfg.timeout_s = timeout.count() > 0 ? timeout.count() : 0;
        cfg.join_timeout_s = cfg.timeout_s;
        check(st_group_create(&g_, &cfg), "joining the group");
    }
    ~ShmBackend() override { st_group_destroy(g_); }

    const std::string getBackendName() const override { return "shm"; }

    c10::intrusive_ptr<c10d::Work> allreduce(Tensors &tensors, const c10d::AllreduceOptions &opts) override
    {
        for (auto &t : tensors)
            reduce_one(t, op_of(opts.reduceOp, "all_reduce"), "all_reduce");
        return c10::make_intrusive<ShmWork>(OpType::ALLREDUCE, tensors);
    }

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors &tensors,
                                                       const c10d::AllreduceCoalescedOptions &opts) override
    {
        for (auto &t : tensors)
            reduce_one(t, op_of(opts.reduceOp, "all_reduce_coalesced"), "all_reduce_coalesced");
        return c10::make_intrusive<ShmWork>(OpType::ALLREDUCE_COALESCED, tensors);
    }

    // Every rank reduces; only the root keeps the result (MPI's and gloo's contract).
    c10::intrusive_ptr<c10d::Work> reduce(Tensors &tensors, const c10d::ReduceOptions &opts) override
    {
        for (auto &t : tensors) {
            at::Tensor copy = t.clone(at::MemoryFormat::Contiguous);
            reduce_one(copy, op_of(opts.reduceOp, "reduce"), "reduce");
            if (getRank() == opts.rootRank)
                t.copy_(copy);
        }
        return c10::make_intrusive<ShmWork>(OpType::REDUCE, tensors);
    }

    c10::intrusive_ptr<c10d::Work> broadcast(Tensors &tensors, const c10d::BroadcastOptions &opts) override
    {
        for (auto &t : tensors) {
            check_cpu(t, "broadcast");
            at::Tensor d = dense(t);
            check(st_broadcast(g_, d.data_ptr(), d.nbytes(), (int)opts.rootRank), "broadcast");
            give_back(t, d);
        }
        return c10::make_intrusive<ShmWork>(OpType::BROADCAST, tensors);
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        check(st_barrier(g_), "barrier");
        return c10::make_intrusive<ShmWork>(OpType::BARRIER, Tensors{});
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors> &outputs, Tensors &inputs,
                                             const c10d::AllgatherOptions &) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: all_gather: one output list per input");
        for (size_t k = 0; k < inputs.size(); k++) {
            TORCH_CHECK((int)outputs[k].size() == getSize(), "shm backend: all_gather: ", outputs[k].size(),
                        " outputs for a world of ", getSize());
            at::Tensor flat = gather_into_new(inputs[k], "all_gather");
            for (int q = 0; q < getSize(); q++)
                outputs[k][q].copy_(flat[q].view_as(outputs[k][q]));
        }
        return c10::make_intrusive<ShmWork>(OpType::ALLGATHER, flat_list(outputs));
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &) override
    {
        gather_into(output, input, "all_gather_into_tensor");
        return c10::make_intrusive<ShmWork>(OpType::_ALLGATHER_BASE, Tensors{output});
    }

    c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(Tensors &outputs, Tensors &inputs,
                                                                   const c10d::AllgatherOptions &) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: all_gather_into_tensor_coalesced: sizes differ");
        for (size_t k = 0; k < inputs.size(); k++)
            gather_into(outputs[k], inputs[k], "all_gather_into_tensor_coalesced");
        return c10::make_intrusive<ShmWork>(OpType::COALESCED, outputs);
    }

    // Every rank gathers; the root keeps the pieces.
    c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors> &outputs, Tensors &inputs,
                                          const c10d::GatherOptions &opts) override
    {
        TORCH_CHECK(inputs.size() == 1, "shm backend: gather takes one input tensor");
        at::Tensor flat = gather_into_new(inputs[0], "gather");
        if (getRank() == opts.rootRank) {
            TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == getSize(),
                        "shm backend: gather: the root needs one list of ", getSize(), " outputs");
            for (int q = 0; q < getSize(); q++)
                outputs[0][q].copy_(flat[q].view_as(outputs[0][q]));
        }
        return c10::make_intrusive<ShmWork>(OpType::GATHER, outputs.empty() ? Tensors{} : outputs[0]);
    }

    // The root's pieces broadcast whole; each rank keeps its own.
    c10::intrusive_ptr<c10d::Work> scatter(Tensors &outputs, std::vector<Tensors> &inputs,
                                           const c10d::ScatterOptions &opts) override
    {
        TORCH_CHECK(outputs.size() == 1, "shm backend: scatter takes one output tensor");
        at::Tensor &out = outputs[0];
        check_cpu(out, "scatter");
        at::Tensor all = at::empty({getSize(), out.numel()}, out.options());
        if (getRank() == opts.rootRank) {
            TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == getSize(),
                        "shm backend: scatter: the root needs one list of ", getSize(), " inputs");
            for (int q = 0; q < getSize(); q++)
                all[q].copy_(inputs[0][q].reshape({-1}));
        }
        check(st_broadcast(g_, all.data_ptr(), all.nbytes(), (int)opts.rootRank), "scatter");
        out.copy_(all[getRank()].view_as(out));
        return c10::make_intrusive<ShmWork>(OpType::SCATTER, outputs);
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors &outputs, std::vector<Tensors> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: reduce_scatter: one input list per output");
        for (size_t k = 0; k < outputs.size(); k++) {
            TORCH_CHECK((int)inputs[k].size() == getSize(), "shm backend: reduce_scatter: ", inputs[k].size(),
                        " inputs for a world of ", getSize());
            at::Tensor flat = at::stack(inputs[k]).contiguous();
            scatter_into(outputs[k], flat, opts.reduceOp, "reduce_scatter");
        }
        return c10::make_intrusive<ShmWork>(OpType::REDUCE_SCATTER, outputs);
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                        const c10d::ReduceScatterOptions &opts) override
    {
        scatter_into(output, input, opts.reduceOp, "reduce_scatter_tensor");
        return c10::make_intrusive<ShmWork>(OpType::_REDUCE_SCATTER_BASE, Tensors{output});
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(Tensors &outputs, Tensors &inputs,
                                                                   const c10d::ReduceScatterOptions &opts) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: reduce_scatter_tensor_coalesced: sizes differ");
        for (size_t k = 0; k < outputs.size(); k++)
            scatter_into(outputs[k], inputs[k], opts.reduceOp, "reduce_scatter_tensor_coalesced");
        return c10::make_intrusive<ShmWork>(OpType::COALESCED, outputs);
    }

    // The library's SUM on t, with none of PyTorch's dispatch around it: for
    // bench/torch_allreduce.py, which times it beside dist.all_reduce on the
    // same tensor in the same process (the binding's own cost per call).
    void direct_sum(at::Tensor &t) { reduce_one(t, ST_SUM, "direct all_reduce"); }

    static c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                                                    const std::chrono::duration<float> &timeout)
    {
        return c10::make_intrusive<ShmBackend>(store, rank, size, timeout);
    }

  private:
    st_group *g_ = nullptr;
    std::string job_;

    // Rank 0 names the job's segments (this group's own Store prefix keeps
    // groups apart); the others read the name.
    static std::string meet(const c10::intrusive_ptr<c10d::Store> &store, int rank)
    {
        const std::string key = "shmtrain/job";
        if (rank == 0) {
            std::random_device rd;
            std::ostringstream id;
            id << "pt" << getpid() << "-" << std::hex << ((uint64_t)rd() << 32 | rd());
            const std::string s = id.str();
            store->set(key, std::vector<uint8_t>(s.begin(), s.end()));
            return s;
        }
        const std::vector<uint8_t> v = store->get(key);
        return std::string(v.begin(), v.end());
    }

    void reduce_one(at::Tensor &t, st_reduce_op op, const char *what)
    {
        check_cpu(t, what);
        at::Tensor d = dense(t);
        const st_dtype type = dtype_of(d, what);
        check(st_allreduce(g_, d.data_ptr(), (size_t)d.numel(), type, type, op), what);
        give_back(t, d);
    }

    at::Tensor gather_into_new(const at::Tensor &input, const char *what)
    {
        check_cpu(input, what);
        at::Tensor in = dense(input);
        at::Tensor flat = at::empty({getSize(), in.numel()}, in.options());
        check(st_allgather(g_, in.data_ptr(), flat.data_ptr(), in.nbytes()), what);
        return flat;
    }

    void gather_into(at::Tensor &output, const at::Tensor &input, const char *what)
    {
        check_cpu(output, what);
        TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                    "shm backend: ", what, ": the output must hold world_size x the input");
        at::Tensor out = dense(output), in = dense(input);
        check(st_allgather(g_, in.data_ptr(), out.data_ptr(), in.nbytes()), what);
        give_back(output, out);
    }

    void scatter_into(at::Tensor &output, const at::Tensor &input, const c10d::ReduceOp &op, const char *what)
    {
        check_cpu(output, what);
        TORCH_CHECK(input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                    "shm backend: ", what, ": the input must hold world_size x the output");
        at::Tensor out = dense(output), in = dense(input);
        check(st_reduce_scatter(g_, in.data_ptr(), out.data_ptr(), (size_t)out.numel(), dtype_of(out, what),
                                op_of(op, what)),
              what);
        give_back(output, out);
    }

    static Tensors flat_list(const std::vector<Tensors> &lists)
    {
        Tensors all;
        for (const auto &l : lists)
            all.insert(all.end(), l.begin(), l.end());
        return all;
    }
};

}  // namespace shmtrain

static void direct_allreduce(const c10::intrusive_ptr<c10d::Backend> &backend, at::Tensor &t)
{
    auto *shm = dynamic_cast<shmtrain::ShmBackend *>(backend.get());
    TORCH_CHECK(shm, "shm backend: direct_allreduce: that group's backend is not shm");
    shm->direct_sum(t);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("create_backend", &shmtrain::ShmBackend::create, "the shm backend for a group (torch.distributed calls it)");
    m.def("direct_allreduce", &direct_allreduce,
          "st_allreduce (SUM) on a tensor of a group's shm backend, outside PyTorch's dispatch (for benchmarks)");
}
