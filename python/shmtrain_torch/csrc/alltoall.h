// all_to_all_single and all_to_all as the library's st_alltoall: each
// tensor cut into the byte blocks each rank sends and receives, checked in
// the caller's thread (a refusal names the call), run on the progress
// thread.  Blocks move as bytes, so any dtype moves; the lengths are
// agreed pairwise by the library, and a rank whose lengths differ from its
// peers' is refused on every rank.
//
// Ownership: the blocks point into the caller's tensors, which the Work's
// closure keeps alive until the call ends.
#ifndef SHMTRAIN_TORCH_ALLTOALL_H
#define SHMTRAIN_TORCH_ALLTOALL_H

#include <torch/extension.h>

#include <cstdint>
#include <vector>

extern "C" {
#include "shmtrain/coll.h"
}

namespace shmtrain {

struct AllToAllBlocks {
    std::vector<const void *> send;
    std::vector<size_t> send_len;
    std::vector<void *> recv;
    std::vector<size_t> recv_len;
};

// all_to_all_single's: dim 0 of input and output cut by the split sizes
// (empty: world equal parts); both contiguous.
AllToAllBlocks blocks_of_splits(const at::Tensor &output, const at::Tensor &input,
                                const std::vector<int64_t> &out_splits, const std::vector<int64_t> &in_splits,
                                int world);
// all_to_all's: one tensor a rank on each side; all contiguous.
AllToAllBlocks blocks_of_lists(const std::vector<at::Tensor> &outputs, const std::vector<at::Tensor> &inputs,
                               int world);
// The exchange itself; a failure raises DistBackendError naming `what`.
void run_alltoall(st_group *g, const AllToAllBlocks &b, const char *what);

}  // namespace shmtrain

#endif
