// DDP's buckets in the group's region, for the comm hook
// (shmtrain_torch.ddp_comm_hook): each bucket a slot of its own, where the
// bucket is written scaled, summed by the library's zero-copy path, and
// handed to DDP as the result.  Two slots a bucket, used in turn: a user's
// hook that keeps the step before's result (a future's value aliases the
// slot) finds it intact after this step's call; DDP itself copies each
// result out at once.
//
// Ownership: the region is the group's (st_group_buffer), which outlives
// this; a slot's tensor aliases the region and owns nothing.
#ifndef SHMTRAIN_TORCH_HOOK_SLOTS_H
#define SHMTRAIN_TORCH_HOOK_SLOTS_H

#include <torch/extension.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace shmtrain {

class HookSlots {
  public:
    HookSlots(char *region, size_t bytes) : region_(region), region_bytes_(bytes) {}

    // The slot this call of bucket `index` writes, shaped as the bucket;
    // undefined where the buckets do not fit twice in the region (the
    // caller then reduces the bucket itself).  Any thread.
    at::Tensor take(const at::Tensor &bucket, int64_t index);

  private:
    struct Slot {
        size_t bytes = 0;
        size_t offset[2] = {SIZE_MAX, SIZE_MAX};
        uint64_t uses = 0;
    };
    void lay_out(int64_t index, size_t bytes);

    char *const region_;
    const size_t region_bytes_;
    std::mutex lock_;
    std::vector<Slot> slots_;
};

}  // namespace shmtrain

#endif
