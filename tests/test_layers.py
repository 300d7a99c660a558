"""The layer rules of the design ("Layers"), read from one table (`LAYERS`) and checked on every module's imports
with `ast` (lazy imports too).

From the bottom (layer 0): the tool-call formats, the record format and the other plain data/IO modules ·
(1) `acm`, the shared task data (`longcontext`, `memory`), `engines` · (2) `envs`: the contract, registry, reward
and task dispatch, and one package per environment · (3) `agent` (the loop) · (4) `samples`, `metrics` ·
(5) `train`, `eval`, `serve`, `rollout`, `slurm`, `crossepisode`, `probe` · (6) `pipeline` · (7) `cli`.

A module belongs to the unit of the longest prefix in `LAYERS` that names it. An import goes to a unit of a lower
layer or stays in its own unit; between two units of one layer it is an error (layer 0's modules excepted, and
the `PEERS` pairs), so: no environment package imports another, and the envs root imports none of them (its
registry imports them by path, when named); engines import neither the loop nor task data nor environments; nothing
below `train`, nor `serve`, imports `train`. On top of the layers (`FORBIDDEN`): the loop imports, of `envs`, only
the contract (`envs.base`) — no task family, ACM tool or reward rule.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sculptor_rl

ROOT = Path(sculptor_rl.__file__).parent

# unit (module prefix under sculptor_rl) -> layer
LAYERS = {
    # 0: formats and plain data/IO
    "toolcalls": 0, "config": 0, "jsonl": 0, "models": 0, "stats": 0, "logs": 0, "trajectory": 0, "records": 0,
    # 1: the ACM workspace, task data shared by several environments, engines
    "acm": 1, "longcontext": 1, "memory": 1, "engines": 1,
    # 2: the environment contract and what every environment shares (base, registry, reward, tasks by name, the
    # teacher policy), then one unit per environment package
    "envs": 2, "envs.acm": 2, "envs.baselines": 2, "envs.memtool": 2, "envs.tamem": 2, "envs.memtoolagent": 2,
    "envs.toolmem": 2,
    "agent": 3,
    "samples": 4, "metrics": 4,
    "train": 5, "eval": 5, "serve": 5, "view": 5, "rollout": 5, "slurm": 5, "crossepisode": 5, "probe": 5,
    "pipeline": 6,
    "cli": 7,
}
# (importer unit, imported unit) of one layer that may import each other
PEERS = {("eval", "rollout"), ("rollout", "eval")}
ENV_PACKAGES = [unit for unit in LAYERS if unit.startswith("envs.")]
# (importer unit, imported module prefix, except these prefixes): errors even where the layers allow them
FORBIDDEN = [("agent", "sculptor_rl.envs", ("sculptor_rl.envs.base",)),
             ("agent", "sculptor_rl.longcontext", ()), ("agent", "sculptor_rl.acm", ()),
             ("agent", "sculptor_rl.memory", ())]


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


def unit_of(module: str) -> str | None:
    """The unit of `module` (sculptor_rl.x.y...): the longest prefix in LAYERS; None for sculptor_rl itself."""
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return ".".join(parts[:n])
    return parts[0] if parts else None


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        src = unit_of(module_name(path, root))
        if src is None:  # the package's own __init__: its version only
            continue
        if src not in LAYERS:
            found.append(f"{path.relative_to(root)}:1: module unit {src!r} has no layer (add it to LAYERS)")
            continue
        layer = LAYERS[src]
        for line, target in imports(path, root):
            dst = unit_of(target)
            where = f"{path.relative_to(root)}:{line}: imports {target}"
            if dst not in LAYERS:
                found.append(f"{where} (a unit without a layer)")
                continue
            if LAYERS[dst] > layer:
                found.append(f"{where} (up: layer {layer} -> {LAYERS[dst]})")
            elif LAYERS[dst] == layer and layer > 0 and dst != src and (src, dst) not in PEERS \
                    and not (src in ENV_PACKAGES and dst == "envs"):  # an environment package uses the contract
                found.append(f"{where} (sideways within layer {layer}: {src} -> {dst})")
            for who, prefix, allowed in FORBIDDEN:
                if src == who and (target == prefix or target.startswith(prefix + ".")) \
                        and not any(target == a or target.startswith(a + ".") for a in allowed):
                    found.append(f"{where} (a rule of the design's Layers section)")
    return found


def test_every_import_follows_the_layers():
    bad = violations()
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_check_sees_violations(tmp_path):
    """The checker itself: a copy of the package with imports against each rule is flagged, line by line."""
    pkg = tmp_path / "sculptor_rl"
    for sub in ("engines", "agent", "longcontext", "serve", "envs", "envs/acm", "envs/memtool", "train"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "engines" / "x.py").write_text("from ..agent import loop\nfrom ..longcontext import score\n")
    (pkg / "longcontext" / "y.py").write_text("def f():\n    from ..envs import acm\n")
    (pkg / "agent" / "z.py").write_text("from ..envs.reward import compute_reward\nfrom ..envs.base import Env\n"
                                        "from ..longcontext import score\n")
    (pkg / "serve" / "w.py").write_text("import sculptor_rl.train.rl\n")
    (pkg / "envs" / "acm" / "v.py").write_text("from ..memtool import env\nfrom ..base import Env\n")
    (pkg / "envs" / "u.py").write_text("from .acm import teacher\nfrom . import base\n")
    bad = [v.split(": imports")[0] for v in violations(pkg)]
    assert sorted(bad) == sorted(["engines/x.py:1", "engines/x.py:2", "longcontext/y.py:2", "agent/z.py:1",
                                  "agent/z.py:3", "serve/w.py:1", "envs/acm/v.py:1", "envs/u.py:1"])


def test_importing_the_loop_loads_no_environment():
    """The registry is lazy: the agent loop (and the contract under it) load no environment package, no task data."""
    code = ("import sys, sculptor_rl.agent.loop; "
            "print('\\n'.join(m for m in sys.modules if m.startswith('sculptor_rl')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert not [m for m in loaded if m.startswith(("sculptor_rl.envs.", "sculptor_rl.longcontext", "sculptor_rl.acm",
                                                   "sculptor_rl.memory"))
                and m not in ("sculptor_rl.envs.base", "sculptor_rl.envs.registry", "sculptor_rl.envs.reward")]
    assert len(loaded) <= 15, loaded  # 56 before the environment packages


def test_an_engine_request_carries_no_task():
    from dataclasses import fields

    from sculptor_rl.engines.base import Request

    assert {f.name for f in fields(Request)} == {"prompt_ids", "messages", "max_new_tokens", "sampling", "tools",
                                                 "rollout_id"}
