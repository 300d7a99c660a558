"""The run viewer: `sculptor-rl view PATH` writes one self-contained HTML page of a run folder, a trajectories
file or a samples file (`page`), with each trajectory drawn as a timeline of its context (`timeline`)."""

from .page import collect, serve, write_page
from .timeline import timeline

__all__ = ["collect", "serve", "timeline", "write_page"]
