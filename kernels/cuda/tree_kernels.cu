// CUDA kernels for the speculative loop's small steps (reference: homespec/kernels/reference.py).
//
// Plain CUDA with raw pointers and C++ launchers, no torch headers: `nvcc -c` or `nvcc -ptx`
// compiles this file alone (tests/test_kernels.py does), and binding.cpp adapts tensors to it.
// Trees are small (EAGLE-2's default is 60 nodes), so the tree kernels run one block with one
// thread per node and keep the tree in shared memory; T is capped at MAX_TREE.

#include <cstdint>
#include <cuda_runtime.h>

namespace homespec {

constexpr int MAX_TREE = 1024;

// ---- greedy acceptance ---------------------------------------------------------------------
// Thread i climbs from node i to the root, checking that every node on the way equals the
// target's argmax after its parent. Then a block reduction picks the deepest accepted node
// (lowest index among equals) and its path is written root first.
__global__ void greedy_paths_kernel(const int64_t* tokens, const int64_t* parents, const int64_t* target,
                                    int64_t* path, int64_t* info, int T) {
  __shared__ int64_t par[MAX_TREE];
  __shared__ long long best_key;
  int i = threadIdx.x;
  if (i < T) par[i] = parents[i];
  if (i == 0) best_key = -1;
  __syncthreads();
  if (i < T) {
    bool ok = true;
    int d = 0;
    int64_t cur = i;
    while (par[cur] >= 0) {
      int64_t p = par[cur];
      ok = ok && tokens[cur] == target[p];
      cur = p;
      ++d;
    }
    if (ok) atomicMax(&best_key, (long long)d * MAX_TREE + (MAX_TREE - 1 - i));
  }
  __syncthreads();
  int best = MAX_TREE - 1 - (int)(best_key % MAX_TREE);
  int best_depth = (int)(best_key / MAX_TREE);
  if (i < T && i > best_depth) path[i] = -1;
  if (i == 0) {
    int64_t cur = best;
    for (int d = best_depth; d >= 0; --d) {  // one thread: the path is at most T long
      path[d] = cur;
      cur = par[cur];
    }
    info[0] = best_depth + 1;
    info[1] = target[best];
  }
}

// ---- sampled acceptance (deterministic children, explicit uniforms) --------------------------
// A single thread walks the tree; the block cooperates on the sums over the vocabulary.
// The residual r = p[u] minus rejected children's tokens is never stored: its mass is a scalar
// and r[x] is p[u, x] unless an earlier sibling with token x was rejected.
__device__ double block_sum(double v, double* scratch) {
  int i = threadIdx.x;
  scratch[i] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (i < s) scratch[i] += scratch[i + s];
    __syncthreads();
  }
  double out = scratch[0];
  __syncthreads();
  return out;
}

__global__ void sampled_paths_kernel(const int64_t* tokens, const int64_t* parents, const double* probs, int64_t V,
                                     const double* coins, double u_final, int64_t* path, int64_t* info, int T) {
  __shared__ double scratch[1024];
  __shared__ int s_u, s_n, s_accepted;
  __shared__ int64_t s_next;
  __shared__ unsigned char rejected[MAX_TREE];
  int tid = threadIdx.x;
  if (tid == 0) { s_u = 0; s_n = 1; path[0] = 0; s_next = -1; }
  __syncthreads();
  while (s_next < 0) {
    int u = s_u;
    const double* row = probs + (int64_t)u * V;
    double part = 0.0;
    for (int64_t v = tid; v < V; v += blockDim.x) part += row[v];
    double mass = block_sum(part, scratch);
    if (tid == 0) {
      s_accepted = -1;
      for (int c = 1; c < T; ++c) rejected[c] = 0;
      for (int c = u + 1; c < T && s_accepted < 0; ++c) {
        if (parents[c] != u) continue;
        int64_t x = tokens[c];
        bool dup = false;
        for (int c2 = u + 1; c2 < c; ++c2) dup = dup || (rejected[c2] && tokens[c2] == x);
        double rx = dup ? 0.0 : row[x];
        if (mass > 0 && coins[c] * mass < rx) {
          s_accepted = c;
        } else {
          mass -= rx;
          rejected[c] = 1;
        }
      }
      if (s_accepted >= 0) { path[s_n++] = s_accepted; s_u = s_accepted; }
      scratch[0] = mass;
    }
    __syncthreads();
    if (s_accepted >= 0) continue;
    // inverse-CDF draw over the residual: blocks of blockDim.x tokens, prefix sums in shared memory
    mass = scratch[0];
    __syncthreads();
    double goal = u_final * mass, run = 0.0;
    int64_t found = -1;
    for (int64_t v0 = 0; v0 < V && found < 0; v0 += blockDim.x) {
      int64_t v = v0 + tid;
      double pv = 0.0;
      if (v < V) {
        pv = row[v];
        for (int c = u + 1; c < T; ++c)
          if (rejected[c] && tokens[c] == v) pv = 0.0;
      }
      scratch[tid] = pv;
      __syncthreads();
      if (tid == 0) {  // sequential scan of one block keeps the summation order of a cumsum
        for (int k = 0; k < (int)blockDim.x && v0 + k < V; ++k) {
          double w = scratch[k];
          run += w;
          if (w > 0 && run > goal) { found = v0 + k; break; }
        }
        scratch[0] = (double)found;
      }
      __syncthreads();
      found = (int64_t)scratch[0];
      __syncthreads();
    }
    if (tid == 0) {
      if (found < 0) {  // rounding only: every token of p[u] was a rejected child
        double best = -1.0;
        for (int64_t v = 0; v < V; ++v) if (row[v] > best) { best = row[v]; found = v; }
      }
      s_next = found;
    }
    __syncthreads();
  }
  if (tid < T && tid >= s_n) path[tid] = -1;
  if (tid == 0) { info[0] = s_n; info[1] = s_next; }
}

