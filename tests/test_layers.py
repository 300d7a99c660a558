"""The layer rules of the design ("Layers"), checked on every module's imports with `ast` (lazy imports too).

From the bottom: tool-call format (and plain data/IO modules) · acm, task families, engines · envs · agent
(the loop) · samples and metrics · train, eval, serve, rollout · pipeline · cli (the entry point). An import
goes down or stays inside its own package; sideways imports between the packages of one layer (above the
bottom one) are errors, and so are:
engines importing the loop, a task family or an environment; task families importing an environment; the loop
importing a task family, the ACM tools or a reward rule (it knows environments only by `envs.base`); anything
below train, or serve, importing train.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sculptor_rl

ROOT = Path(sculptor_rl.__file__).parent

# package (first part under sculptor_rl) -> (layer, group); one group per "sideways" unit of a layer
LAYERS = {
    "toolcalls": (0, "toolcalls"), "config": (0, "config"), "jsonl": (0, "jsonl"), "models": (0, "models"), "stats": (0, "stats"),
    "logs": (0, "logs"),  # the entry points' logging set-up
    "trajectory": (0, "trajectory"),  # the loop's output record: a data format, read by everything above
    "memory": (0, "memory"),  # cross-episode memory (MemToolAgent, ToolMem): a JSONL store and BM25 retrieval
    "acm": (1, "acm"), "tasks": (1, "tasks"), "memtool": (1, "tasks"), "engines": (1, "engines"),
    "tamem": (1, "tasks"),  # TA-Mem: LoCoMo-style conversations, the memory database and its ten tools, metrics
    "workbench": (1, "tasks"),  # MemToolAgent: the WorkBench-style sandbox, its task family, importers, metrics
    "toolmem": (1, "tasks"),  # ToolMem: experiences of the task families, the capability memory, its metrics
    "envs": (2, "envs"),
    "agent": (3, "agent"),
    "samples": (4, "samples"), "metrics": (4, "metrics"),
    "train": (5, "train"), "eval": (5, "eval"), "serve": (5, "serve"), "rollout": (5, "rollout"),
    "slurm": (5, "slurm"),
    "crossepisode": (5, "crossepisode"),  # MemToolAgent's driver: episodes in rounds, the memory updated between
    "pipeline": (6, "pipeline"),
    "cli": (7, "cli"),  # the entry point: each command calls one library function (pipeline's too)
}
# (importer package, imported module prefix) pairs that are errors even where the layers allow them
FORBIDDEN = [("agent", "sculptor_rl.tasks"), ("agent", "sculptor_rl.memtool"), ("agent", "sculptor_rl.acm"),
             ("agent", "sculptor_rl.envs.reward"), ("agent", "sculptor_rl.envs.acm"),
             ("agent", "sculptor_rl.envs.memtool"), ("agent", "sculptor_rl.envs.teachers"),
             ("agent", "sculptor_rl.envs.baselines"), ("agent", "sculptor_rl.envs.memtool_teacher"),
             ("agent", "sculptor_rl.envs.toolmem"),
             ("serve", "sculptor_rl.train")]
# layer-5 packages that may use each other (the rest of that layer stays apart)
PEERS = {("eval", "rollout"), ("rollout", "eval")}


def module_name(path: Path, root: Path) -> str:
    parts = ["sculptor_rl", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module.name) of every import of a sculptor_rl module in the file, wherever it stands."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("sculptor_rl")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("sculptor_rl"):
                out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]  # a name may be a module
    return out


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        src = package_of(module_name(path, root))
        if src is None:  # the package's own __init__: its version only
            continue
        if src not in LAYERS:
            found.append(f"{path.relative_to(root)}:1: module package {src!r} has no layer (add it to LAYERS)")
            continue
        layer, group = LAYERS[src]
        for line, target in imports(path, root):
            dst = package_of(target)
            where = f"{path.relative_to(root)}:{line}: imports {target}"
            if dst not in LAYERS:
                found.append(f"{where} (a package without a layer)")
                continue
            tlayer, tgroup = LAYERS[dst]
            if tlayer > layer:
                found.append(f"{where} (up: layer {layer} -> {tlayer})")
            elif tlayer == layer and layer > 0 and tgroup != group and (src, dst) not in PEERS:
                found.append(f"{where} (sideways within layer {layer})")
            for who, prefix in FORBIDDEN:
                if src == who and (target == prefix or target.startswith(prefix + ".")):
                    found.append(f"{where} (a rule of the design's Layers section)")
    return found


def test_every_import_follows_the_layers():
    bad = violations()
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_check_sees_violations(tmp_path):
    """The checker itself: a copy of the package with imports against each rule is flagged, line by line."""
    pkg = tmp_path / "sculptor_rl"
    for sub in ("engines", "agent", "tasks", "serve", "envs", "train"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "engines" / "x.py").write_text("from ..agent import loop\nfrom ..tasks import score\n")
    (pkg / "tasks" / "y.py").write_text("def f():\n    from ..envs import acm\n")
    (pkg / "agent" / "z.py").write_text("from ..envs.reward import compute_reward\nfrom ..envs.base import Env\n"
                                        "from ..tasks import score\n")
    (pkg / "serve" / "w.py").write_text("import sculptor_rl.train.rl\n")
    bad = [v.split(": imports")[0] for v in violations(pkg)]
    assert sorted(bad) == sorted(["engines/x.py:1", "engines/x.py:2", "tasks/y.py:2", "agent/z.py:1", "agent/z.py:3",
                                  "serve/w.py:1", "serve/w.py:1"])


def test_an_engine_request_carries_no_task():
    from dataclasses import fields

    from sculptor_rl.engines.base import Request

    assert {f.name for f in fields(Request)} == {"prompt_ids", "messages", "max_new_tokens", "sampling", "tools",
                                                 "rollout_id"}
