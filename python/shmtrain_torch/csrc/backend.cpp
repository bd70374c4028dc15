// The "shm" backend of torch.distributed: PyTorch's c10d::Backend interface
// over libshmtrain-coll (include/shmtrain/coll.h), which does the work.
//
// Calls are asynchronous, as gloo's are: each returns a Work at once and a
// progress thread of the group runs the calls in order (call_queue.h), so
// DDP's buckets are exchanged while backward goes on.  A Work completes (its future too) when its call has;
// a failure (a dead peer: DistBackendError) is raised from wait() and from
// the future.  Arguments are checked in the caller's thread, so a refusal
// (another device, a dtype or op gloo refuses too) is raised by the call
// itself, by name.  Reductions the library does not do (PRODUCT, bitwise
// ops, int8, uint8, int16, bool) are gathered and folded in rank order
// (gathered.h).  send and recv run beside the collectives, each peer's on
// threads of their own (p2p.h).
//
// Data moves through the group's segment: an all-reduce takes the library's
// staged path on the tensor itself (only what peers read is copied in, the
// result written straight into the tensor); DDP's comm hook
// (shmtrain_torch.ddp_comm_hook) from three ranks copies a bucket in and
// hands DDP the reduced region itself, which DDP copies into the gradients
// as it would its own bucket: one copy in, the result read in place
// (PyTorch 2.13 lets no backend allocate DDP's CPU buckets; docs/torch.md);
// at two ranks it reduces the bucket in place, as DDP's own path does.
// The copies and sums run on the rank's intra-op threads (PyTorch's pool),
// the same bits at any thread count.
//
// Ranks meet through the Store init_process_group gives this group: a
// counter there numbers each incarnation of the group (a group destroyed
// and made again under one Store), rank 0 names the job's shared memory
// under that number, the others read it.
#include <pybind11/chrono.h>
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <ATen/Parallel.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unistd.h>

#include "agreement.h"
#include "alltoall.h"
#include "call_queue.h"
#include "gathered.h"
#include "hook_slots.h"
#include "p2p.h"
#include "tensors.h"

extern "C" {
#include "shmtrain/env.h"
#include "shmtrain/status.h"
}

namespace shmtrain {

// The library's copies and sums on PyTorch's intra-op pool (the progress
// thread's, set to the caller's thread count for each call).
static void torch_team(void *, int threads, void (*body)(void *, int, int), void *arg)
{
    at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t m = begin; m < end; m++)
            body(arg, (int)m, threads);
    });
}

static bool env_is_one(const char *name)
{
    const char *v = st_env_text(name);
    return v && !std::strcmp(v, "1");
}

static size_t env_mib(const char *name, size_t fallback)
{
    const char *v = st_env_text(name);
    return v ? (size_t)std::strtoull(v, nullptr, 10) << 20 : fallback;
}

class ShmBackend : public c10d::Backend {
  public:
    ShmBackend(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size, std::chrono::duration<float> timeout)
        : c10d::Backend(rank, size)
    {
        job_ = job_of_incarnation(store, rank, size);
        st_group_config cfg{};
        cfg.rank = rank;
        cfg.world_size = size;
        cfg.job_id = job_.c_str();
        cfg.timeout_s = timeout.count() > 0 ? timeout.count() : 0;
        cfg.join_timeout_s = cfg.timeout_s;
        cfg.zero_copy_bytes = env_mib(ST_ENV_TORCH_REGION_MB, 64u << 20);
        cfg.team = torch_team;
        // the most threads a call may split over: SHMTRAIN_COLL_THREADS, else CPUs / ranks (the
        // library's default); how many it gets is the caller's torch.get_num_threads() at the call
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        const char *asked = st_env_text(ST_ENV_COLL_THREADS);
        cfg.threads = asked && std::atoi(asked) > 0 ? std::atoi(asked) : std::max(1, (int)(cpus > 0 ? cpus / size : 1));
        check(st_group_create(&g_, &cfg), "joining the group");
        size_t region_bytes = 0;
        char *region = (char *)st_group_buffer(g_, &region_bytes);
        slots_ = std::make_unique<HookSlots>(region, region_bytes);
        p2p_ = std::make_unique<PointToPoint>(g_, p2p_counters_);
        queue_.start(g_);
        std::lock_guard<std::mutex> lock(live_lock());
        live().insert(this);
    }
    ~ShmBackend() override
    {
        {
            std::lock_guard<std::mutex> lock(live_lock());
            live().erase(this);
        }
        queue_.stop();
        p2p_.reset();
        st_group_destroy(g_);
    }

