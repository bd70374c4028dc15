// The calls of one group in the order they came: each returns a Work at
// once and the group's progress thread runs it, one call at a time (the
// library's group is used by one thread at a time); a small call with
// nothing ahead of it runs in the caller's thread instead.  What moved is
// counted in Counters, which shmtrain_torch.counters() reads.
//
// Ownership: the queue owns its thread and its pending and finished calls;
// the backend owns the queue, the counters and the group, which outlive it.
#ifndef SHMTRAIN_TORCH_CALL_QUEUE_H
#define SHMTRAIN_TORCH_CALL_QUEUE_H

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "shmtrain/coll.h"
}

namespace shmtrain {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;

// A call of the group: pending until the progress thread has run it.
class ShmWork : public c10d::Work {
  public:
    ShmWork(OpType op, Tensors result, uint64_t seq)
        : c10d::Work(-1, op), result_(std::move(result)), seq_(seq),
          future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get())))
    {
    }
    // The progress thread: the future first (DDP's callbacks run on it), then waiters.
    void complete(std::exception_ptr error, Tensors value)
    {
        if (error)
            future_->setError(error);
        else
            future_->markCompleted(c10::IValue(value.empty() ? result_ : value));
        finish(error);
    }
    std::vector<at::Tensor> result() override { return result_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
    uint64_t getSequencenumber() const override { return seq_; }

  private:
    Tensors result_;
    uint64_t seq_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// What moved, counted (shmtrain_torch.counters): the structure of the
// exchange on any machine, where a timing is the machine's.
struct Counters {
    std::atomic<uint64_t> calls{0}, inline_calls{0}, bytes_staged{0}, hook_buckets{0}, hook_bytes_in{0}, hook_fallbacks{0},
        hook_in_place{0}, in_flight_max{0}, signature_checks{0}, kept_local{0}, progress_wakeups{0},
        gathered_calls{0},  // reductions the library does not do (gathered.h)
        wait_ns{0};         // the library's time waiting for peers, as of the last call's end
};

// The backend's counters and the library's, by the names shmtrain_torch.counters() gives them.
std::map<std::string, uint64_t> counter_map(const Counters &c, const st_coll_counters &lib, size_t in_flight);

class CallQueue {
  public:
    CallQueue(Counters &counters) : counters_(counters) {}
    ~CallQueue() { stop(); }

    // The progress thread started; g's wait clock (when g) read after each call.
    void start(const st_group *g);
    // The queue run to its end, then the progress thread gone; later calls
    // run in the caller's thread, one at a time.
    void stop();

    // A Work now; `run` (its result tensors, or none for the Work's own)
    // on the progress thread, or here where the call is small (at most
    // kInlineBytes of `result`) and may_inline, and `ready` (when given)
    // says it will not wait: asked with nothing of this queue running.
    c10::intrusive_ptr<ShmWork> enqueue(OpType op, Tensors result, std::function<Tensors()> run,
                                        bool may_inline = true, const std::function<bool()> &ready = nullptr);

    size_t in_flight() const { return in_flight_; }
    // The calls so far, numbered from 0 alike on every rank (TORCH_DISTRIBUTED_DEBUG=DETAIL's check).
    uint64_t sequence() const { return seq_; }
    void reset_sequence() { seq_ = 0; }
    static constexpr size_t kInlineBytes = 256u << 10;

  private:
    struct Job {
        c10::intrusive_ptr<ShmWork> work;
        std::function<Tensors()> run;
        int threads;
        Tensors value;
    };

    void run_job(Job &job);
    void progress();

    Counters &counters_;
    const st_group *g_ = nullptr;
    std::thread thread_;
    bool gone_ = false;  // after stop(): calls run in the caller's thread
    std::mutex lock_;
    std::condition_variable cv_;
    std::deque<Job> queue_;
    // Finished calls, let go of by a caller's thread (the next call's, or
    // the destructor's): the last reference to a tensor Python knows may
    // need the GIL to drop, which a thread of ours must not take while the
    // interpreter shuts down (Python ends such a thread mid-frame).
    std::vector<Job> finished_;
    bool stopping_ = false;
    bool running_ = false;  // a call is in the library (the progress thread's, or a caller's small one)
    std::atomic<size_t> in_flight_{0};
    std::atomic<uint64_t> seq_{0};
};

}  // namespace shmtrain

#endif
