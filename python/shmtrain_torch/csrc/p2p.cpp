// send and recv over the library's rings (p2p.h).
#include "p2p.h"

#include "tensors.h"

namespace shmtrain {

CallQueue &PointToPoint::lane(int peer, bool sending)
{
    std::lock_guard<std::mutex> hold(lock_);
    auto &q = lanes_[{peer, sending}];
    if (!q) {
        q = std::make_unique<CallQueue>(counters_);
        q->start(nullptr);
    }
    return *q;
}

// A call still waiting for its peer when the group goes (a script leaving
// with an irecv it never waited for) fails (st_p2p_cancel) rather than
// holding the exit for the group's timeout; one that can finish does.
void PointToPoint::stop()
{
    st_p2p_cancel(g_);
    std::lock_guard<std::mutex> hold(lock_);
    for (auto &l : lanes_)
        l.second->stop();
}

at::Tensor PointToPoint::one_tensor(Tensors &tensors, int peer, const char *what) const
{
    TORCH_CHECK(tensors.size() == 1, "shm backend: ", what, " takes one tensor, not ", tensors.size());
    check_cpu(tensors[0], what);
    const int world = st_group_size(g_), rank = st_group_rank(g_);
    TORCH_CHECK(peer >= 0 && peer < world && peer != rank, "shm backend: ", what, ": rank ", rank,
                " cannot reach rank ", peer, " (another rank of 0..", world - 1, ")");
    return tensors[0];
}

c10::intrusive_ptr<c10d::Work> PointToPoint::send(Tensors &tensors, int peer, int tag)
{
    at::Tensor t = dense(one_tensor(tensors, peer, "send"));
    st_group *g = g_;
    const size_t bytes = (size_t)t.nbytes();
    return lane(peer, true).enqueue(OpType::SEND, tensors, [g, t, peer, tag, bytes]() {
        check(st_send(g, peer, tag, t.data_ptr(), bytes), "send");
        return Tensors{};
    }, true, [g, peer, bytes]() { return st_p2p_ready(g, peer, true, bytes); });
}

c10::intrusive_ptr<c10d::Work> PointToPoint::recv(Tensors &tensors, int peer, int tag)
{
    at::Tensor t = one_tensor(tensors, peer, "recv");
    st_group *g = g_;
    const size_t bytes = (size_t)t.nbytes();
    return lane(peer, false).enqueue(OpType::RECV, tensors, [g, t, peer, tag, bytes]() mutable {
        at::Tensor d = dense(t);
        check(st_recv(g, peer, tag, d.data_ptr(), bytes), "recv");
        give_back(t, d);
        return Tensors{};
    }, true, [g, peer, bytes]() { return st_p2p_ready(g, peer, false, bytes); });
}

}  // namespace shmtrain
