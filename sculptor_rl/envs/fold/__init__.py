"""Context-Folding (arXiv 2510.11967): `branch(description, prompt)` opens a sub-task that sees the main thread's
context; `return(message)` folds it: its turns leave the context and the main thread keeps only the message."""

from .env import BRANCH_TOOL, FOLD_SYSTEM_PROMPT, RETURN_TOOL, FoldEnv

__all__ = ["BRANCH_TOOL", "FOLD_SYSTEM_PROMPT", "FoldEnv", "RETURN_TOOL"]
