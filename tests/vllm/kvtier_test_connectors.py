# SPDX-License-Identifier: Apache-2.0
"""Connectors for the vLLM tests that give kvtier a KV layout it cannot
serve, as an engine whose allocation kvtier does not see would."""

from kvtier.vllm import KvtierConnector


class UnmappedKvtierConnector(KvtierConnector):
    """vLLM allocates its KV cache with its own allocator, not in a memfd:
    kvtierd cannot map it."""

    def get_mem_pool_context(self):
        return None