// ---- accepted-path KV compaction -------------------------------------------------------------
// Block (layer*head) copies its rows in node order; thread d owns element d of every row.
// nodes[i] >= i, so slot start+i is only a source for a node handled earlier by the same thread.
template <typename T>
__global__ void compact_kv_kernel(T* k, T* v, const int64_t* nodes, int n, int64_t start, int64_t C, int64_t D) {
  int64_t base = (int64_t)blockIdx.x * C * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    for (int i = 0; i < n; ++i) {
      int64_t src = base + (start + nodes[i]) * D + d;
      int64_t dst = base + (start + i) * D + d;
      k[dst] = k[src];
      v[dst] = v[src];
    }
  }
}

// ---- tree attention mask -------------------------------------------------------------------------
// Block i writes row i: ones over the committed prefix, zeros over the tree, then its ancestors.
__global__ void tree_mask_kernel(const int64_t* parents, int8_t* out, int T, int64_t n_past) {
  int row = blockIdx.x;
  int64_t width = n_past + T;
  int8_t* base = out + (int64_t)row * width;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) base[j] = j < n_past ? 1 : 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t cur = row; cur >= 0; cur = parents[cur]) base[n_past + cur] = 1;
  }
}

// ---- launchers (called from binding.cpp) ----------------------------------------------------------

static int threads_for(int n) {
  int t = 32;
  while (t < n && t < 1024) t <<= 1;
  return t;
}

void launch_greedy_paths(const int64_t* tokens, const int64_t* parents, const int64_t* target, int64_t* path,
                         int64_t* info, int T, cudaStream_t stream) {
  greedy_paths_kernel<<<1, threads_for(T), 0, stream>>>(tokens, parents, target, path, info, T);
}

void launch_sampled_paths(const int64_t* tokens, const int64_t* parents, const double* probs, int64_t V,
                          const double* coins, double u_final, int64_t* path, int64_t* info, int T, cudaStream_t stream) {
  sampled_paths_kernel<<<1, 256, 0, stream>>>(tokens, parents, probs, V, coins, u_final, path, info, T);
}

template <typename T>
void launch_compact_kv(T* k, T* v, const int64_t* nodes, int n, int64_t start, int64_t rows, int64_t C, int64_t D,
                       cudaStream_t stream) {
  compact_kv_kernel<T><<<(unsigned)rows, threads_for((int)D), 0, stream>>>(k, v, nodes, n, start, C, D);
}

template void launch_compact_kv<uint16_t>(uint16_t*, uint16_t*, const int64_t*, int, int64_t, int64_t, int64_t,
                                          int64_t, cudaStream_t);
template void launch_compact_kv<float>(float*, float*, const int64_t*, int, int64_t, int64_t, int64_t, int64_t,
                                       cudaStream_t);

void launch_tree_mask(const int64_t* parents, int8_t* out, int T, int64_t n_past, cudaStream_t stream) {
  tree_mask_kernel<<<T, 256, 0, stream>>>(parents, out, T, n_past);
}

}  // namespace homespec
