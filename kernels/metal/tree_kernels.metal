// Metal kernels for the speculative loop's small steps (reference: homespec/kernels/reference.py).
// Compiled at run time by torch.mps.compile_shader (homespec/kernels/select.py); Python ints arrive
// as 64-bit `constant long&`. Sampled acceptance is not ported: the torch reference runs on
// the MPS tensors instead.

#include <metal_stdlib>
using namespace metal;

// Greedy acceptance: one threadgroup, thread i climbs from node i to the root checking each
// node against the target's argmax after its parent; the deepest accepted node wins (lowest
// index among equals), then thread 0 writes its path root first.
kernel void greedy_paths(device const long* tokens [[buffer(0)]],
                         device const long* parents [[buffer(1)]],
                         device const long* target [[buffer(2)]],
                         device long* path [[buffer(3)]],
                         device long* info [[buffer(4)]],
                         constant long& T [[buffer(5)]],
                         uint i [[thread_position_in_threadgroup]],
                         uint n_threads [[threads_per_threadgroup]]) {
  threadgroup long keys[1024];
  long key = -1;
  if ((long)i < T) {
    bool ok = true;
    long d = 0;
    long cur = i;
    while (parents[cur] >= 0) {
      long p = parents[cur];
      ok = ok && tokens[cur] == target[p];
      cur = p;
      ++d;
    }
    if (ok) key = d * 1024 + (1023 - (long)i);
  }
  keys[i] = key;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = n_threads / 2; s > 0; s >>= 1) {
    if (i < s) keys[i] = max(keys[i], keys[i + s]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  long best = 1023 - keys[0] % 1024;
  long best_depth = keys[0] / 1024;
  if ((long)i < T && (long)i > best_depth) path[i] = -1;
  if (i == 0) {
    long cur = best;
    for (long d = best_depth; d >= 0; --d) {
      path[d] = cur;
      cur = parents[cur];
    }
    info[0] = best_depth + 1;
    info[1] = target[best];
  }
}

// Tree mask: grid (n_past + T, T); thread (j, row) writes mask[row, j].
kernel void tree_mask(device const long* parents [[buffer(0)]],
                      device char* out [[buffer(1)]],
                      constant long& T [[buffer(2)]],
                      constant long& n_past [[buffer(3)]],
                      uint2 pos [[thread_position_in_grid]]) {
  long j = pos.x, row = pos.y;
  long width = n_past + T;
  if (j >= width || row >= T) return;
  char v = 1;
  if (j >= n_past) {
    long node = j - n_past;
    v = 0;
    for (long cur = row; cur >= 0; cur = parents[cur]) {
      if (cur == node) { v = 1; break; }
    }
  }
  out[row * width + j] = v;
}

// KV compaction: grid (D, L*Hkv); each thread moves element d of its rows in node order
// (nodes[i] >= i, so a slot is only a source for a node the same thread handled earlier).
#define COMPACT_KV(NAME, TYPE)                                                                 \
  kernel void NAME(device TYPE* k [[buffer(0)]], device TYPE* v [[buffer(1)]],                 \
                   device const long* nodes [[buffer(2)]], constant long& n [[buffer(3)]],     \
                   constant long& start [[buffer(4)]], constant long& row_stride [[buffer(5)]],\
                   constant long& D [[buffer(6)]], uint2 pos [[thread_position_in_grid]]) {    \
    long d = pos.x;                                                                            \
    if (d >= D) return;                                                                        \
    long base = (long)pos.y * row_stride;                                                      \
    for (long i = 0; i < n; ++i) {                                                             \
      long src = base + (start + nodes[i]) * D + d;                                            \
      long dst = base + (start + i) * D + d;                                                   \
      k[dst] = k[src];                                                                         \
      v[dst] = v[src];                                                                         \
    }                                                                                          \
  }

COMPACT_KV(compact_kv_half, half)
COMPACT_KV(compact_kv_float, float)
COMPACT_KV(compact_kv_bfloat, bfloat)
