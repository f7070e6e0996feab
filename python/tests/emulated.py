"""EmulatedLibrary: the C ABI of libfa_python.so computed in float64 on CPU tensors, so that the
package's Python layer (the wrappers, the torch.library operators, torch.compile of a model that
calls them, the FlashAttention-compatible functions) is checked on a machine with torch and no
GPU. The `emulated` fixture (conftest.py) puts it in place of the library."""
import ctypes

from conftest import fa


class EmulatedLibrary:
    """The C ABI's contract computed in float64 on CPU tensors reached through their raw
    pointers (fp32 only): what the kernels must compute, so that the wrappers around them can be
    checked without a GPU. Every call is recorded (name, kind); each backward's heads and K/V
    heads too (bwd_heads), to show whether K and V were repeated."""

    # The fixed-length backward that takes grouped K/V heads, as the real registry declares it
    # (AttentionBwdKernel::gqa); fa_py_supported_ex refuses grouped heads for every other.
    GROUPED_BWD = "07/bwd_v1_tma_wgmma"
    # The varlen backward that takes them (VarlenBwdKernel::gqa), listed for sm_90 as the real one.
    GROUPED_VARLEN_BWD = "09/hopper_bwd_v1_varlen"

    def __init__(self, torch):
        self.torch = torch
        self.calls = []
        self.bwd_heads = []
        self.picks = []
        self.pick_result = b""
        self.error = b"emulated"

    # memory by address
    def view(self, ptr, n, kind="f32"):
        torch = self.torch
        ctype, dtype = {"f32": (ctypes.c_float, torch.float32),
                        "i32": (ctypes.c_int32, torch.int32),
                        "i64": (ctypes.c_int64, torch.int64)}[kind]
        if n == 0:
            return torch.empty(0, dtype=dtype)
        assert ptr, "null pointer for %d elements" % n
        return torch.frombuffer((ctype * n).from_address(ptr), dtype=dtype)

    def fa_py_last_error(self):
        return self.error

    def fa_py_list_serving_kernels(self):
        rows = ["varlen_fwd\t09/v1_varlen\tfp32\t32\t80\tgqa\t\t\tx",
                "varlen_fwd\t09/v2_window\tfp32\t32\t80\tgqa,window\t\t\tx",
                "varlen_bwd\t09/bwd_v1_varlen\tfp32\t32\t80\t\t\t09/v1_varlen\tx",
                "varlen_bwd\t09/bwd_v2_window\tfp32\t32\t80\twindow\t\t09/v2_window\tx",
                "varlen_bwd\t%s\tfp32\t32\t90\tgqa\t\t09/v1_varlen\tx" % self.GROUPED_VARLEN_BWD,
                "paged_fwd\t09/paged_v1_decode\tfp32\t32\t80\tgqa,decoding\t4,8\t\tx",
                "paged_fwd\t09/paged_v2_prefill\tfp32\t32\t80\tgqa\t4,8\t\tx",
                "append\t09/append_kv\tfp32\t\t70\t\t\t\tx"]
        return ("\n".join(rows) + "\n").encode()

    def fa_py_list_kernels(self):
        rows = ["fwd\t%s\tfp32\t32\t80\t1\tx" % fa.DEFAULT_FWD,
                "fwd\t08/v5_swizzled_ring\tfp32\t32\t80\t1\tx",
                "fwd\t08/v6_last_block_merge\tfp32\t32\t80\t1\tx",
                "bwd\t%s\tfp32\t32\t80\t1\tx" % fa.DEFAULT_BWD,
                "bwd\t%s\tfp32\t32\t90\t1\tx" % self.GROUPED_BWD]
        return ("\n".join(rows) + "\n").encode()

    def fa_py_supported_ex(self, kind, name, dtype, head_dim, gqa, window, page_size):
        grouped = {b"bwd": self.GROUPED_BWD, b"varlen_bwd": self.GROUPED_VARLEN_BWD}
        if kind in grouped and gqa and name.decode() != grouped[kind]:
            self.error = b"this kernel takes heads_kv == heads only (no grouped-query attention)"
            return 2  # FA_PY_UNSUPPORTED
        return 0

    # The dispatch, as the real table shapes it (common/dispatch.cpp) without the GPU rows: the
    # window and grouped heads to chapter 09's kernels, decoding to chapter 08's, the rest to
    # chapter 05's and 06's final rungs.
    def fa_py_pick(self, op, dtype, head_dim, seq_q, seq_k, causal, window, gqa, page_size,
                   deterministic, sm):
        op = op.decode()
        if op == "fwd":
            choice = (("09/v2_window", "varlen_fwd") if window else
                      ("08/v6_last_block_merge", "fwd") if 0 < seq_q <= 16 else
                      ("09/v1_varlen", "varlen_fwd") if gqa else (fa.DEFAULT_FWD, "fwd"))
        elif op == "bwd":
            choice = ("09/bwd_v2_window", "varlen_bwd") if window else (fa.DEFAULT_BWD, "bwd")
        elif op == "varlen_fwd":
            choice = ("09/v2_window" if window else "09/v1_varlen", op)
        elif op == "varlen_bwd":
            choice = ("09/bwd_v2_window" if window else "09/bwd_v1_varlen", op)
        else:
            choice = ("09/paged_v1_decode" if seq_q <= 16 else "09/paged_v2_prefill", op)
        self.picks.append((op, choice[0]))
        self.pick_result = ("%s\t%s\t%d\temulated\temulated\tnotes/measured/emulated.log\t"
                            % (choice[0], choice[1], sm or 90)).encode()
        return 0

    def fa_py_pick_result(self):
        return self.pick_result

    def fa_py_dispatch_table(self):
        return b"fwd\t05/v5_fewer_instructions\tsm_80+\temulated\tnotes/measured/emulated.log\n"

    def _attend(self, q, k, v, causal, scale, window):
        from flash_from_scratch.reference import reference_attention
        o, lse = reference_attention(q, k, v, causal, scale or None, window)
        return o, lse

    def fa_py_attention_fwd(self, name, q, k, v, o, lse, b, h, nq, nk, d, dtype, scale, causal,
                            device, stream):
        return self.fa_py_attention_fwd_gqa(name, q, k, v, o, lse, b, h, h, nq, nk, d, dtype,
                                            scale, causal, device, stream)

    def fa_py_attention_fwd_gqa(self, name, q, k, v, o, lse, b, h, hkv, nq, nk, d, dtype, scale,
                                causal, device, stream):
        self.calls.append((name.decode(), "fwd"))
        Q = self.view(q, b * h * nq * d).view(b, h, nq, d)
        K = self.view(k, b * hkv * nk * d).view(b, hkv, nk, d)
        V = self.view(v, b * hkv * nk * d).view(b, hkv, nk, d)
        O, L = self._attend(Q, K, V, causal, scale, (-1, -1))
        self.view(o, b * h * nq * d).copy_(O.flatten())
        self.view(lse, b * h * nq).copy_(L.flatten())
        return 0

    def _grads(self, Q, K, V, dO, causal, scale, window):
        """dQ, dK, dV in float64 from the backward's formulas (notes/06): P from S, dV = P^T dO,
        dS = P o (dO V^T - rowsum(dO o O)), dQ = scale dS K, dK = scale dS^T Q. Written out, not
        taken from autograd: the operators run below autograd, where no graph is recorded."""
        from flash_from_scratch._common import softmax_scale
        from flash_from_scratch.reference import visible_mask
        torch = self.torch
        q, k, v, do = Q.double(), K.double(), V.double(), dO.double()
        scale = softmax_scale(q.shape[-1], scale or None)
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if q.shape[-2] and k.shape[-2]:
            s = s.masked_fill(~visible_mask(q.shape[-2], k.shape[-2], causal, window, q.device),
                              float("-inf"))
        m = s.amax(dim=-1, keepdim=True) if k.shape[-2] else s.sum(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        l = e.sum(dim=-1, keepdim=True)
        p = e / torch.where(l > 0, l, torch.ones_like(l))
        o = torch.matmul(p, v)
        dv = torch.matmul(p.transpose(-2, -1), do)
        dp = torch.matmul(do, v.transpose(-2, -1))
        ds = p * (dp - (do * o).sum(dim=-1, keepdim=True))
        return torch.matmul(ds, k) * scale, torch.matmul(ds.transpose(-2, -1), q) * scale, dv

    def fa_py_attention_bwd(self, name, q, k, v, o, do, lse, dq, dk, dv, delta, ws, b, h, nq, nk,
                            d, dtype, scale, causal, device, stream):
        return self.fa_py_attention_bwd_gqa(name, q, k, v, o, do, lse, dq, dk, dv, delta, ws, b,
                                            h, h, nq, nk, d, dtype, scale, causal, device, stream)

    def fa_py_attention_bwd_gqa(self, name, q, k, v, o, do, lse, dq, dk, dv, delta, ws, b, h, hkv,
                                nq, nk, d, dtype, scale, causal, device, stream):
        """K, V, dK, dV of hkv heads: dK, dV of a K/V head summed over its group."""
        self.calls.append((name.decode(), "bwd"))
        self.bwd_heads.append((h, hkv))
        assert hkv == h or name.decode() == self.GROUPED_BWD, "this backward takes no groups"
        self.view(ws, b * h * nq * d).zero_()  # the library zeroes it first (fa_python.cpp)
        Q = self.view(q, b * h * nq * d).view(b, h, nq, d)
        K = self.view(k, b * hkv * nk * d).view(b, hkv, nk, d)
        V = self.view(v, b * hkv * nk * d).view(b, hkv, nk, d)
        dO = self.view(do, b * h * nq * d).view(b, h, nq, d)
        g = h // hkv
        gq, gk, gv = self._grads(Q, K.repeat_interleave(g, 1), V.repeat_interleave(g, 1), dO,
                                 causal, scale, (-1, -1))
        gk, gv = (x.reshape(b, hkv, g, nk, d).sum(2) for x in (gk, gv))
        for ptr, x in ((dq, gq), (dk, gk), (dv, gv)):
            self.view(ptr, x.numel()).copy_(x.flatten())
        return 0

    def _varlen(self, cu_q, cu_k, host_q, host_k, batch):
        hq = self.view(host_q, batch + 1, "i64").tolist()
        hk = self.view(host_k, batch + 1, "i64").tolist()
        # The device offsets must be the host ones, as int32.
        assert self.view(cu_q, batch + 1, "i32").tolist() == hq
        assert self.view(cu_k, batch + 1, "i32").tolist() == hk
        return hq, hk

    def fa_py_varlen_fwd(self, name, q, k, v, o, lse, cu_q, cu_k, host_q, host_k, batch, h, hkv,
                         d, dtype, scale, causal, wl, wr, device, stream):
        self.calls.append((name.decode(), "varlen_fwd"))
        hq, hk = self._varlen(cu_q, cu_k, host_q, host_k, batch)
        tq, tk, hkv = hq[-1], hk[-1], hkv or h
        if tq == 0:
            return 0
        Q = self.view(q, h * tq * d).view(h, tq, d)
        K = self.view(k, hkv * tk * d).view(hkv, tk, d)
        V = self.view(v, hkv * tk * d).view(hkv, tk, d)
        O = self.view(o, h * tq * d).view(h, tq, d)
        L = self.view(lse, h * tq).view(h, tq)
        for b in range(batch):
            qs, ks = slice(hq[b], hq[b + 1]), slice(hk[b], hk[b + 1])
            ob, lb = self._attend(Q[:, qs], K[:, ks], V[:, ks], causal, scale, (wl, wr))
            O[:, qs] = ob.float()
            L[:, qs] = lb.float()
        return 0

    def fa_py_varlen_bwd(self, name, q, k, v, o, do, lse, dq, dk, dv, delta, ws, cu_q, cu_k,
                         host_q, host_k, batch, h, hkv, d, dtype, scale, causal, wl, wr, device,
                         stream):
        """K, V, dK, dV of hkv heads: dK, dV of a K/V head summed over its group."""
        self.calls.append((name.decode(), "varlen_bwd"))
        hkv = hkv or h
        self.bwd_heads.append((h, hkv))
        assert hkv == h or name.decode() == self.GROUPED_VARLEN_BWD, "this backward takes no groups"
        hq, hk = self._varlen(cu_q, cu_k, host_q, host_k, batch)
        tq, tk, g = hq[-1], hk[-1], h // hkv
        assert not self.view(ws, h * tq * d).any(), "workspace not zeroed"
        Q = self.view(q, h * tq * d).view(h, tq, d)
        K = self.view(k, hkv * tk * d).view(hkv, tk, d)
        V = self.view(v, hkv * tk * d).view(hkv, tk, d)
        dO = self.view(do, h * tq * d).view(h, tq, d)
        dQ = self.view(dq, h * tq * d).view(h, tq, d)
        dK = self.view(dk, hkv * tk * d).view(hkv, tk, d)
        dV = self.view(dv, hkv * tk * d).view(hkv, tk, d)
        dK.zero_()
        dV.zero_()
        for b in range(batch):
            qs, ks = slice(hq[b], hq[b + 1]), slice(hk[b], hk[b + 1])
            gq, gk, gv = self._grads(Q[:, qs], K[:, ks].repeat_interleave(g, 0),
                                     V[:, ks].repeat_interleave(g, 0), dO[:, qs], causal, scale,
                                     (wl, wr))
            gk, gv = (x.reshape(hkv, g, -1, d).sum(1) for x in (gk, gv))
            dQ[:, qs], dK[:, ks], dV[:, ks] = gq.float(), gk.float(), gv.float()
        return 0

    def _gather(self, pages, table, n, page_size):
        """One sequence's keys [H_kv, n, D] from the pages through its table row."""
        torch = self.torch
        rows = [pages[:, table[j // page_size], j % page_size] for j in range(n)]
        return (torch.stack(rows, dim=1) if rows
                else pages.new_zeros(pages.shape[1], 0, pages.shape[3]))

    def fa_py_paged_fwd(self, name, q, kp, vp, o, lse, table, seqlens, host_seqlens, batch, h,
                        hkv, seq_q, d, page_size, num_pages, max_pages, dtype, scale, causal,
                        device, stream):
        self.calls.append((name.decode(), "paged_fwd"))
        lens = self.view(host_seqlens, batch, "i64").tolist()
        assert self.view(seqlens, batch, "i32").tolist() == lens
        T = self.view(table, batch * max_pages, "i32").view(batch, max_pages).tolist()
        n_el = num_pages * hkv * page_size * d
        Kp = self.view(kp, n_el).view(num_pages, hkv, page_size, d).permute(1, 0, 2, 3)
        Vp = self.view(vp, n_el).view(num_pages, hkv, page_size, d).permute(1, 0, 2, 3)
        Q = self.view(q, batch * h * seq_q * d).view(batch, h, seq_q, d)
        O = self.view(o, batch * h * seq_q * d).view(batch, h, seq_q, d)
        L = self.view(lse, batch * h * seq_q).view(batch, h, seq_q)
        for b in range(batch):
            K = self._gather(Kp, T[b], lens[b], page_size)
            V = self._gather(Vp, T[b], lens[b], page_size)
            ob, lb = self._attend(Q[b:b + 1], K.unsqueeze(0), V.unsqueeze(0), causal, scale,
                                  (-1, -1))
            O[b], L[b] = ob[0].float(), lb[0].float()
        return 0

    def fa_py_paged_append(self, name, k_new, v_new, kp, vp, table, seqlens, host_seqlens, batch,
                           hkv, seq_q, d, page_size, num_pages, max_pages, dtype, device, stream):
        self.calls.append((name.decode(), "append"))
        lens = self.view(host_seqlens, batch, "i64").tolist()
        T = self.view(table, batch * max_pages, "i32").view(batch, max_pages).tolist()
        n_el = num_pages * hkv * page_size * d
        for new, pages in ((k_new, kp), (v_new, vp)):
            P = self.view(pages, n_el).view(num_pages, hkv, page_size, d)
            N = self.view(new, batch * hkv * seq_q * d).view(batch, hkv, seq_q, d)
            for b in range(batch):
                for i in range(seq_q):
                    j = lens[b] - seq_q + i
                    P[T[b][j // page_size], :, j % page_size] = N[b, :, i]
        return 0
