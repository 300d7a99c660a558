"""TA-Mem (Yuan et al.): tool-augmented memory retrieval for long-term conversational QA.

`env` (the environment), `conversations` (the `tamem` family: LoCoMo-style conversations with questions in
LoCoMo's four scored categories and exact gold answers), `locomo` (LoCoMo's published JSON as the same records),
`memory` (notes and pages, paper eq. 2-3, their validation, the oracle extractor, and the multi-indexed database,
eq. 4-6), `tools` (the retrieval agent's ten tools over it, with the per-question cache), `extract` (the LLM
extractor's one-shot prompt, its output's validation and the per-conversation cache), `metrics` (LoCoMo's F1,
BLEU-1, the reward, the per-category summary), `teacher` (the scripted teacher).
"""

from .env import TAMEM_SYSTEM_PROMPT, TamemEnv, TamemParams

__all__ = ["TAMEM_SYSTEM_PROMPT", "TamemEnv", "TamemParams"]
