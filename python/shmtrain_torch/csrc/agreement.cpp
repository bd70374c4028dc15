// The ranks' agreement on a call (agreement.h).
#include "agreement.h"
#include "tensors.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <random>

namespace shmtrain {

// The number as 16 nibbles b and their squares, summed over the ranks in
// fp32 (exact: each sum is at most 225 x world): the sum of (c - b)^2 over
// the ranks' nibbles c, S2 - 2 b S1 + world b^2, is 0 on every rank exactly
// when every rank's b is the same.  fp32 sums take the library's inline
// all-reduce (one synchronisation, 128 bytes), where a 64-bit MAX took its
// general path (three, and the segment's staging).
bool ranks_agree(st_group *g, int world, uint64_t sig, const char *what)
{
    constexpr int kNibbles = 16;
    float sums[2 * kNibbles];
    for (int k = 0; k < kNibbles; k++) {
        const float b = (float)((sig >> (4 * k)) & 15);
        sums[k] = b;
        sums[kNibbles + k] = b * b;
    }
    check(st_allreduce(g, sums, 2 * kNibbles, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM), what);
    const float ranks = (float)world;
    bool differ = false;
    for (int k = 0; k < kNibbles; k++) {
        const float b = (float)((sig >> (4 * k)) & 15);
        differ |= sums[kNibbles + k] - 2 * b * sums[k] + ranks * b * b != 0.0f;
    }
    return !differ;
}

std::string job_of_incarnation(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size)
{
    const int64_t joined = store->add("shmtrain/joins", 1);
    const std::string key = "shmtrain/job/" + std::to_string((joined - 1) / size);
    if (rank == 0) {
        // No iostreams in the extension: built by another compiler than PyTorch's (a GPU host's
        // newer g++), their inline parts disagreed with the process's libstdc++ and crashed here
        std::random_device rd;
        const uint64_t nonce = (uint64_t)rd() << 32 | rd();
        char id[48];
        std::snprintf(id, sizeof id, "pt%ld-%" PRIx64, (long)getpid(), nonce);
        const std::string s(id);
        store->set(key, std::vector<uint8_t>(s.begin(), s.end()));
        return s;
    }
    const std::vector<uint8_t> v = store->get(key);
    return std::string(v.begin(), v.end());
}

}  // namespace shmtrain
