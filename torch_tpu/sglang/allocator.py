"""SGLang's KV-slot allocator with its bookkeeping on the host.

Which KV slots a request owns is integer bookkeeping: the free-page list, the slots handed to
each new token. SGLang's paged allocator keeps it on the model's device and fills it with Triton
kernels; on ``tpu`` every such step would be a device program (and Triton does not run here).
This subclass keeps the free pages on the CPU and allocates with NumPy: the slot ids reach the
device only inside a step's packed metadata. The KV buffers themselves (``kvcache``) stay on
``tpu``. Slot 0 (page 0) is SGLang's padding slot and is never handed out.
"""

import numpy as np
import torch
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator


class HostPagedAllocator(PagedTokenToKVPoolAllocator):
    def __init__(self, size, page_size, dtype, device, kvcache, need_sort):
        super().__init__(size, page_size, dtype, "cpu", kvcache, need_sort)

    def _take_pages(self, count: int):
        if count > len(self.free_pages):
            self.merge_and_sort_free()
        if count > len(self.free_pages):
            return None
        pages = self.free_pages[:count].numpy()
        self.free_pages = self.free_pages[count:]
        return pages

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens, num_new_pages=None):
        """Slots for tokens [prefix, seq) of each request: first the rest of the request's last
        page (after ``last_loc``), then new pages."""
        ps = self.page_size
        prefix = np.asarray(prefix_lens_cpu, dtype=np.int64)
        seq = np.asarray(seq_lens_cpu, dtype=np.int64)
        last = last_loc.cpu().numpy().astype(np.int64)
        fill = np.minimum(np.where(prefix % ps == 0, 0, ps - prefix % ps), seq - prefix)
        new_pages = -(-(seq - prefix - fill) // ps)
        pages = self._take_pages(int(new_pages.sum()))
        if pages is None:
            return None
        out, used = [], 0
        offsets = np.arange(ps, dtype=np.int64)
        for i in range(len(seq)):
            out.append(last[i] + 1 + np.arange(fill[i], dtype=np.int64))
            rest = seq[i] - prefix[i] - fill[i]
            mine = pages[used : used + new_pages[i]]
            used += new_pages[i]
            out.append((mine[:, None] * ps + offsets).reshape(-1)[:rest])
        result = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
        assert len(result) == extend_num_tokens
        return torch.from_numpy(result)

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        """One slot per request for its token at position seq_len - 1."""
        ps = self.page_size
        seq = np.asarray(seq_lens_cpu, dtype=np.int64)
        last = last_loc.cpu().numpy().astype(np.int64)
        starts_page = (seq - 1) % ps == 0
        pages = self._take_pages(int(starts_page.sum()))
        if pages is None:
            return None
        out = last + 1
        out[starts_page] = pages * ps
        return torch.from_numpy(out)
