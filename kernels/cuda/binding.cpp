// torch extension glue for tree_kernels.cu: checks tensors, then calls the raw launchers on the
// current CUDA stream. Built by homespec/kernels/select.py with torch.utils.cpp_extension.load.

#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

namespace homespec {
void launch_greedy_paths(const int64_t*, const int64_t*, const int64_t*, int64_t*, int64_t*, int, cudaStream_t);
void launch_sampled_paths(const int64_t*, const int64_t*, const double*, int64_t, const double*, double, int64_t*,
                          int64_t*, int, cudaStream_t);
template <typename T>
void launch_compact_kv(T*, T*, const int64_t*, int, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
void launch_tree_mask(const int64_t*, int8_t*, int, int64_t, cudaStream_t);
}  // namespace homespec

namespace {

constexpr int64_t kMaxTree = 1024;

void check(const torch::Tensor& t, torch::ScalarType type, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.scalar_type() == type, name, " has the wrong dtype");
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

void greedy_paths(torch::Tensor tokens, torch::Tensor parents, torch::Tensor target, torch::Tensor path,
                  torch::Tensor info) {
  for (auto* t : {&tokens, &parents, &target, &path, &info}) check(*t, torch::kLong, "greedy_paths argument");
  int64_t T = tokens.size(0);
  TORCH_CHECK(T >= 1 && T <= kMaxTree, "draft tree must have 1..1024 nodes");
  homespec::launch_greedy_paths(tokens.data_ptr<int64_t>(), parents.data_ptr<int64_t>(), target.data_ptr<int64_t>(),
                                path.data_ptr<int64_t>(), info.data_ptr<int64_t>(), (int)T, stream());
}

void sampled_paths(torch::Tensor tokens, torch::Tensor parents, torch::Tensor probs, torch::Tensor coins,
                   double u_final, torch::Tensor path, torch::Tensor info) {
  for (auto* t : {&tokens, &parents, &path, &info}) check(*t, torch::kLong, "sampled_paths argument");
  check(probs, torch::kDouble, "probs");
  check(coins, torch::kDouble, "coins");
  int64_t T = tokens.size(0);
  TORCH_CHECK(T >= 1 && T <= kMaxTree && probs.size(0) == T, "probs must be [T, V] with T in 1..1024");
  homespec::launch_sampled_paths(tokens.data_ptr<int64_t>(), parents.data_ptr<int64_t>(), probs.data_ptr<double>(),
                                 probs.size(1), coins.data_ptr<double>(), u_final, path.data_ptr<int64_t>(),
                                 info.data_ptr<int64_t>(), (int)T, stream());
}

void compact_kv(torch::Tensor k, torch::Tensor v, torch::Tensor nodes, int64_t start) {
  TORCH_CHECK(k.is_cuda() && v.is_cuda() && k.is_contiguous() && v.is_contiguous(), "caches must be contiguous CUDA tensors");
  TORCH_CHECK(k.dim() == 4 && k.sizes() == v.sizes() && k.scalar_type() == v.scalar_type(), "caches must both be [L, Hkv, C, D]");
  check(nodes, torch::kLong, "nodes");
  int64_t rows = k.size(0) * k.size(1), C = k.size(2), D = k.size(3);
  TORCH_CHECK(start + nodes.size(0) <= C, "compaction runs past the cache");
  int n = (int)nodes.size(0);
  if (k.element_size() == 2) {
    homespec::launch_compact_kv<uint16_t>((uint16_t*)k.data_ptr(), (uint16_t*)v.data_ptr(), nodes.data_ptr<int64_t>(), n,
                                          start, rows, C, D, stream());
  } else {
    TORCH_CHECK(k.element_size() == 4, "caches must be 16- or 32-bit floats");
    homespec::launch_compact_kv<float>((float*)k.data_ptr(), (float*)v.data_ptr(), nodes.data_ptr<int64_t>(), n, start,
                                       rows, C, D, stream());
  }
}

void tree_mask(torch::Tensor parents, torch::Tensor out, int64_t n_past) {
  check(parents, torch::kLong, "parents");
  check(out, torch::kChar, "out");
  int64_t T = parents.size(0);
  TORCH_CHECK(out.size(0) == T && out.size(1) == n_past + T, "out must be [T, n_past + T]");
  homespec::launch_tree_mask(parents.data_ptr<int64_t>(), out.data_ptr<int8_t>(), (int)T, n_past, stream());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("greedy_paths", &greedy_paths, "greedy tree acceptance");
  m.def("sampled_paths", &sampled_paths, "tree rejection sampling with explicit uniforms");
  m.def("compact_kv", &compact_kv, "accepted-path KV compaction, in place");
  m.def("tree_mask", &tree_mask, "tree attention mask over the committed prefix and the tree");
}
