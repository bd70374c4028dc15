// DDP's buckets in the group's region (hook_slots.h).
#include "hook_slots.h"

namespace shmtrain {

at::Tensor HookSlots::take(const at::Tensor &bucket, int64_t index)
{
    const size_t bytes = (size_t)bucket.nbytes();
    std::lock_guard<std::mutex> lock(lock_);
    if ((size_t)index >= slots_.size())
        slots_.resize((size_t)index + 1);
    if (slots_[(size_t)index].bytes != bytes)  // a new layout (DDP rebuilds its buckets after step 1)
        lay_out(index, bytes);
    Slot &s = slots_[(size_t)index];
    if (s.offset[0] == SIZE_MAX)
        return at::Tensor();
    return at::from_blob(region_ + s.offset[s.uses++ & 1], bucket.sizes(), bucket.options());
}

// The slots of bucket `index`, after those before it: both parities' in
// the region, or none (SIZE_MAX) where they do not fit.  Every rank sees
// the same buckets in the same order, so every rank lays them out alike
// (the library reads a peer's slot at this rank's offset).
void HookSlots::lay_out(int64_t index, size_t bytes)
{
    size_t at = 0;
    for (int64_t k = 0; k < index; k++)
        at += 2 * ((slots_[(size_t)k].bytes + 63) / 64 * 64);
    const size_t need = 2 * ((bytes + 63) / 64 * 64);
    Slot &s = slots_[(size_t)index];
    s = Slot{};
    s.bytes = bytes;
    if (at + need <= region_bytes_) {
        s.offset[0] = at;
        s.offset[1] = at + need / 2;
    }
}

}  // namespace shmtrain
