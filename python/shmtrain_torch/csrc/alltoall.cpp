#include "alltoall.h"

#include "tensors.h"

namespace shmtrain {

// The byte lengths of dim 0's parts of t: split sizes in rows, or world equal parts.
static std::vector<size_t> part_bytes(const at::Tensor &t, const std::vector<int64_t> &splits, int world,
                                      const char *side)
{
    TORCH_CHECK(t.dim() >= 1, "shm backend: all_to_all_single: the ", side, " has no dim 0 to split");
    const int64_t rows = t.size(0);
    const size_t row_bytes = rows ? (size_t)t.nbytes() / (size_t)rows : 0;
    std::vector<size_t> bytes((size_t)world);
    if (splits.empty()) {
        TORCH_CHECK(rows % world == 0, "shm backend: all_to_all_single: the ", side, "'s ", rows,
                    " rows do not split into ", world, " equal parts; give its split sizes");
        for (auto &b : bytes)
            b = (size_t)(rows / world) * row_bytes;
        return bytes;
    }
    TORCH_CHECK((int)splits.size() == world, "shm backend: all_to_all_single: ", splits.size(), " ", side,
                " split sizes for a world of ", world);
    int64_t total = 0;
    for (int q = 0; q < world; q++) {
        TORCH_CHECK(splits[(size_t)q] >= 0, "shm backend: all_to_all_single: a negative ", side, " split size");
        total += splits[(size_t)q];
        bytes[(size_t)q] = (size_t)splits[(size_t)q] * row_bytes;
    }
    TORCH_CHECK(total == rows, "shm backend: all_to_all_single: the ", side, " split sizes add up to ", total,
                ", its dim 0 is ", rows);
    return bytes;
}

AllToAllBlocks blocks_of_splits(const at::Tensor &output, const at::Tensor &input,
                                const std::vector<int64_t> &out_splits, const std::vector<int64_t> &in_splits,
                                int world)
{
    check_cpu(output, "all_to_all_single");
    check_cpu(input, "all_to_all_single");
    TORCH_CHECK(output.is_contiguous() && input.is_contiguous(), "shm backend: all_to_all_single: the input and "
                "output must be contiguous");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "shm backend: all_to_all_single: the input is ",
                input.scalar_type(), ", the output ", output.scalar_type());
    AllToAllBlocks b;
    b.send_len = part_bytes(input, in_splits, world, "input");
    b.recv_len = part_bytes(output, out_splits, world, "output");
    const char *in = (const char *)input.data_ptr();
    char *out = (char *)output.data_ptr();
    for (int q = 0; q < world; q++) {
        b.send.push_back(in);
        b.recv.push_back(out);
        in += b.send_len[(size_t)q];
        out += b.recv_len[(size_t)q];
    }
    return b;
}

AllToAllBlocks blocks_of_lists(const std::vector<at::Tensor> &outputs, const std::vector<at::Tensor> &inputs,
                               int world)
{
    TORCH_CHECK((int)outputs.size() == world && (int)inputs.size() == world, "shm backend: all_to_all: ",
                inputs.size(), " inputs and ", outputs.size(), " outputs for a world of ", world);
    AllToAllBlocks b;
    for (int q = 0; q < world; q++) {
        const at::Tensor &in = inputs[(size_t)q], &out = outputs[(size_t)q];
        check_cpu(in, "all_to_all");
        check_cpu(out, "all_to_all");
        TORCH_CHECK(in.is_contiguous() && out.is_contiguous(), "shm backend: all_to_all: the tensors must be "
                    "contiguous");
        TORCH_CHECK(in.scalar_type() == out.scalar_type(), "shm backend: all_to_all: input ", q, " is ",
                    in.scalar_type(), ", output ", q, " ", out.scalar_type());
        b.send.push_back(in.data_ptr());
        b.send_len.push_back((size_t)in.nbytes());
        b.recv.push_back(out.data_ptr());
        b.recv_len.push_back((size_t)out.nbytes());
    }
    return b;
}

void run_alltoall(st_group *g, const AllToAllBlocks &b, const char *what)
{
    check(st_alltoall(g, b.send.data(), b.send_len.data(), b.recv.data(), b.recv_len.data()), what);
}

}  // namespace shmtrain
