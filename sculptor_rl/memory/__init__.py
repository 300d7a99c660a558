"""Cross-episode memory: a store of past episodes kept between tasks, and retrieval from it.

Unlike an environment's context, this memory lives ACROSS rollouts: a driver adds entries between rounds, saves
the store to JSONL, and every rollout of one GRPO group reads the same frozen snapshot (`MemoryStore.frozen`,
`load_snapshot`). Used by MemToolAgent (its entries m = (q, a, f, r): `envs.memtoolagent.entry`) and ToolMem.

- `store`: `MemoryStore` of plain-dict entries, atomic JSONL save/load, immutable snapshots;
- `retrieval`: BM25 similarity of queries, fixed top-k, and the paper's Dynamic "n" (Algorithm 1).
"""

from .retrieval import bm25_scores, dynamic_n, select, top_k
from .store import MemoryStore, Snapshot, load_snapshot

__all__ = ["MemoryStore", "Snapshot", "bm25_scores", "dynamic_n", "load_snapshot", "select", "top_k"]
