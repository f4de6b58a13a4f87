"""Triton kernels for the speculative loop's small steps (reference: homespec/kernels/reference.py).

Each is a handful of microseconds of work that would otherwise be tens of tiny launches or a
host round trip per node. They run on CUDA tensors, and on CPU tensors under TRITON_INTERPRET=1
(how tests/kernels/test_kernels.py checks them against the torch reference).

Loaded by homespec/kernels/select.py from this file's path (it ships as package data); the
launch wrappers at the bottom are the only names it uses.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _greedy_paths_kernel(tok_ptr, par_ptr, tgt_ptr, path_ptr, info_ptr, T, BLOCK: tl.constexpr):
    # One program; lane i owns tree node i and climbs to the root one level per iteration,
    # checking that every node it passes matches the target's argmax after its parent.
    i = tl.arange(0, BLOCK)
    live = i < T
    cur = i.to(tl.int64)  # loop-carried: parents are int64, so it must start as int64 too
    ok = live
    depth = tl.zeros([BLOCK], dtype=tl.int64)
    for _ in range(0, T):
        p = tl.load(par_ptr + cur, mask=live, other=-1)
        up = p >= 0
        t_cur = tl.load(tok_ptr + cur, mask=live, other=0)
        t_tgt = tl.load(tgt_ptr + p, mask=live & up, other=0)
        ok = ok & ((~up) | (t_cur == t_tgt))
        depth += up.to(tl.int64)
        cur = tl.where(up, p, cur)
    # deepest accepted node, lowest index among equals (the key orders depth, then -index)
    key = tl.where(ok, depth * BLOCK + (BLOCK - 1 - i), -1)
    best_key = tl.max(key, axis=0)
    best = BLOCK - 1 - best_key % BLOCK
    best_depth = best_key // BLOCK
    # nodes on the path: best and its ancestors; node j goes to slot depth[j]
    on = i == best
    walk = best
    for _ in range(0, T):
        walk = tl.load(par_ptr + walk)
        walk = tl.where(walk >= 0, walk, best)  # at the root keep re-marking best: harmless
        on = on | (i == walk)
    tl.store(path_ptr + depth, i.to(tl.int64), mask=live & on)
    tl.store(path_ptr + i, tl.full([BLOCK], -1, tl.int64), mask=live & (i > best_depth))
    tl.store(info_ptr + 0, best_depth + 1)
    tl.store(info_ptr + 1, tl.load(tgt_ptr + best))


@triton.jit
def _sampled_paths_kernel(tok_ptr, par_ptr, prob_ptr, stride_p, coin_ptr, u_final, path_ptr, info_ptr,
                          T, V, BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr):
    # One program walks the tree from the root. The residual r = p[u] minus rejected children's
    # tokens is never materialised: its mass is tracked as a scalar and r[x] is p[u, x] unless
    # x belongs to an earlier-rejected sibling (then 0), exactly the reference's zeroing.
    i = tl.arange(0, BLOCK_T)
    live = i < T
    tok = tl.load(tok_ptr + i, mask=live, other=-1)
    par = tl.load(par_ptr + i, mask=live, other=-2)
    tl.store(path_ptr + 0, 0)
    u = 0
    n = 1
    nxt = -1
    while nxt < 0:
        row = prob_ptr + u * stride_p
        mass = tl.full([], 0.0, tl.float64)
        for v0 in range(0, V, BLOCK_V):
            vv = v0 + tl.arange(0, BLOCK_V)
            mass += tl.sum(tl.load(row + vv, mask=vv < V, other=0.0).to(tl.float64), axis=0)
        accepted = -1
        rejected = (i < 0)  # [BLOCK_T] children of u rejected so far
        for c in range(1, T):
            pc = tl.load(par_ptr + c)
            if (pc == u) & (accepted < 0):
                x = tl.load(tok_ptr + c)
                dup = tl.max((rejected & (tok == x)).to(tl.int32), axis=0) > 0
                rx = tl.where(dup, 0.0, tl.load(row + x).to(tl.float64))
                coin = tl.load(coin_ptr + c).to(tl.float64)
                if (mass > 0) & (coin * mass < rx):
                    accepted = c
                else:
                    mass = mass - rx
                    rejected = rejected | (i == c)
        if accepted >= 0:
            tl.store(path_ptr + n, accepted)
            n += 1
            u = accepted
        else:
            # inverse-CDF draw from the residual over V, in blocks with a running total
            goal = u_final * mass
            run = tl.full([], 0.0, tl.float64)
            found = -1
            rej_tok = tl.where(rejected, tok, -1)
            for v0 in range(0, V, BLOCK_V):
                vv = v0 + tl.arange(0, BLOCK_V)
                pv = tl.load(row + vv, mask=vv < V, other=0.0).to(tl.float64)
                gone = tl.max((vv[:, None] == rej_tok[None, :]).to(tl.int32), axis=1) > 0  # [BLOCK_V]
                pv = tl.where(gone, 0.0, pv)
                cs = tl.cumsum(pv, axis=0) + run
                hit = (cs > goal) & (vv < V) & (pv > 0)
                first = tl.min(tl.where(hit, vv, V), axis=0)
                found = tl.where((found < 0) & (first < V), first, found)
                run += tl.sum(pv, axis=0)
            if found < 0:  # rounding only: every token of p[u] was a rejected child
                best_p = tl.full([], -1.0, tl.float64)
                for v0 in range(0, V, BLOCK_V):
                    vv = v0 + tl.arange(0, BLOCK_V)
                    pv = tl.load(row + vv, mask=vv < V, other=-1.0).to(tl.float64)
                    m = tl.max(pv, axis=0)
                    arg = tl.min(tl.where(pv == m, vv, V), axis=0)
                    found = tl.where(m > best_p, arg, found)
                    best_p = tl.maximum(best_p, m)
            nxt = found
    tl.store(path_ptr + i, tl.full([BLOCK_T], -1, tl.int64), mask=live & (i >= n))
    tl.store(info_ptr + 0, n)
    tl.store(info_ptr + 1, nxt)


@triton.jit
def _compact_kv_kernel(k_ptr, v_ptr, node_ptr, n, start, stride_row, stride_slot, D, BLOCK_D: tl.constexpr):
    # Program (layer*head, d-block) copies its rows in node order. nodes[i] >= i, so slot
    # start+i is only ever a source for a node handled before i: the in-order loop per lane
    # never overwrites a row it still has to read.
    r = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    dm = d < D
    base = r.to(tl.int64) * stride_row
    for i in range(0, n):
        src = start + tl.load(node_ptr + i)
        dst = start + i
        kv = tl.load(k_ptr + base + src * stride_slot + d, mask=dm)
        vv = tl.load(v_ptr + base + src * stride_slot + d, mask=dm)
        tl.store(k_ptr + base + dst * stride_slot + d, kv, mask=dm)
        tl.store(v_ptr + base + dst * stride_slot + d, vv, mask=dm)


@triton.jit
def _tree_mask_kernel(par_ptr, out_ptr, T, n_past, width, BLOCK_T: tl.constexpr, BLOCK_P: tl.constexpr):
    # Program i writes row i: ones over the committed prefix, then i's ancestor set.
    row = tl.program_id(0)
    base = out_ptr + row.to(tl.int64) * width
    for p0 in range(0, n_past, BLOCK_P):
        pp = p0 + tl.arange(0, BLOCK_P)
        tl.store(base + pp, tl.full([BLOCK_P], 1, tl.int8), mask=pp < n_past)
    j = tl.arange(0, BLOCK_T)
    anc = j == row
    row64 = row.to(tl.int64)
    cur = row64  # loop-carried: parents are int64
    for _ in range(0, T):
        cur = tl.load(par_ptr + cur)
        cur = tl.where(cur >= 0, cur, row64)
        anc = anc | (j == cur)
    tl.store(base + n_past + j, anc.to(tl.int8), mask=j < T)


def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(int(n)))


def verify_greedy_paths(tokens: torch.Tensor, parents: torch.Tensor, target: torch.Tensor):
    t = int(tokens.shape[0])
    path = torch.empty(t, dtype=torch.int64, device=tokens.device)
    info = torch.empty(2, dtype=torch.int64, device=tokens.device)
    _greedy_paths_kernel[(1,)](tokens.long().contiguous(), parents.long().contiguous(), target.long().contiguous(),
                               path, info, t, BLOCK=_block(t))
    return path, info[0], info[1]


def verify_sampled_paths(tokens, parents, probs, coins, u_final: float):
    t, v = int(probs.shape[0]), int(probs.shape[1])
    probs = probs.contiguous()
    path = torch.empty(t, dtype=torch.int64, device=tokens.device)
    info = torch.empty(2, dtype=torch.int64, device=tokens.device)
    _sampled_paths_kernel[(1,)](tokens.long().contiguous(), parents.long().contiguous(), probs, probs.stride(0),
                                coins.contiguous(), float(u_final), path, info, t, v,
                                BLOCK_T=_block(t), BLOCK_V=1024)
    return path, info[0], info[1]


def compact_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, start: int, nodes: torch.Tensor) -> None:
    L, H, C, D = k_cache.shape
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("compact_kv needs contiguous [L, Hkv, C, D] caches")
    block_d = min(128, _block(D))
    grid = (L * H, triton.cdiv(D, block_d))
    _compact_kv_kernel[grid](k_cache, v_cache, nodes.long().contiguous(), int(nodes.shape[0]), int(start),
                             C * D, D, D, BLOCK_D=block_d)


def tree_mask(parents: torch.Tensor, n_past: int) -> torch.Tensor:
    t = int(parents.shape[0])
    out = torch.empty(t, n_past + t, dtype=torch.int8, device=parents.device)
    _tree_mask_kernel[(t,)](parents.long().contiguous(), out, t, int(n_past), n_past + t,
                            BLOCK_T=_block(t), BLOCK_P=1024)
    return out.view(torch.bool)