    // At the interpreter's exit (atexit, before it finalizes), the GIL let
    // go: every backend's queued calls finished and its progress thread
    // ended.  A call's future may carry a Python callback (a user's
    // .then()), which the progress thread drops after running it; a thread
    // that takes the GIL once Python finalizes is ended mid-destructor,
    // which aborts the process.  Calls made after this run in the caller.
    static void drain_all()
    {
        std::lock_guard<std::mutex> lock(live_lock());
        for (ShmBackend *b : live()) {
            b->queue_.stop();
            b->p2p_->stop();
        }
    }

    const std::string getBackendName() const override { return "shm"; }

    // TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective's fingerprint
    // across ranks by these: every rank counts its calls from 0 alike.
    void setSequenceNumberForGroup() override { queue_.reset_sequence(); }
    uint64_t getSequenceNumberForGroup() override { return queue_.sequence(); }

    c10::intrusive_ptr<c10d::Work> allreduce(Tensors &tensors, const c10d::AllreduceOptions &opts) override
    {
        if (independent_)
            return kept_local(tensors);
        return reduce_all(tensors, opts.reduceOp, OpType::ALLREDUCE, "all_reduce");
    }

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors &tensors,
                                                       const c10d::AllreduceCoalescedOptions &opts) override
    {
        if (independent_)
            return kept_local(tensors);
        return reduce_all(tensors, opts.reduceOp, OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced");
    }

    // Every rank reduces; only the root keeps the result (MPI's and gloo's contract).
    c10::intrusive_ptr<c10d::Work> reduce(Tensors &tensors, const c10d::ReduceOptions &opts) override
    {
        const c10d::ReduceOp op = opts.reduceOp;
        Tensors copies;
        for (auto &t : tensors) {
            check_cpu(t, "reduce");
            route_of(t.scalar_type(), op, "reduce");
            copies.push_back(t.clone(at::MemoryFormat::Contiguous));
        }
        const bool root = getRank() == opts.rootRank;
        return enqueue(OpType::REDUCE, tensors, [this, copies, tensors, op, root]() mutable {
            for (size_t k = 0; k < copies.size(); k++) {
                reduce_any(copies[k], op, "reduce");
                if (root)
                    tensors[k].copy_(copies[k]);
            }
        });
    }

    c10::intrusive_ptr<c10d::Work> broadcast(Tensors &tensors, const c10d::BroadcastOptions &opts) override
    {
        for (auto &t : tensors)
            check_cpu(t, "broadcast");
        const int root = (int)opts.rootRank;
        return enqueue(OpType::BROADCAST, tensors, [this, tensors, root]() mutable {
            for (auto &t : tensors) {
                agree((uint64_t)t.nbytes() * 8 + 1, "broadcast");
                at::Tensor d = dense(t);
                check(st_broadcast(g_, d.data_ptr(), d.nbytes(), root), "broadcast");
                give_back(t, d);
            }
        });
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        return enqueue(OpType::BARRIER, Tensors{}, [this]() { check(st_barrier(g_), "barrier"); });
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors> &outputs, Tensors &inputs,
                                             const c10d::AllgatherOptions &) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: all_gather: one output list per input");
        for (size_t k = 0; k < inputs.size(); k++) {
            check_cpu(inputs[k], "all_gather");
            TORCH_CHECK((int)outputs[k].size() == getSize(), "shm backend: all_gather: ", outputs[k].size(),
                        " outputs for a world of ", getSize());
        }
        return enqueue(OpType::ALLGATHER, flat_list(outputs), [this, outputs, inputs]() mutable {
            for (size_t k = 0; k < inputs.size(); k++) {
                at::Tensor flat = gather_into_new(inputs[k], "all_gather");
                for (int q = 0; q < getSize(); q++)
                    outputs[k][q].copy_(flat[q].view_as(outputs[k][q]));
            }
        });
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &) override
    {
        check_gather("all_gather_into_tensor", output, input);
        return enqueue(OpType::_ALLGATHER_BASE, Tensors{output}, [this, output, input]() mutable {
            gather_into(output, input, "all_gather_into_tensor");
        });
    }

    c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(Tensors &outputs, Tensors &inputs,
                                                                   const c10d::AllgatherOptions &) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: all_gather_into_tensor_coalesced: sizes differ");
        for (size_t k = 0; k < inputs.size(); k++)
            check_gather("all_gather_into_tensor_coalesced", outputs[k], inputs[k]);
        return enqueue(OpType::COALESCED, outputs, [this, outputs, inputs]() mutable {
            for (size_t k = 0; k < inputs.size(); k++)
                gather_into(outputs[k], inputs[k], "all_gather_into_tensor_coalesced");
        });
    }

    // Every rank gathers; the root keeps the pieces.
    c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors> &outputs, Tensors &inputs,
                                          const c10d::GatherOptions &opts) override
    {
        TORCH_CHECK(inputs.size() == 1, "shm backend: gather takes one input tensor");
        check_cpu(inputs[0], "gather");
        const bool root = getRank() == opts.rootRank;
        if (root)
            TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == getSize(),
                        "shm backend: gather: the root needs one list of ", getSize(), " outputs");
        Tensors result = outputs.empty() ? Tensors{} : outputs[0];
        return enqueue(OpType::GATHER, result, [this, outputs, inputs, root]() mutable {
            at::Tensor flat = gather_into_new(inputs[0], "gather");
            if (root)
                for (int q = 0; q < getSize(); q++)
                    outputs[0][q].copy_(flat[q].view_as(outputs[0][q]));
        });
    }

    // The root's pieces broadcast whole; each rank keeps its own.
    c10::intrusive_ptr<c10d::Work> scatter(Tensors &outputs, std::vector<Tensors> &inputs,
                                           const c10d::ScatterOptions &opts) override
    {
        TORCH_CHECK(outputs.size() == 1, "shm backend: scatter takes one output tensor");
        check_cpu(outputs[0], "scatter");
        const bool root = getRank() == opts.rootRank;
        if (root)
            TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == getSize(),
                        "shm backend: scatter: the root needs one list of ", getSize(), " inputs");
        const int from = (int)opts.rootRank;
        return enqueue(OpType::SCATTER, outputs, [this, outputs, inputs, root, from]() mutable {
            at::Tensor &out = outputs[0];
            at::Tensor all = at::empty({getSize(), out.numel()}, out.options());
            if (root)
                for (int q = 0; q < getSize(); q++)
                    all[q].copy_(inputs[0][q].reshape({-1}));
            agree((uint64_t)all.nbytes() * 8 + 2, "scatter");
            check(st_broadcast(g_, all.data_ptr(), all.nbytes(), from), "scatter");
            out.copy_(all[getRank()].view_as(out));
        });
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors &outputs, std::vector<Tensors> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: reduce_scatter: one input list per output");
        const c10d::ReduceOp op = opts.reduceOp;
        for (size_t k = 0; k < outputs.size(); k++) {
            TORCH_CHECK((int)inputs[k].size() == getSize(), "shm backend: reduce_scatter: ", inputs[k].size(),
                        " inputs for a world of ", getSize());
            check_cpu(outputs[k], "reduce_scatter");
            route_of(outputs[k].scalar_type(), op, "reduce_scatter");
        }
        return enqueue(OpType::REDUCE_SCATTER, outputs, [this, outputs, inputs, op]() mutable {
            for (size_t k = 0; k < outputs.size(); k++)
                scatter_into(outputs[k], at::stack(inputs[k]).contiguous(), op, "reduce_scatter");
        });
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                        const c10d::ReduceScatterOptions &opts) override
    {
        const c10d::ReduceOp op = opts.reduceOp;
        check_scatter("reduce_scatter_tensor", output, input, op);
        return enqueue(OpType::_REDUCE_SCATTER_BASE, Tensors{output}, [this, output, input, op]() mutable {
            scatter_into(output, input, op, "reduce_scatter_tensor");
        });
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(Tensors &outputs, Tensors &inputs,
                                                                   const c10d::ReduceScatterOptions &opts) override
    {
        TORCH_CHECK(outputs.size() == inputs.size(), "shm backend: reduce_scatter_tensor_coalesced: sizes differ");
        const c10d::ReduceOp op = opts.reduceOp;
        for (size_t k = 0; k < outputs.size(); k++)
            check_scatter("reduce_scatter_tensor_coalesced", outputs[k], inputs[k], op);
        return enqueue(OpType::COALESCED, outputs, [this, outputs, inputs, op]() mutable {
            for (size_t k = 0; k < outputs.size(); k++)
                scatter_into(outputs[k], inputs[k], op, "reduce_scatter_tensor_coalesced");
        });
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &out_splits, std::vector<int64_t> &in_splits,
                                                 const c10d::AllToAllOptions &) override
    {
        AllToAllBlocks b = blocks_of_splits(output, input, out_splits, in_splits, getSize());
        return enqueue(OpType::ALLTOALL_BASE, Tensors{output}, [this, b, output, input]() {
            run_alltoall(g_, b, "all_to_all_single");
        });
    }

    c10::intrusive_ptr<c10d::Work> alltoall(Tensors &outputs, Tensors &inputs, const c10d::AllToAllOptions &) override
    {
        AllToAllBlocks b = blocks_of_lists(outputs, inputs, getSize());
        return enqueue(OpType::ALLTOALL, outputs, [this, b, outputs, inputs]() { run_alltoall(g_, b, "all_to_all"); });
    }

    c10::intrusive_ptr<c10d::Work> send(Tensors &tensors, int peer, int tag) override
    {
        return p2p_->send(tensors, peer, tag);
    }
    c10::intrusive_ptr<c10d::Work> recv(Tensors &tensors, int peer, int tag) override
    {
        return p2p_->recv(tensors, peer, tag);
    }
    // DDP's comm hook: the bucket, scaled by 1 / world as DDP's own path
    // scales each gradient, written into its slot of this rank's region in
    // one pass, summed there, and the slot handed back as the result (DDP
    // copies it into the gradients, as it would its bucket; hook_slots.h).
    // At two ranks, or where the buckets do not fit twice in the region,
    // DDP's own path: the bucket scaled and summed in place on the staged
    // ring.  At two ranks that ring moves the bytes the slot's copy and the
    // zero-copy sum move (docs/collectives.md) without writing the whole
    // bucket into lines not in cache: 1.1-1.6x faster from 8 MiB, level
    // below (bench/torch_hook_probe.py, docs/benchmarks.md 0ze); from three
    // ranks the slot moves fewer.
    c10::intrusive_ptr<c10d::Work> hook_allreduce(at::Tensor bucket, int64_t index)
    {
        check_cpu(bucket, "DDP's comm hook");
        if (independent_)  // the rank's own gradient, as if it trained alone
            return kept_local(Tensors{bucket});
        const st_dtype type = dtype_of(bucket, "DDP's comm hook");
        TORCH_CHECK(bucket.is_contiguous() && index >= 0, "shm backend: DDP's bucket is not contiguous");
        const bool in_place = getSize() == 2;
        at::Tensor slot = in_place ? at::Tensor() : slots_->take(bucket, index);
        counters_.hook_buckets++;
        const double scale = 1.0 / getSize();
        if (!slot.defined()) {
            (in_place ? counters_.hook_in_place : counters_.hook_fallbacks)++;
            return queue_.enqueue(OpType::ALLREDUCE, Tensors{bucket}, [this, bucket, scale, type]() mutable {
                bucket.mul_(scale);
                agree(call_signature(bucket, type, ST_SUM), "DDP's comm hook");
                check(st_allreduce(g_, bucket.data_ptr(), (size_t)bucket.numel(), type, type, ST_SUM),
                      "DDP's comm hook");
                return Tensors{bucket};
            }, false);
        }
        counters_.hook_bytes_in += (size_t)bucket.nbytes();
        return queue_.enqueue(OpType::ALLREDUCE, Tensors{bucket}, [this, bucket, slot, scale, type]() mutable {
            agree(call_signature(slot, type, ST_SUM), "DDP's comm hook");
            at::mul_out(slot, bucket, at::scalar_tensor(scale, at::kDouble));  // DDP's wrapped scalar
            check(st_allreduce(g_, slot.data_ptr(), (size_t)slot.numel(), type, type, ST_SUM), "DDP's comm hook");
            return Tensors{slot};
        }, false);
    }

    // The library's SUM on t without PyTorch's dispatch: bench/torch_allreduce.py
    // times it beside dist.all_reduce (the binding's own cost per call).
    void direct_sum(at::Tensor &t)
    {
        Tensors one{t};
        reduce_all(one, c10d::ReduceOp(c10d::ReduceOp::SUM), OpType::ALLREDUCE, "direct all_reduce")->wait();
    }

    Counters &counters() { return counters_; }
    const st_group *group() const { return g_; }
    size_t in_flight() const { return queue_.in_flight(); }

    static c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                                                    const std::chrono::duration<float> &timeout)
    {
        return c10::make_intrusive<ShmBackend>(store, rank, size, timeout);
    }

  private:
    st_group *g_ = nullptr;
    std::string job_;
    std::unique_ptr<HookSlots> slots_;  // in the group's region
    const bool independent_ = env_is_one(ST_ENV_INDEPENDENT);  // kept_local
    Counters counters_, p2p_counters_;
    CallQueue queue_{counters_};
    std::unique_ptr<PointToPoint> p2p_;  // send and recv, each peer's on threads of their own

    static std::mutex &live_lock()
    {
        static std::mutex m;
        return m;
    }
    static std::set<ShmBackend *> &live()
    {
        static std::set<ShmBackend *> s;
        return s;
    }

    // The caller's thread: a Work now, the call on the progress thread.
    c10::intrusive_ptr<c10d::Work> enqueue(OpType op, Tensors result, std::function<void()> run)
    {
        return queue_.enqueue(op, std::move(result), [run]() {
            run();
            return Tensors{};
        });
    }
    // A small call with nothing queued or running runs here, in the caller's
    // thread: the progress thread's hand-over (two wake-ups, ~5 us) would
    // cost more than the call, and there is nothing to overlap it with.
    // The order stays the calls' (nothing is ahead of it).
    // (DDP's hook never: its buckets are what backward overlaps.)
    // SHMTRAIN_INDEPENDENT=1 (shmrun --sweep's ceiling run of a script):
    // every all-reduce answers with the rank's own tensors, nothing leaving
    // it, so each rank trains alone on its shard; the other collectives
    // (DDP's first broadcast, barriers) still meet.  In order with the rest.
    c10::intrusive_ptr<c10d::Work> kept_local(Tensors tensors)
    {
        counters_.kept_local++;
        return queue_.enqueue(OpType::ALLREDUCE, tensors, [tensors]() { return tensors; });
    }

    // The ranks' agreement on this call (agreement.h), refused on every
    // rank by name where any rank's differs.
    void agree(uint64_t sig, const char *what)
    {
        const bool same = ranks_agree(g_, getSize(), sig, what);
        counters_.signature_checks++;
        if (!same)
            C10_THROW_ERROR(DistBackendError,
                            std::string("shm backend: ") + what + ": the ranks' calls differ (count, dtype or op): "
                            "rank " + std::to_string(getRank()) + " called it with " + std::to_string(sig >> 8) +
                            " elements; every rank must make the same call");
    }

    c10::intrusive_ptr<c10d::Work> reduce_all(Tensors &tensors, const c10d::ReduceOp &op, OpType type,
                                              const char *what)
    {
        for (auto &t : tensors) {
            check_cpu(t, what);
            route_of(t.scalar_type(), op, what);
        }
        return enqueue(type, tensors, [this, tensors, op, what]() mutable {
            for (auto &t : tensors) {
                at::Tensor d = dense(t);
                reduce_any(d, op, what);
                give_back(t, d);
            }
        });
    }

    // t (contiguous) on the library's path, or gathered where it lacks the dtype or op (gathered.h).
    void reduce_any(at::Tensor &t, const c10d::ReduceOp &op, const char *what)
    {
        if (route_of(t.scalar_type(), op, what) == ReduceRoute::library)
            return reduce_plain(t, op_of(op, what), what);
        agree(gathered_signature(t, op), what);
        all_reduce_gathered(g_, getSize(), t, op, what);
        counters_.gathered_calls++;
    }
    c10::intrusive_ptr<ShmWork> reduce_all_one(at::Tensor t, st_reduce_op op, OpType type, const char *what)
    {
        return queue_.enqueue(type, Tensors{t}, [this, t, op, what]() mutable {
            reduce_plain(t, op, what);
            return Tensors{t};
        });
    }

    // t (contiguous) on the library's staged path: a copy of t through the
    // region would add a full copy in and out to the zero-copy sum (6.5 n e
    // a rank at 2 ranks against the staged ring's 4.5; 1.4-2.7x the time on
    // a Zen 4 guest, docs/benchmarks.md 0zd).
    void reduce_plain(at::Tensor &t, st_reduce_op op, const char *what)
    {
        const st_dtype type = dtype_of(t, what);
        agree(call_signature(t, type, op), what);
        check(st_allreduce(g_, t.data_ptr(), (size_t)t.numel(), type, type, op), what);
        counters_.bytes_staged += (size_t)t.nbytes();
    }

    void check_gather(const char *what, const at::Tensor &output, const at::Tensor &input)
    {
        check_cpu(output, what);
        check_cpu(input, what);
        TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                    "shm backend: ", what, ": the output must hold world_size x the input");
    }
    void check_scatter(const char *what, const at::Tensor &output, const at::Tensor &input, const c10d::ReduceOp &op)
    {
        check_cpu(output, what);
        check_cpu(input, what);
        route_of(output.scalar_type(), op, what);
        TORCH_CHECK(input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                    "shm backend: ", what, ": the input must hold world_size x the output");
    }

    at::Tensor gather_into_new(const at::Tensor &input, const char *what)
    {
        at::Tensor in = dense(input);
        agree((uint64_t)in.nbytes() * 8 + 3, what);
        at::Tensor flat = at::empty({getSize(), in.numel()}, in.options());
        check(st_allgather(g_, in.data_ptr(), flat.data_ptr(), in.nbytes()), what);
        return flat;
    }

    void gather_into(at::Tensor &output, const at::Tensor &input, const char *what)
    {
        at::Tensor out = dense(output), in = dense(input);
        agree((uint64_t)in.nbytes() * 8 + 3, what);
        check(st_allgather(g_, in.data_ptr(), out.data_ptr(), in.nbytes()), what);
        give_back(output, out);
    }

    void scatter_into(at::Tensor &output, const at::Tensor &input, const c10d::ReduceOp &op, const char *what)
    {
        at::Tensor out = dense(output), in = dense(input);
        if (route_of(out.scalar_type(), op, what) == ReduceRoute::library) {
            const st_dtype type = dtype_of(out, what);
            agree(call_signature(out, type, op_of(op, what)), what);
            check(st_reduce_scatter(g_, in.data_ptr(), out.data_ptr(), (size_t)out.numel(), type, op_of(op, what)),
                  what);
        } else {
            agree(gathered_signature(out, op), what);
            reduce_scatter_gathered(g_, getSize(), out, in, op, what);
            counters_.gathered_calls++;
        }
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

static shmtrain::ShmBackend *shm_of(const c10::intrusive_ptr<c10d::Backend> &backend, const char *what)
{
    auto *shm = dynamic_cast<shmtrain::ShmBackend *>(backend.get());
    TORCH_CHECK(shm, "shm backend: ", what, ": that group's backend is not shm");
    return shm;
}

static void direct_allreduce(const c10::intrusive_ptr<c10d::Backend> &backend, at::Tensor &t)
{
    shm_of(backend, "direct_allreduce")->direct_sum(t);
}

static c10::intrusive_ptr<c10d::Work> hook_allreduce(const c10::intrusive_ptr<c10d::Backend> &backend,
                                                      at::Tensor bucket, int64_t index)
{
    return shm_of(backend, "ddp_comm_hook")->hook_allreduce(bucket, index);
}

static std::map<std::string, uint64_t> counters(const c10::intrusive_ptr<c10d::Backend> &backend)
{
    shmtrain::ShmBackend *shm = shm_of(backend, "counters");
    st_coll_counters lib{};
    st_group_counters(shm->group(), &lib);
    return shmtrain::counter_map(shm->counters(), lib, shm->in_flight());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("create_backend", &shmtrain::ShmBackend::create, "the shm backend for a group (torch.distributed calls it)");
    m.def("direct_allreduce", &direct_allreduce,
          "st_allreduce (SUM) on a tensor of a group's shm backend, outside PyTorch's dispatch (for benchmarks)");
    m.def("hook_allreduce", &hook_allreduce, "DDP's bucket reduced through the segment (ddp_comm_hook)");
    m.def("counters", &counters, "what the group's backend moved, counted");
    m.def("drain", []() {
        pybind11::gil_scoped_release free;
        shmtrain::ShmBackend::drain_all();
    }, "every backend's queued calls finished and its thread ended (atexit, from __init__.py)");
}
