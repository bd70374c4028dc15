// send and recv (isend, irecv, batch_isend_irecv: pipeline parallelism) as
// the library's st_send and st_recv.  Each peer's sends run in order on a
// thread of their own, and its receives on another, started at the first
// use: a send waits only for room in its peer's inbox and a receive for
// its message, never for the collectives or for another peer's traffic,
// so isend and irecv posted in any order between any ranks complete, as
// over gloo.  A small one that will not wait (its message fits in the
// inbox, or is all there) runs in the caller's thread instead, when
// nothing of its lane is queued: a hand-over to the lane and back costs
// two thread switches, more than the call.  Messages between two ranks arrive in the order sent, and a
// recv whose size or tag is not the next message's is refused by name.
//
// Ownership: the lanes (their threads and calls) are this object's; the
// group and the counters are the backend's and outlive it.
#ifndef SHMTRAIN_TORCH_P2P_H
#define SHMTRAIN_TORCH_P2P_H

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "call_queue.h"

namespace shmtrain {

class PointToPoint {
  public:
    PointToPoint(st_group *g, Counters &counters) : g_(g), counters_(counters) {}
    ~PointToPoint() { stop(); }
    c10::intrusive_ptr<c10d::Work> send(Tensors &tensors, int peer, int tag);
    c10::intrusive_ptr<c10d::Work> recv(Tensors &tensors, int peer, int tag);
    // Every lane run to its end and its thread gone (the backend's drain);
    // a call that would wait for its peer fails instead.
    void stop();

  private:
    CallQueue &lane(int peer, bool sending);
    at::Tensor one_tensor(Tensors &tensors, int peer, const char *what) const;

    st_group *g_;
    Counters &counters_;
    std::mutex lock_;
    std::map<std::pair<int, bool>, std::unique_ptr<CallQueue>> lanes_;
};

}  // namespace shmtrain

#endif
