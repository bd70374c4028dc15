// The calls of one group in order (call_queue.h).
#include "call_queue.h"

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <optional>

namespace shmtrain {

void CallQueue::start(const st_group *g)
{
    g_ = g;
    thread_ = std::thread([this] { progress(); });
}

void CallQueue::stop()
{
    {
        std::lock_guard<std::mutex> lock(lock_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        // A backend freed by a Python thread with calls in flight: a
        // call's Python callback needs the GIL that thread holds.
        // PyTorch 2.13 keeps the backend to the process's end (after
        // destroy_process_group and gc.collect() too), so today only
        // drain_all, GIL let go, gets here; a PyTorch that frees it
        // sooner would hang without this.
        std::optional<pybind11::gil_scoped_release> free;
        if (Py_IsInitialized() && PyGILState_Check())
            free.emplace();
        thread_.join();
    }
    std::lock_guard<std::mutex> lock(lock_);
    gone_ = true;
}

// A small call with nothing queued or running runs here, in the caller's
// thread: the progress thread's hand-over (two wake-ups, ~5 us) would
// cost more than the call, and there is nothing to overlap it with.
// The order stays the calls' (nothing is ahead of it).
c10::intrusive_ptr<ShmWork> CallQueue::enqueue(OpType op, Tensors result, std::function<Tensors()> run,
                                               bool may_inline, const std::function<bool()> &ready)
{
    size_t bytes = 0;
    for (const auto &t : result)
        bytes += (size_t)t.nbytes();
    auto w = c10::make_intrusive<ShmWork>(op, std::move(result), ++seq_);
    std::vector<Job> done;
    std::unique_lock<std::mutex> lock(lock_);
    done.swap(finished_);
    counters_.calls++;
    if (gone_)  // at exit: one caller at a time in the library
        cv_.wait(lock, [this] { return !running_; });
    if ((may_inline && bytes <= kInlineBytes && queue_.empty() && !running_ && (!ready || ready())) || gone_) {
        running_ = true;
        lock.unlock();
        counters_.inline_calls++;
        Job job{w, std::move(run), 0, {}};
        run_job(job);
        lock.lock();
        running_ = false;
        // Only a call queued meanwhile, or a caller at exit, waits for
        // this: waking the idle progress thread on every small call
        // switched this CPU to it and back: 4.5 -> 2.1 us a 4-byte call.
        const bool waited_for = !queue_.empty() || gone_;
        lock.unlock();
        if (waited_for)
            cv_.notify_one();
        return w;
    }
    queue_.push_back(Job{w, std::move(run), at::get_num_threads(), {}});
    lock.unlock();
    const size_t n = ++in_flight_;
    if (n > counters_.in_flight_max)
        counters_.in_flight_max = n;
    cv_.notify_one();
    return w;
}

// One call at a time (running_), so the group's wait clock is read by
// the thread that just moved it; the counter is what other threads read.
void CallQueue::run_job(Job &job)
{
    std::exception_ptr error;
    try {
        job.value = job.run();
    } catch (...) {
        error = std::current_exception();
    }
    if (g_)  // a collectives' queue (a point-to-point lane has no wait clock of its own)
        counters_.wait_ns = (uint64_t)(st_group_wait_seconds(g_) * 1e9);
    job.work->complete(error, job.value);
}

// The progress thread: the calls in the order they came, each to its end.
void CallQueue::progress()
{
    int threads = 0;
    for (;;) {
        Job job;
        {
            std::unique_lock<std::mutex> lock(lock_);
            while (!stopping_ && (queue_.empty() || running_)) {
                cv_.wait(lock);
                counters_.progress_wakeups++;
            }
            if (queue_.empty())
                return;
            job = std::move(queue_.front());
            queue_.pop_front();
            running_ = true;
        }
        if (job.threads != threads)  // the caller's intra-op threads, this thread's pool
            at::set_num_threads(threads = job.threads);
        run_job(job);
        in_flight_--;
        std::lock_guard<std::mutex> lock(lock_);
        running_ = false;
        finished_.push_back(std::move(job));
    }
}

std::map<std::string, uint64_t> counter_map(const Counters &c, const st_coll_counters &lib, size_t in_flight)
{
    return {{"coll_bytes_read", lib.bytes_read}, {"coll_bytes_written", lib.bytes_written},
            {"coll_peer_bytes_read", lib.peer_bytes_read}, {"coll_syncs", lib.syncs},
            {"calls", c.calls}, {"inline_calls", c.inline_calls}, {"in_flight", in_flight},
            {"bytes_staged", c.bytes_staged}, {"hook_buckets", c.hook_buckets},
            {"hook_bytes_in", c.hook_bytes_in}, {"hook_fallbacks", c.hook_fallbacks},
            {"hook_in_place", c.hook_in_place},
            {"in_flight_max", c.in_flight_max}, {"signature_checks", c.signature_checks},
            {"kept_local", c.kept_local}, {"gathered_calls", c.gathered_calls},
            {"progress_wakeups", c.progress_wakeups}, {"wait_ns", c.wait_ns},
            {"p2p_sent", lib.p2p_sent}, {"p2p_sent_bytes", lib.p2p_sent_bytes},
            {"p2p_received", lib.p2p_received}, {"p2p_received_bytes", lib.p2p_received_bytes}};
}

}  // namespace shmtrain
