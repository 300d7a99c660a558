"""Active Context Management: the six tools (schemas) and the workspace that runs them."""

from .schemas import CONTEXT_MODIFYING, READ_ONLY, TOOL_SCHEMAS
from .summarize import extractive_summarizer
from .workspace import ToolResult, Workspace

__all__ = ["CONTEXT_MODIFYING", "READ_ONLY", "TOOL_SCHEMAS", "ToolResult", "Workspace", "extractive_summarizer"]
